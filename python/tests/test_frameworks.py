"""PyTorch, CuPy and JAX consumers (CPU tensors here; the GPU run covers
device memory).  Each skips, with the reason, where the framework is absent."""
import importlib

import pytest

import symmem


def _need(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip("%s is not installed: %s" % (name, e))


def test_torch_zero_copy(comm):
    torch = _need("torch")
    t = comm.empty((4, 4), "bfloat16")
    x = torch.from_dlpack(t)
    assert x.dtype == torch.bfloat16 and x.shape == (4, 4)
    x.fill_(2.0)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == t.data_ptr and bool((y == 2.0).all())
    z = torch.ones(16, dtype=torch.float32)
    comm.all_reduce(z)
    assert bool((z == 1).all())


def test_torch_stream_object():
    torch = _need("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    from symmem.tensor import stream_handle
    s = torch.cuda.Stream()
    assert stream_handle(s) == s.cuda_stream


def test_cupy_zero_copy():
    cupy = _need("cupy")
    with symmem.init(rank=0, world_size=1) as c:
        if c.device < 0:
            pytest.skip("CuPy needs a GPU backend; this is %s" % c.backend)
        t = c.empty(8, "float32")
        a = cupy.from_dlpack(t)
        assert a.data.ptr == t.data_ptr


def test_jax_zero_copy(comm):
    jax = _need("jax")
    t = comm.empty(8, "float32")
    a = jax.dlpack.from_dlpack(t)
    assert a.shape == (8,)
