"""PyTorch on the GPU: a symmetric tensor allocated by symmem, seen by
PyTorch without a copy; each rank writes its right neighbour's buffer with a
torch operation, then all-reduces on PyTorch's current stream.

    symmem-run -n 2 python python/examples/torch_gpu.py     (one GPU per rank)
"""
import sys

import torch

import symmem


def main() -> int:
    with symmem.init() as comm:
        if comm.device < 0:
            print("torch_gpu.py needs a GPU backend (native); this is %s" % comm.backend,
                  file=sys.stderr)
            return 1
        torch.cuda.set_device(comm.device)
        stream = torch.cuda.current_stream()
        n = 1 << 20
        t = comm.empty(n, "float32").rendezvous()
        local = torch.from_dlpack(t)
        right = torch.from_dlpack(t.remote((comm.rank + 1) % comm.size))
        right.fill_(comm.rank + 1.0)               # a kernel storing into the peer's memory
        t.barrier(channel=0, stream=stream)         # ordered on the stream, release/acquire
        left = (comm.rank - 1) % comm.size
        ok = bool(torch.all(local == left + 1.0))
        comm.all_reduce(local, stream=stream)       # in place, on the current stream
        w = comm.size
        ok &= bool(torch.all(local == w * (w + 1) / 2))
        comm.check_async_error()
        print("rank %d/%d on cuda:%d: neighbour write and all_reduce %s" %
              (comm.rank, w, comm.device, "OK" if ok else "FAIL"))
        del local, right
        t.free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
