"""Neighbour exchange, as examples/neighbor_exchange.c: every rank writes a
pattern into its right neighbour's buffer through the remote view,
synchronises, and checks what its left neighbour wrote.  Rank 0 prints one
table through the store.

    symmem-run -n 4 python python/examples/neighbor_exchange.py
"""
import sys

import numpy as np

import symmem


def pattern(writer: int, n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.uint64)
    return (np.uint64(writer + 1) << np.uint64(40)) ^ (i * np.uint64(2654435761))


def main() -> int:
    with symmem.init() as comm:
        if comm.device >= 0:
            if comm.rank == 0:
                print("neighbor_exchange.py writes with the CPU; run it with SYMM_BACKEND=host",
                      file=sys.stderr)
            return 1
        n = 1 << 20  # 8 MiB of uint64 per rank
        t = comm.empty(n, "uint64").rendezvous()
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        np.from_dlpack(t.remote(right))[:] = pattern(comm.rank, n)
        comm.barrier()
        wrong = int(np.count_nonzero(np.from_dlpack(t) != pattern(left, n)))
        line = "%4d  %-7s %5d %6d  %10d  %9d  %s" % (
            comm.rank, comm.backend, right, left, t.nbytes, wrong, "FAIL" if wrong else "OK")
        comm.store["example/line/%d" % comm.rank] = line
        if comm.rank == 0:
            print("# neighbor exchange: %d ranks, each writes its right neighbour's buffer"
                  % comm.size)
            print("rank  backend wrote  from       bytes      wrong  check")
            for r in range(comm.size):
                print(comm.store.get("example/line/%d" % r).decode())
        comm.barrier()
        t.free()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
