"""The calls a PyTorch symm_mem user reaches for: get_buffer, View.view(dtype),
bfloat16 from NumPy (ml_dtypes), stream-ordered 32-bit writes and fills.
Checked against NumPy always and against PyTorch on CPU where it is
installed (SKIP with the reason otherwise)."""
import numpy as np
import pytest

import symmem


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed here")


def _ml_dtypes():
    return pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed here")


def test_get_buffer_reinterprets_inside_the_tensor(comm):
    t = comm.empty(64, "float32").rendezvous()
    a = t.local().numpy()
    a[:] = np.arange(64, dtype=np.float32)
    # Another shape, dtype and offset: the same bytes, no copy.
    b = t.get_buffer(comm.rank, (4, 8), "int32", storage_offset=16)
    assert b.shape == (4, 8) and b.strides == (8, 1) and b.dtype == "int32"
    got = b.numpy()
    assert np.array_equal(got, a[16:48].view(np.int32).reshape(4, 8))
    got[0, 0] = np.float32(-2.5).view(np.int32)
    assert a[16] == -2.5
    assert t.get_buffer(comm.rank, 256, "uint8").numpy().nbytes == 256
    assert t.get_buffer(comm.rank, [2, 2]).dtype == "float32"
    with pytest.raises(symmem.InvalidArgumentError, match="run past the tensor's 256 bytes"):
        t.get_buffer(comm.rank, 33, "float64")
    with pytest.raises(symmem.InvalidArgumentError):
        t.get_buffer(comm.rank, 8, "float32", storage_offset=60)
    with pytest.raises(symmem.InvalidArgumentError):
        t.get_buffer(comm.rank, -1)
    with pytest.raises(symmem.InvalidArgumentError):
        t.get_buffer(1, 4)  # a rank out of range


def test_view_dtype(comm):
    t = comm.empty((3, 4), "float32")
    v = t.local()
    v.numpy()[:] = 1.0
    u8 = v.view("uint8")
    assert u8.shape == (3, 16) and u8.strides == (16, 1)
    assert np.array_equal(u8.numpy(), v.numpy().view(np.uint8))
    f64 = v.view("float64")
    assert f64.shape == (3, 2)
    with pytest.raises(symmem.InvalidArgumentError, match="no multiple of 8"):
        comm.empty(3, "float32").local().view("float64")
    # Not contiguous: a contiguous view's rank-slice of a later rank is, the
    # whole padded view is not (gaps between the ranks' parts).
    cv = t.rendezvous().contiguous_view()
    if not cv.is_contiguous():
        with pytest.raises(symmem.InvalidArgumentError, match="not contiguous"):
            cv.view("uint8")


def test_get_buffer_against_torch(comm):
    torch = _torch()
    t = comm.empty(32, "float32").rendezvous()
    t.local().numpy()[:] = np.arange(32, dtype=np.float32)
    ref = torch.from_dlpack(t.local())
    got = torch.from_dlpack(t.get_buffer(comm.rank, (2, 4), "float32", storage_offset=8))
    assert torch.equal(got, ref[8:16].view(2, 4))
    assert torch.equal(torch.from_dlpack(t.local().view("int32")), ref.view(torch.int32))


def test_bfloat16_from_numpy_with_ml_dtypes(comm):
    ml_dtypes = _ml_dtypes()
    t = comm.empty(8, "bfloat16")
    a = t.local().numpy()
    assert a.dtype == ml_dtypes.bfloat16 and a.shape == (8,)
    a[:] = np.arange(8).astype(ml_dtypes.bfloat16)
    # The same memory, seen as raw bits through uint16.
    assert np.array_equal(t.local().view("uint16").numpy(), a.view(np.uint16))
    # ml_dtypes arrays go into the collectives as bfloat16.
    x = np.full(8, 1.5, dtype=ml_dtypes.bfloat16)
    comm.all_reduce(x)
    assert np.all(x.astype(np.float32) == 1.5)
    out = np.empty(8, dtype=ml_dtypes.bfloat16)
    comm.all_reduce(t, out=out)
    assert np.array_equal(out.astype(np.float32), np.arange(8, dtype=np.float32))
    with pytest.raises(symmem.InvalidArgumentError, match="float32 but out is bfloat16"):
        comm.all_reduce(np.ones(8, np.float32), out=out)


def test_stream_write_value32_and_memset32(comm):
    t = comm.empty(16, "int32").rendezvous()
    a = t.local().numpy()
    a[:] = 0
    comm.memset32(t, 4, 0x7F, 8)
    assert list(a) == [0] * 4 + [0x7F] * 8 + [0] * 4
    comm.stream_write_value32(t, 15, -1)  # -1 is 0xffffffff
    assert a[15] == -1
    # A signal pad view (uint32) and plain NumPy arrays are targets too.
    pad = t.signal_pad()
    comm.stream_write_value32(pad, pad.shape[0] - 1, 5)
    assert pad.numpy()[-1] == 5
    comm.stream_write_value32(pad, pad.shape[0] - 1, 0)
    f = np.zeros(4, np.float32)
    comm.memset32(f, 0, np.float32(1.5).view(np.uint32).item(), 4)
    assert np.all(f == 1.5)
    comm.memset32(f, 4, 9, 0)  # count 0 at the end: nothing
    with pytest.raises(symmem.InvalidArgumentError, match="outside the target's 16"):
        comm.memset32(t, 10, 1, 7)
    with pytest.raises(symmem.InvalidArgumentError, match="32-bit elements"):
        comm.stream_write_value32(np.zeros(4, np.int64), 0, 1)
    with pytest.raises(symmem.InvalidArgumentError, match="does not fit 32 bits"):
        comm.stream_write_value32(t, 0, 1 << 32)
    ro = np.zeros(4, np.int32)
    ro.flags.writeable = False
    with pytest.raises(symmem.InvalidArgumentError, match="read-only"):
        comm.memset32(ro, 0, 1, 1)
    with pytest.raises(symmem.InvalidArgumentError, match="takes no stream"):
        comm.stream_write_value32(t, 0, 1, stream=0x10)
    with pytest.raises(symmem.UnsupportedError, match="signal_pad"):
        t.signal_pad_ptrs_device()


def test_stream_write_value32_against_torch(comm):
    torch = _torch()
    x = torch.zeros(8, dtype=torch.int32)
    comm.memset32(x, 2, 3, 4)
    comm.stream_write_value32(x, 7, 11)
    assert x.tolist() == [0, 0, 3, 3, 3, 3, 0, 11]
