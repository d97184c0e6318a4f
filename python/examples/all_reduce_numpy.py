"""All-reduce of a NumPy array, in place and into an output, with no copy
into symmetric memory on the caller's side (symmem stages ordinary memory
through its scratch tensor, and reduces a symmetric tensor's memory
directly).

    symmem-run -n 4 python python/examples/all_reduce_numpy.py
"""
import sys

import numpy as np

import symmem


def main() -> int:
    with symmem.init() as comm:
        r, w = comm.rank, comm.size
        # An ordinary NumPy array, reduced in place.
        x = np.full(1 << 16, r + 1, dtype=np.float32)
        comm.all_reduce(x)
        expect = w * (w + 1) / 2
        ok = bool(np.all(x == expect))
        # A symmetric tensor seen as NumPy: max into a second array.
        t = comm.empty((256, 256), "int32").rendezvous()
        a = np.from_dlpack(t)
        a[:] = np.arange(a.size, dtype=np.int32).reshape(a.shape) * (r + 1)
        out = np.empty_like(a)
        comm.all_reduce(a, op="max", out=out)
        ok &= bool(np.array_equal(out, np.arange(a.size).reshape(a.shape) * w))
        print("rank %d/%d: all_reduce sum %s, max %s -> %s" %
              (r, w, x[0], out[-1, -1], "OK" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
