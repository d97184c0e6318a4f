"""PyTorch's side of bench_rendezvous: symm_mem.empty + rendezvous times.

Run: torchrun --nproc-per-node 2 bench/torch_rendezvous.py [--sizes 1M,64M,1G] [--iters N]
Prints, on rank 0, the same columns as bench_rendezvous:
  size_bytes first_ms cold_ms
(first = the first empty+rendezvous of the process, including PyTorch's lazy
setup; cold = a fresh tensor each time; slowest rank, median).
"""
import argparse
import os
import statistics
import time

# The GPU safety rule (docs/design.md): no multicast / NVLS anywhere, before torch
# loads, over whatever value the environment passed down.
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def slowest(value):
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def empty_rendezvous(nbytes):
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    buf = symm_mem.empty(nbytes, dtype=torch.uint8, device="cuda")
    symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    first, buf = empty_rendezvous(1 << 20)
    del buf
    first = slowest(first)
    if dist.get_rank() == 0:
        print(f"# torch {torch.__version__} symm_mem.empty+rendezvous, {dist.get_world_size()} ranks,"
              f" {args.iters} iterations, slowest rank, median")
        print(f"# {'size_bytes':>12} {'first_ms':>10} {'cold_ms':>10}")
    for tok in args.sizes.split(","):
        nbytes = parse_size(tok)
        cold = []
        for _ in range(args.iters):
            ms, buf = empty_rendezvous(nbytes)
            del buf
            cold.append(slowest(ms))
        if dist.get_rank() == 0:
            print(f"  {nbytes:12d} {first:10.2f} {statistics.median(cold):10.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
