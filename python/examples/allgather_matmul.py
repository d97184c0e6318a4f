"""All-gather overlapped with a matrix product, chunk by chunk, with the
signal pads, beside the plain way (all_gather, then one product).

Every rank holds `m` rows of A and all of B, and wants C = A_all @ B, where
A_all stacks every rank's rows.  Each rank writes its rows into slot `rank`
of every peer's gather buffer and signals that peer; it multiplies its own
rows at once and each peer's as soon as that peer's signal arrives.  On a
GPU backend the writes, signals and products are all on one stream (the
products overlap the peers' writes); on the host backend (CPU tensors) the
same code runs on the calling thread.

    symmem-run -n 2 python python/examples/allgather_matmul.py            (PyTorch)
    SYMM_BACKEND=host symmem-run -n 4 python python/examples/allgather_matmul.py --numpy
"""
import sys

import symmem


def run(comm, xp, to_array, stream):
    r, w = comm.rank, comm.size
    m, k, n = 64, 96, 48
    gather = comm.empty((w, m, k), "float32").rendezvous()
    g_local = to_array(gather.local())
    a = (xp.arange(m * k, dtype=xp.float32).reshape(m, k) * (r + 1)) % 7 - 3
    b = (xp.arange(k * n, dtype=xp.float32).reshape(k, n) % 5) * 0.25
    c = xp.zeros((w * m, n), dtype=xp.float32)
    # Overlapped: scatter this rank's rows, signal, then multiply as they come.
    for p in range(w):
        if p != r:
            to_array(gather.remote(p))[r] = a
            gather.put_signal(p, channel=0, stream=stream)
    c[r * m:(r + 1) * m] = a @ b
    for step in range(1, w):
        p = (r - step) % w
        gather.wait_signal(p, channel=0, stream=stream)
        c[p * m:(p + 1) * m] = g_local[p] @ b
    gather.barrier(channel=1, stream=stream)  # slots free again on every rank
    # The plain way: the whole all-gather first, then one product.
    a_all = xp.zeros((w * m, k), dtype=xp.float32)
    comm.all_gather(a, a_all, stream=stream)
    plain = a_all @ b
    ok = bool(abs(c - plain).max() < 1e-4)
    del g_local
    gather.free()
    return ok


def main() -> int:
    use_numpy = "--numpy" in sys.argv[1:]
    torch = None
    if not use_numpy:
        try:
            import torch
        except ImportError:
            use_numpy = True
    with symmem.init() as comm:
        if use_numpy:
            import numpy as np
            if comm.device >= 0:
                print("the NumPy version runs on the host backend", file=sys.stderr)
                return 1
            ok = run(comm, np, np.from_dlpack, None)
            lib = "numpy"
        else:
            stream = None
            if comm.device >= 0:
                torch.cuda.set_device(comm.device)
                stream = torch.cuda.current_stream()

            class TorchNS:  # the few array functions run() needs, on the right device
                float32 = torch.float32
                dev = "cuda:%d" % comm.device if comm.device >= 0 else "cpu"

                @classmethod
                def arange(cls, n, dtype):
                    return torch.arange(n, dtype=dtype, device=cls.dev)

                @classmethod
                def zeros(cls, shape, dtype):
                    return torch.zeros(shape, dtype=dtype, device=cls.dev)

            ok = run(comm, TorchNS, torch.from_dlpack, stream)
            if comm.device >= 0:
                torch.cuda.synchronize()
            lib = "torch on %s" % TorchNS.dev
        print("rank %d/%d (%s): all-gather overlapped with matmul matches the plain way: %s" %
              (comm.rank, comm.size, lib, "OK" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
