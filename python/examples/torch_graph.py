"""A symmem all-reduce captured in a PyTorch CUDA graph and replayed: the
call is stream-ordered on torch's capture stream, so the graph replays it
with fresh inputs.

    symmem-run -n 2 python python/examples/torch_graph.py     (one GPU per rank)
"""
import sys

import torch

import symmem


def main() -> int:
    with symmem.init() as comm:
        if comm.device < 0:
            print("torch_graph.py needs a GPU backend; this is %s" % comm.backend,
                  file=sys.stderr)
            return 1
        torch.cuda.set_device(comm.device)
        t = comm.empty(1 << 16, "float32").rendezvous()
        x = torch.from_dlpack(t)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            comm.all_reduce(x, stream=stream)       # warm-up: scratch is made outside capture
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            comm.all_reduce(x, stream=stream)
        w = comm.size
        ok = True
        for _ in range(3):
            x.fill_(comm.rank + 1.0)
            torch.cuda.synchronize()
            graph.replay()
            torch.cuda.synchronize()
            ok &= bool(torch.all(x == w * (w + 1) / 2))
        comm.check_async_error()
        print("rank %d/%d: all_reduce replayed 3 times from a torch CUDA graph: %s" %
              (comm.rank, w, "OK" if ok else "FAIL"))
        del x, graph
        t.free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
