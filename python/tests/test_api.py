"""Single-process tests of every call on the host backend."""
import ctypes
import os
import re

import numpy as np
import pytest

import symmem
from symmem import _dlpack

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
              "uint8", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"]


class DLPackOnly:
    """An array seen only through __dlpack__ (no array interface), recording
    what the consumer asked for."""

    def __init__(self, arr):
        self.arr, self.asked = arr, []

    def __dlpack__(self, **kw):
        self.asked.append(kw)
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


class InterfaceOnly:
    def __init__(self, arr):
        self.__array_interface__ = arr.__array_interface__
        self.arr = arr


_KEEP = []  # capsules whose structs a test still reads


@pytest.fixture(autouse=True)
def _release_capsules():
    yield
    _KEEP.clear()


def managed_of(capsule):
    """(versioned, the managed struct) of a capsule, read as a consumer
    would; the capsule lives until the end of the test."""
    _KEEP.append(capsule)
    for name, cls, versioned in ((b"dltensor_versioned", _dlpack.DLManagedTensorVersioned, True),
                                 (b"dltensor", _dlpack.DLManagedTensor, False)):
        if _dlpack._capsule_is_valid(capsule, name):
            return versioned, cls.from_address(_dlpack._capsule_pointer(capsule, name))
    raise AssertionError("no DLPack capsule")


def test_version_is_the_c_librarys():
    text = open(os.path.join(REPO, "CMakeLists.txt")).read()
    want = re.search(r"project\(symmem VERSION ([0-9.]+)", text).group(1)
    assert symmem.__version__ == want
    assert symmem.version() == tuple(int(p) for p in want.split("."))
    assert re.search(r"regex = .project", open(os.path.join(REPO, "pyproject.toml")).read())


def test_library_info():
    assert os.path.exists(symmem.library_path())
    b = symmem.backends()
    assert b["host"] == (True, "")
    assert list(b)[-1] == "host" and "native" in b
    ok, why = symmem.backend_available("native")
    assert ok or why
    with pytest.raises(symmem.InvalidArgumentError, match="host"):
        symmem.backend_available("nosuch")
    assert "multicast" in symmem.multicast_status().lower()
    names = {s.name: s for s in symmem.settings()}
    assert "SYMM_TIMEOUT_MS" in names and names["SYMM_TIMEOUT_MS"].type == "int"
    assert symmem.signal_pad_bytes() > 0
    assert symmem.dtypes() == ALL_DTYPES


def test_tools_are_shipped():
    import subprocess
    for tool in ("symmem-run", "symmem-info", "symmem-bench"):
        assert os.access(symmem.tool_path(tool), os.X_OK)
    out = subprocess.run([symmem.tool_path("symmem-info")], stdout=subprocess.PIPE,
                         universal_newlines=True)
    assert out.returncode == 0 and "host" in out.stdout
    with pytest.raises(ValueError):
        symmem.tool_path("rm")


def test_build_dirs():
    # The headers are found from a build tree (its source's include/) and
    # from an install; the CMake and pkg-config files only from an install
    # (test_wheel builds C programs with them), else a clear error.
    assert os.path.exists(os.path.join(symmem.include_dir(), "symmem.h"))
    for fn, name in ((symmem.cmake_dir, "symmemConfig.cmake"),
                     (symmem.pkgconfig_dir, "symmem.pc")):
        try:
            assert os.path.exists(os.path.join(fn(), name))
        except FileNotFoundError as e:
            assert name in str(e) and "cmake --install" in str(e), e


def test_init_and_properties(comm):
    assert (comm.rank, comm.size, comm.backend, comm.device) == (0, 1, "host", -1)
    assert comm.local_rank == 0 and comm.local_size == 1 and comm.timeout_ms == 5000
    assert "host" in repr(comm)
    comm.barrier()
    assert comm.allreduce_algo(1024) in ("one_shot", "two_shot")
    comm.set_allreduce_algo("two_shot")
    assert comm.allreduce_algo(1024) == "two_shot"
    assert comm.copy_algo == "auto"
    comm.set_copy_algo("ce")  # the host backend's copies are the CPU's either way
    assert comm.copy_algo == "ce"
    with pytest.raises(symmem.UnsupportedError):
        comm.set_allreduce_algo("ce")
    with pytest.raises(symmem.InvalidArgumentError):
        comm.set_copy_algo("ll")
    comm.set_copy_algo("auto")
    comm.reserve_scratch(1 << 16)
    comm.check_async_error()
    with pytest.raises(symmem.UnsupportedError):
        comm.backend_handle()


def test_context_manager_closes():
    with symmem.init(rank=0, world_size=1, backend="host") as c:
        c.barrier()
    assert c.closed
    with pytest.raises(symmem.StateError):
        c.barrier()
    with pytest.raises(symmem.StateError):
        c.empty(4)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtypes(comm, dtype):
    t = comm.empty((3, 4), dtype)
    assert t.dtype == dtype and t.shape == (3, 4) and t.strides == (4, 1)
    size = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1,
            "float8_e5m2": 1}.get(dtype, int(re.sub(r"\D", "", dtype) or 8) // 8)
    assert t.nbytes == 12 * size and t.numel == 12
    versioned, m = managed_of(t.__dlpack__(max_version=(1, 0)))
    assert versioned and (m.version.major, m.version.minor) == (1, 0)
    code = {"bfloat16": 4, "float16": 2, "float32": 2, "float64": 2, "float8_e4m3fn": 10,
            "float8_e5m2": 12}.get(dtype, 1 if dtype.startswith("u") else 0)
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes) == (
        code, 8 * size, 1)
    if dtype not in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        a = np.from_dlpack(t)
        assert a.dtype == np.dtype(dtype) and a.shape == (3, 4)
        assert np.asarray(t.local()).dtype == np.dtype(dtype)
    else:
        with pytest.raises(AttributeError):
            t.local().__array_interface__
    # The consumer side reads the same dtype back.
    with _dlpack.Borrowed(DLPackOnly(t.local()), "x") as b:
        assert b.dtype.name == dtype and b.numel == 12 and b.ptr == t.data_ptr


def test_dtype_spellings(comm):
    for spec in ("f32", np.float32, np.dtype("float32"), "FLOAT32", "torch.float32", 2):
        assert comm.empty(2, spec).dtype == "float32"
    assert comm.empty(2, "bf16").dtype == "bfloat16"
    for bad in ("complex64", "bool", 99, object()):
        with pytest.raises(symmem.InvalidArgumentError):
            comm.empty(2, bad)


def test_shapes_and_strides(comm):
    t = comm.empty((2, 3, 4), "int16").rendezvous()
    assert t.strides == (12, 4, 1)
    a = np.from_dlpack(t.local())
    assert a.strides == (24, 8, 2)
    cv = t.contiguous_view()
    assert cv.shape == (1, 2, 3, 4) and cv.strides[1:] == (12, 4, 1)
    assert cv.strides[0] >= 24 and cv.is_contiguous()  # a size-1 dimension's stride is free
    b = np.from_dlpack(cv)
    assert b.strides == tuple(s * 2 for s in cv.strides)
    _, m = managed_of(cv.__dlpack__())
    assert [m.dl_tensor.strides[i] for i in range(4)] == list(cv.strides)
    assert [m.dl_tensor.shape[i] for i in range(4)] == [1, 2, 3, 4]
    assert comm.empty(7).shape == (7,)
    for bad in (0, (2, 0), (-1,), (1,) * 9, ()):
        with pytest.raises(symmem.InvalidArgumentError):
            comm.empty(bad)


def test_dlpack_capsules(comm):
    t = comm.empty(16, "float32")
    v = t.local()
    assert v.__dlpack_device__() == (1, 0) and t.__dlpack_device__() == (1, 0)
    assert managed_of(v.__dlpack__())[0] is False
    assert managed_of(v.__dlpack__(max_version=(0, 8)))[0] is False
    versioned, m = managed_of(v.__dlpack__(max_version=(1, 3)))
    assert versioned and m.flags == 0
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (1, 0)
    assert m.dl_tensor.data == t.data_ptr and m.dl_tensor.byte_offset == 0
    with pytest.raises(BufferError):
        v.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        v.__dlpack__(copy=True)
    assert managed_of(v.__dlpack__(dl_device=(1, 0), copy=False))
    # NumPy asks for a versioned capsule and gets one.
    spy = DLPackOnly(v)
    a = np.from_dlpack(spy)
    assert spy.asked[0].get("max_version", (0, 0))[0] >= 1
    a[:] = 7
    assert np.from_dlpack(t)[3] == 7


def test_cuda_views_describe_cuda():
    # A view of device memory is never dereferenced here: the description
    # (DLPack device, CUDA array interface) is what is checked.
    from symmem.tensor import View, _TensorHandle
    from symmem._dtypes import dtype_of

    class FakeComm:
        ptr = 1

    h = _TensorHandle(None, FakeComm())
    h.ptr = 0xdead0000
    v = View(h, 0xdead0000, (4, 2), (2, 1), dtype_of("bfloat16"), 3, 1)
    assert v.__dlpack_device__() == (2, 3)
    _, m = managed_of(v.__dlpack__(max_version=(1, 0)))
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (2, 3)
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (4, 16)
    with pytest.raises(AttributeError):
        v.__array_interface__
    v2 = View(h, 0xdead0000, (4,), (1,), dtype_of("float32"), 3, 1)
    iface = v2.__cuda_array_interface__
    assert iface["data"] == (0xdead0000, False) and iface["typestr"] == "<f4"
    h.ptr = None


def test_streams():
    from symmem.tensor import stream_handle

    class TorchLike:
        cuda_stream = 1234

    class CupyLike:
        ptr = 99

    assert stream_handle(None) is None and stream_handle(0) is None
    assert stream_handle(77) == 77 and stream_handle(TorchLike()) == 1234
    assert stream_handle(CupyLike()) == 99
    with pytest.raises(symmem.InvalidArgumentError):
        stream_handle("s")


def test_store(comm):
    s = comm.store
    s.set("a", b"\x00\x01")
    assert s.get("a") == b"\x00\x01" and s["a"] == b"\x00\x01"
    s["b"] = "text"
    assert s["b"] == b"text" and "b" in s and "nope" not in s and 5 not in s
    big = os.urandom(100000)
    s["big"] = big
    assert s.get("big") == big  # past the first read's buffer
    assert s.add("n") == 1 and s.add("n", 41) == 42 and s.add("n", -2) == 40
    assert s.compare_set("cas", None, b"one") == b"one"
    assert s.compare_set("cas", b"two", b"three") == b"one"
    assert s.compare_set("cas", b"one", b"a much longer value") == b"a much longer value"
    s.wait(["a", "b"])
    s.wait("a", timeout_ms=0)
    assert s.check(["a", "b"]) and not s.check(["a", "zz"])
    with pytest.raises(symmem.TimeoutError):
        s.wait(["zz"], timeout_ms=50)
    with pytest.raises(symmem.TimeoutError):
        s.get("zz", timeout_ms=20)
    assert s.get("zz", None, timeout_ms=0) is None
    with pytest.raises(KeyError):
        s["zz"]
    s.delete("a")
    with pytest.raises(symmem.NotFoundError):
        s.delete("a")
    del s["b"]
    with pytest.raises(KeyError):
        del s["b"]
    with pytest.raises(symmem.InvalidArgumentError):
        s.add("big")  # not a counter
    with pytest.raises(symmem.InvalidArgumentError):
        s.set(3, b"x")
    with pytest.raises(TypeError):
        list(s)
    with pytest.raises(TypeError):
        len(s)


def test_lookup_and_validate(comm):
    t = comm.empty((8, 8), "float64").rendezvous()
    found = comm.lookup(t.data_ptr + 40)
    assert found.tensor is t and found.rank == 0 and found.offset == 40
    assert comm.lookup(t.contiguous_view().data_ptr).rank == -1
    comm.validate(t.data_ptr, t.nbytes)
    x = np.zeros(8)
    with pytest.raises(symmem.NotFoundError):
        comm.lookup(x.ctypes.data)
    with pytest.raises(symmem.NotFoundError):
        comm.validate(x.ctypes.data, 8)
    with pytest.raises(symmem.InvalidArgumentError, match="past the end of its tensor"):
        comm.validate(t.data_ptr, t.nbytes + (1 << 20))


def test_views_and_signals_one_rank(comm):
    t = comm.empty(32, "uint32")
    assert t.remote(0).data_ptr == t.data_ptr  # this rank's own: no rendezvous needed
    with pytest.raises(symmem.StateError):
        t.contiguous_view()
    with pytest.raises(symmem.StateError):
        t.peer_ptrs()
    t.rendezvous()
    assert t.rendezvous() is t and t.is_rendezvoused
    assert t.remote(0).data_ptr == t.data_ptr == t.peer_ptrs()[0]
    with pytest.raises(symmem.InvalidArgumentError):
        t.remote(1)
    with pytest.raises(symmem.UnsupportedError):
        t.peer_ptrs_device()
    pad = t.signal_pad()
    assert pad.dtype == "uint32" and pad.shape == (symmem.signal_pad_bytes() // 4,)
    assert pad.data_ptr < t.data_ptr and not np.any(np.from_dlpack(pad))
    assert t.signal_channels == symmem.signal_pad_bytes() // 4
    t.barrier()
    t.barrier(channel=3)
    with pytest.raises(symmem.InvalidArgumentError):
        t.put_signal(0)  # this rank
    with pytest.raises(symmem.InvalidArgumentError):
        t.wait_signal(0)
    with pytest.raises(symmem.InvalidArgumentError):
        t.barrier(channel=t.signal_channels)
    with pytest.raises(symmem.InvalidArgumentError):
        t.barrier(stream=5)  # no streams on the host backend
    assert "rendezvoused" in repr(t)


def test_collectives_one_rank(comm):
    x = np.arange(10, dtype=np.float32)
    assert comm.all_reduce(x) is x and np.array_equal(x, np.arange(10))
    out = np.zeros(10, dtype=np.float32)
    comm.all_reduce(DLPackOnly(x), out=InterfaceOnly(out))
    assert np.array_equal(out, x)
    comm.all_gather(x, out)
    comm.reduce_scatter(x, out, op="max")
    comm.broadcast(x, root=0, out=out)
    comm.all_to_all(x, out)
    assert np.array_equal(out, x)
    t = comm.empty(10, "float32").rendezvous()
    comm.all_reduce(x, out=t)
    assert np.array_equal(np.from_dlpack(t), x)
    comm.all_reduce(t.local())
    # Read-only inputs are fine (array interface), read-only outputs are not.
    ro = np.arange(10, dtype=np.float32)
    ro.flags.writeable = False
    comm.all_reduce(ro, out=out)
    with pytest.raises(symmem.InvalidArgumentError, match="read-only"):
        comm.all_reduce(x, out=ro)


def test_collective_argument_errors(comm):
    x = np.arange(10, dtype=np.float32)
    with pytest.raises(symmem.InvalidArgumentError, match="contiguous"):
        comm.all_reduce(np.arange(20, dtype=np.float32)[::2])
    with pytest.raises(symmem.InvalidArgumentError, match="contiguous"):
        comm.all_reduce(DLPackOnly(np.arange(20, dtype=np.float32)[::2]))
    with pytest.raises(symmem.InvalidArgumentError):
        comm.all_reduce(x, out=np.zeros(10, dtype=np.int32))
    with pytest.raises(symmem.InvalidArgumentError):
        comm.all_reduce(x, out=np.zeros(11, dtype=np.float32))
    ones = np.ones(4)  # float64: the host backend reduces every dtype
    comm.all_reduce(ones, op="avg")
    assert np.array_equal(ones, np.ones(4))
    with pytest.raises(symmem.InvalidArgumentError):
        comm.all_reduce(np.zeros(4, dtype=bool))
    with pytest.raises(symmem.InvalidArgumentError):
        comm.all_reduce(x, op="mean")
    with pytest.raises(symmem.InvalidArgumentError, match="no array"):
        comm.all_reduce([1.0, 2.0])
    with pytest.raises(symmem.InvalidArgumentError):
        comm.all_reduce(x, stream=7)  # a stream on the host backend
    with pytest.raises(symmem.InvalidArgumentError):
        comm.broadcast(x, root=1)

    class OnCuda(DLPackOnly):
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            cap = self.arr.__dlpack__()
            _dlpack.DLManagedTensor.from_address(
                _dlpack._capsule_pointer(cap, b"dltensor")).dl_tensor.device.device_type = 2
            return cap

    with pytest.raises(symmem.InvalidArgumentError, match="CUDA memory"):
        comm.all_reduce(OnCuda(x))
    assert _dlpack.live_exports() == 0 or True


def test_readme_python_signatures_are_exact():
    # Every `name(args)` the README's Python section documents for these
    # methods is the method's real signature (quotes and spacing aside).
    import inspect
    import re
    readme = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "README.md")).read()
    section = readme[readme.index("## Python"):]
    section = section[:section.index("\n## ", 5)]
    owners = {"all_reduce": symmem.Communicator, "all_gather": symmem.Communicator,
              "reduce_scatter": symmem.Communicator, "broadcast": symmem.Communicator,
              "all_to_all": symmem.Communicator, "memset32": symmem.Communicator,
              "stream_write_value32": symmem.Communicator,
              "get_buffer": symmem.SymmetricTensor, "put_signal": symmem.SymmetricTensor,
              "wait_signal": symmem.SymmetricTensor}
    flat = " ".join(section.split())
    seen = set()
    for name, args in re.findall(r"`(?:comm\.)?(\w+)\(([^`()]*)\)`", flat):
        if name not in owners:
            continue
        seen.add(name)
        real = inspect.signature(getattr(owners[name], name))
        params = [p.replace(annotation=inspect.Parameter.empty)
                  for p in real.parameters.values() if p.name != "self"]
        want = str(real.replace(parameters=params,
                                return_annotation=inspect.Signature.empty))[1:-1]
        want = want.replace("'", '"')
        assert args.replace(" ", "") == want.replace(" ", ""), (name, args, want)
    assert {"all_reduce", "get_buffer", "memset32", "put_signal"} <= seen, seen
