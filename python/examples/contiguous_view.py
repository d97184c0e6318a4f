"""The contiguous view: every rank's buffer mapped back to back, one array
of shape (size, *shape) that spans the job.  Each rank fills its own
buffer; then one NumPy reduction over the view's first axis sums across
ranks, without a collective call (host backend; GPU kernels read the
native backend's view the same way).

    SYMM_BACKEND=host symmem-run -n 4 python python/examples/contiguous_view.py
"""
import sys

import numpy as np

import symmem


def main() -> int:
    with symmem.init() as comm:
        if comm.device >= 0:
            print("contiguous_view.py reads with NumPy: SYMM_BACKEND=host", file=sys.stderr)
            return 1
        t = comm.empty((1000, 8), "int64").rendezvous()
        np.from_dlpack(t)[:] = np.arange(8000).reshape(1000, 8) + 10**6 * (comm.rank + 1)
        comm.barrier()
        everyone = np.from_dlpack(t.contiguous_view())  # (size, 1000, 8), no copy
        total = everyone.sum(axis=0)
        w = comm.size
        want = np.arange(8000).reshape(1000, 8) * w + 10**6 * w * (w + 1) // 2
        ok = everyone.shape == (w, 1000, 8) and np.array_equal(total, want)
        print("rank %d/%d: sum over ranks through the contiguous view %s: %s" %
              (comm.rank, w, everyone.shape, "OK" if ok else "FAIL"))
        del everyone
        comm.barrier()  # nobody frees while a peer still reads
        t.free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
