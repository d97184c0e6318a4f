"""PyTorch's allocator inside symmetric memory: a torch.cuda.MemPool whose
blocks are symmem's (symm_mempool_alloc through CUDAPluggableAllocator), so
that ordinary torch.empty tensors can be rendezvoused and reached by every
rank; then the stream-ordered flag of PyTorch symm_mem (stream_write_value32)
after a peer write.

    symmem-run -n 2 python python/examples/torch_mempool.py   (one GPU per rank,
    or ranks sharing one with SYMM_ALLOW_SHARED_DEVICE=1)
"""
import sys

import torch

import symmem


def main() -> int:
    with symmem.init() as comm:
        if comm.device < 0:
            print("torch_mempool.py needs a GPU backend that allocates locally (native, "
                  "cuda); this is %s" % comm.backend, file=sys.stderr)
            return 1
        torch.cuda.set_device(comm.device)
        stream = torch.cuda.current_stream()
        # The pool lives with the communicator (closing it deletes the pool,
        # which gives the blocks back); keep no other reference to it.
        with torch.cuda.use_mem_pool(comm.torch_mem_pool()):
            x = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
        t = comm.rendezvous(x)  # collective: the block holding x, on every rank
        found = comm.lookup(x.data_ptr())
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        off = found.offset // 4  # x's place in its block, in float32 elements
        peer = torch.from_dlpack(t.get_buffer(right, x.numel(), "float32", off))
        peer.fill_(comm.rank + 1.0)  # a torch kernel storing into the neighbour's x
        # The flag after the data, in the stream's order, in the neighbour's pad.
        pad_right = t.signal_pad(right)
        comm.stream_write_value32(pad_right, pad_right.shape[0] - 1, 1, stream=stream)
        mine = torch.from_dlpack(t.signal_pad())
        flag = mine[-1:]
        while int(flag.item()) != 1:  # the neighbour's flag (host polling, for the example)
            pass
        ok = bool(torch.all(x == left + 1.0))
        comm.stream_write_value32(t.signal_pad(), mine.shape[0] - 1, 0, stream=stream)
        torch.cuda.synchronize()
        comm.barrier()
        print("rank %d/%d on cuda:%d: MemPool tensor rendezvoused, peer write + flag %s" %
              (comm.rank, comm.size, comm.device, "OK" if ok else "FAIL"))
        del peer, mine, flag, t, found
        del x
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
