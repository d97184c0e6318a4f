"""PyTorch's side of symmem-bench's all-reduce: symm_mem one-shot and two-shot
all-reduce and dist.all_reduce (NCCL), eager and CUDA-graph, per size.

Run: python3 -m torch.distributed.run --nproc-per-node 2 bench/torch_allreduce.py \
         [--sizes 4K,64K,1M,4M,16M,64M,256M] [--dtype bf16] [--eager-iters 50] \
         [--graph-iters 20] [--warmup 5] [--check 1]
Prints, on rank 0, one line per size (µs per call, mean, slowest rank):
  size_bytes one_shot_eager one_shot_graph two_shot_eager two_shot_graph nccl_eager nccl_graph
eager = --eager-iters back-to-back calls timed with CUDA events after warmup;
graph = --graph-iters calls captured in one torch.cuda.CUDAGraph, replayed once
(timed), divided by the call count.
  one_shot = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group) (out of place)
  two_shot = torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group) (in place)
  nccl     = dist.all_reduce(t) on an ordinary tensor
buf comes from symm_mem.empty + symm_mem.rendezvous.  A figure that could not
be taken prints as n/a, with a "# ... n/a (reason)" line before the row.
"""
import argparse
import os

# The GPU safety rule (docs/design.md): no multicast / NVLS anywhere, before torch loads.
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
OPS = ("one_shot", "two_shot", "nccl")
MODES = ("eager", "graph")


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def short(exc):
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


def find_op(name):
    """torch.ops.symm_mem.<name>, or (None, reason) when this torch lacks it."""
    try:
        return getattr(torch.ops.symm_mem, name), None
    except (AttributeError, RuntimeError) as exc:
        return None, f"torch {torch.__version__} has no torch.ops.symm_mem.{name} ({short(exc)})"


def all_ok(ok):
    """True only if every rank says ok (keeps the ranks on the same path)."""
    t = torch.tensor([0 if ok else 1], dtype=torch.int32, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() == 0


def slowest(value):
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_events(run, iters):
    """µs per iteration of run() (which does `iters` of them), between CUDA
    events, every rank starting together."""
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / iters


def time_eager(fn, iters, warmup):
    for _ in range(warmup):
        fn()

    def loop():
        for _ in range(iters):
            fn()

    return time_events(loop, iters)


def capture(fn, iters, warmup):
    # Warm up on a side stream (torch's advice before capture), then capture
    # thread-locally so that other threads' CUDA calls (NCCL's watchdog) do
    # not invalidate the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(iters):
            fn()
    torch.cuda.synchronize()
    return graph


def time_graph(graph, iters):
    graph.replay()  # the first replay uploads the graph
    return time_events(graph.replay, iters)


def measure(fn, args):
    """{mode: (µs or None, reason or None)} for one op at one size."""
    result = {}
    err = None
    try:
        us = time_eager(fn, args.eager_iters, args.warmup)
    except Exception as exc:  # noqa: BLE001 - any failure becomes an n/a cell
        us, err = None, short(exc)
    if all_ok(err is None):
        result["eager"] = (slowest(us), None)
    else:
        result["eager"] = (None, err or "failed on another rank")
    graph, err = None, None
    try:
        graph = capture(fn, args.graph_iters, args.warmup)
    except Exception as exc:  # noqa: BLE001
        err = short(exc)
    if not all_ok(err is None):
        result["graph"] = (None, err or "capture failed on another rank")
        return result
    try:
        us = time_graph(graph, args.graph_iters)
    except Exception as exc:  # noqa: BLE001
        us, err = None, short(exc)
    if all_ok(err is None):
        result["graph"] = (slowest(us), None)
    else:
        result["graph"] = (None, err or "replay failed on another rank")
    del graph
    return result


def check(name, fn, out_of, buf, world):
    """One call on rank+1 everywhere; the result must be world*(world+1)/2."""
    buf.fill_(dist.get_rank() + 1)
    torch.cuda.synchronize()
    dist.barrier()
    out = fn()
    res = out_of(out)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    wrong = int((res.float() != want).sum().item())
    buf.zero_()  # time on zeros: sums stay finite however many calls run
    torch.cuda.synchronize()
    return None if wrong == 0 else f"{name}: {wrong} wrong values after one call"


def bench_size(nbytes, args, group_name, one_shot, two_shot, world):
    dtype = DTYPES[args.dtype]
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    cells, notes = {}, []

    def fail_all(op, reason=None):
        for mode in MODES:
            cells[(op, mode)] = None
        if reason:
            notes.append(f"{op}: n/a ({reason})")

    # symm_mem ops on a symmetric buffer; a fresh one per size.
    buf, err = None, None
    if one_shot or two_shot:
        try:
            buf = symm_mem.empty(numel, dtype=dtype, device="cuda")
            symm_mem.rendezvous(buf, group_name)
        except Exception as exc:  # noqa: BLE001
            err = short(exc)
        if not all_ok(err is None):
            buf = None
            err = err or "failed on another rank"
    for op, fn_op in (("one_shot", one_shot), ("two_shot", two_shot)):
        if fn_op is None:
            fail_all(op)  # the header says why
            continue
        if buf is None:
            fail_all(op, f"symm_mem.empty+rendezvous: {err}")
            continue
        if op == "one_shot":
            fn = lambda: fn_op(buf, "sum", group_name)  # noqa: E731
            out_of = lambda out: out  # noqa: E731
        else:
            fn = lambda: fn_op(buf, "sum", group_name)  # noqa: E731
            out_of = lambda out: buf  # noqa: E731
        reason = None
        if args.check:
            try:
                reason = check(op, fn, out_of, buf, world)
            except Exception as exc:  # noqa: BLE001
                reason = short(exc)
            if not all_ok(reason is None):
                fail_all(op, reason or "check failed on another rank")
                continue
        else:
            buf.zero_()
        for mode, (us, why) in measure(fn, args).items():
            cells[(op, mode)] = us
            if why:
                notes.append(f"{op} {mode}: n/a ({why})")
    del buf

    # NCCL on an ordinary tensor.
    t = torch.empty(numel, dtype=dtype, device="cuda")
    fn = lambda: dist.all_reduce(t)  # noqa: E731
    reason = None
    if args.check:
        try:
            reason = check("nccl", fn, lambda out: t, t, world)
        except Exception as exc:  # noqa: BLE001
            reason = short(exc)
    else:
        t.zero_()
    if not all_ok(reason is None):
        fail_all("nccl", reason or "check failed on another rank")
    else:
        for mode, (us, why) in measure(fn, args).items():
            cells[("nccl", mode)] = us
            if why:
                notes.append(f"nccl {mode}: n/a ({why})")
    del t
    torch.cuda.synchronize()
    return cells, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4K,64K,1M,4M,16M,64M,256M")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--eager-iters", type=int, default=50)
    ap.add_argument("--graph-iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--check", type=int, default=1, choices=(0, 1))
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    group_name = dist.group.WORLD.group_name
    world = dist.get_world_size()
    rank0 = dist.get_rank() == 0
    # Needed before torch 2.8 or so; deprecated (or gone) later.
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:
        try:
            enable(group_name)
        except Exception:  # noqa: BLE001
            pass
    one_shot, why_one = find_op("one_shot_all_reduce")
    two_shot, why_two = find_op("two_shot_all_reduce_")
    if rank0:
        print(f"# torch {torch.__version__} all-reduce sum {args.dtype}, {world} ranks;"
              f" eager: {args.eager_iters} calls, graph: {args.graph_iters} calls in one"
              f" CUDA graph; warmup {args.warmup}; check {args.check}; µs per call, mean,"
              f" slowest rank")
        for why in (why_one, why_two):
            if why:
                print(f"# n/a ({why})")
        print(f"# {'size_bytes':>12} {'one_shot_eager':>14} {'one_shot_graph':>14}"
              f" {'two_shot_eager':>14} {'two_shot_graph':>14} {'nccl_eager':>14}"
              f" {'nccl_graph':>14}", flush=True)
    for tok in args.sizes.split(","):
        nbytes = parse_size(tok)
        cells, notes = bench_size(nbytes, args, group_name, one_shot, two_shot, world)
        if rank0:
            for note in notes:
                print(f"# {nbytes}: {note}")
            row = []
            for op in OPS:
                for mode in MODES:
                    us = cells.get((op, mode))
                    row.append(f"{us:14.2f}" if us is not None else f"{'n/a':>14}")
            print(f"  {nbytes:12d} " + " ".join(row), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
