"""Communicator.register: memory the caller has, made symmetric.

The host backend's memfd case runs anywhere (one rank here; test_ranks.py
runs it on 2 and 3); the GPU case needs PyTorch with a CUDA device and the
cuda backend (cudaMalloc memory, as torch's caching allocator gives), and
skips with the reason elsewhere.
"""
import gc
import mmap
import os

import numpy as np
import pytest

import symmem


def test_host_memfd_one_rank():
    fd = os.memfd_create("register-test")
    os.ftruncate(fd, mmap.PAGESIZE)
    mm = mmap.mmap(fd, mmap.PAGESIZE)
    arr = np.frombuffer(mm, dtype=np.float32, count=256)
    with symmem.init(rank=0, world_size=1, backend="host") as comm:
        t = comm.register(arr, fd=fd).rendezvous()
        os.close(fd)
        assert t.shape == (256,) and t.local().data_ptr == arr.ctypes.data
        t.remote(0).numpy()[:] = 2.5
        assert (arr == 2.5).all()
        with pytest.raises(symmem.InvalidArgumentError, match="overlaps"):
            comm.register(arr, fd=os.memfd_create("again"))
        t.free()
        assert (arr == 2.5).all()  # still the caller's
        with pytest.raises(symmem.InvalidArgumentError, match="read-only"):
            comm.register(np.frombuffer(bytes(64), dtype=np.uint8))
    del t, arr
    gc.collect()  # the refused call's traceback held the array
    mm.close()


def test_gpu_cuda_malloc_one_rank():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible (torch.cuda.is_available() is False)")
    ok, why = symmem.backend_available("cuda")
    if not ok:
        pytest.skip("the cuda backend is not available here: %s" % why)
    x = torch.zeros(1024, dtype=torch.float32, device="cuda")
    with symmem.init(rank=0, world_size=1, backend="cuda") as comm:
        t = comm.register(x).rendezvous()
        assert t.local().data_ptr == x.data_ptr() and t.shape == (1024,)
        comm.all_reduce(x, out=x)
        t.free()
    assert x.sum().item() == 0.0
