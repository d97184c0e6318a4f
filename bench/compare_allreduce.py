"""Runs symmem-bench's all-reduce (eager, then --graph) and PyTorch's
torch_allreduce.py on the same sizes and dtype in one command, and prints them
side by side with the ratio ours / best peer (below 1 means symmem is faster).

  python3 bench/compare_allreduce.py --build build [--ranks 2] [--minbytes 4K]
      [--maxbytes 256M] [--factor 4] [--dtype bf16] [--repeat 1]
      [--dry-run [ok|fail-torch|fail-symmem]]

eager = --eager-iters (50) back-to-back calls; graph = --graph-iters (20)
calls captured in one CUDA graph; both µs per call, mean, slowest rank, on
both sides.  Peers: PyTorch's symm_mem one_shot_all_reduce, symm_mem
two_shot_all_reduce_ and dist.all_reduce (NCCL), and the ncclAllReduce that
symmem-bench times on its own buffers in the same run (when NCCL loads).
--repeat N runs both sides N times, interleaved (symmem eager, symmem graph,
PyTorch; again), and prints each figure's median: at a few µs two runs
differ by 0.1-0.2 µs, as much as some targets' margins.
--dry-run feeds canned outputs instead of running anything (tests the parsing
and the table; fail-* makes one side fail).
"""
import argparse
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_COLS = ("one_shot_eager", "one_shot_graph", "two_shot_eager", "two_shot_graph",
              "nccl_eager", "nccl_graph")
TORCH_OPS = ("one_shot", "two_shot", "nccl")


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def sweep(lo, hi, factor):
    sizes, n = [], lo
    while n <= hi:
        sizes.append(n)
        n *= factor
    return sizes


class Failed(Exception):
    pass


def run(cmd, env, dry):
    """stdout of cmd; raises Failed with what went wrong."""
    print("$ " + " ".join(cmd) + ("   (dry run: canned output)" if dry is not None else ""),
          flush=True)
    if dry is not None:
        out, err, rc = dry
    else:
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        except FileNotFoundError as exc:
            raise Failed(f"cannot start {cmd[0]}: {exc}") from None
        except subprocess.TimeoutExpired:
            raise Failed("timed out after 600 s") from None
        out, err, rc = p.stdout, p.stderr, p.returncode
    if rc != 0:
        tail = "\n".join((out + err).strip().splitlines()[-20:])
        raise Failed(f"exit status {rc}; last output:\n{tail}")
    return out


def report_failures(script, failures):
    """After the table: what failed, on stderr, and exit status 1."""
    if not failures:
        return
    print(f"\n{script}: FAILED:", file=sys.stderr)
    for f in failures:
        print("  " + f.replace("\n", "\n    "), file=sys.stderr)
    raise SystemExit(1)


def num(text):
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_symmem_csv(text):
    """{size_bytes: (time_us, nccl_time_us or None, algo or None)} from
    symmem-bench --csv (algo: the all-reduce algorithm that ran)."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("collective,")), None)
    if start is None:
        raise Failed("no CSV header (collective,...) in symmem-bench's output")
    rows = {}
    for rec in csv.DictReader(lines[start:]):
        if rec.get("collective") != "all_reduce" or not (rec.get("size_bytes") or "").isdigit():
            continue
        t = num(rec.get("time_us"))
        if t is None:
            raise Failed(f"bad time_us in CSV row {rec}")
        if rec.get("wrong") not in (None, "", "0"):
            raise Failed(f"symmem-bench counted {rec['wrong']} wrong values at "
                         f"{rec['size_bytes']} bytes")
        rows[int(rec["size_bytes"])] = (t, num(rec.get("nccl_time_us")), rec.get("algo") or None)
    if not rows:
        raise Failed("no all_reduce rows in symmem-bench's CSV")
    return rows


def parse_torch(text):
    """({size_bytes: {col: µs or None}}, ['# ...' lines]) from torch_allreduce.py."""
    rows, notes = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            notes.append(line)
            continue
        cols = line.split()
        if not cols or not cols[0].isdigit():
            continue
        if len(cols) != 1 + len(TORCH_COLS):
            raise Failed(f"torch_allreduce.py row with {len(cols)} columns: {line!r}")
        rows[int(cols[0])] = {c: num(v) for c, v in zip(TORCH_COLS, cols[1:])}
    if not rows:
        raise Failed("no rows in torch_allreduce.py's output")
    return rows, notes


def median(values):
    """Median of the figures that exist (the lower middle of an even count:
    a figure one of the runs measured), or None."""
    got = sorted(v for v in values if v is not None)
    return got[(len(got) - 1) // 2] if got else None


def median_symmem(runs):
    """parse_symmem_csv's rows, each figure the median over runs (algo: the
    first run's)."""
    out = {}
    for n in sorted(set().union(*runs)):
        rows = [r[n] for r in runs if n in r]
        out[n] = (median(x[0] for x in rows), median(x[1] for x in rows), rows[0][2])
    return out


def median_torch(runs):
    """parse_torch's rows, each figure the median over runs."""
    return {n: {c: median(r.get(n, {}).get(c) for r in runs) for c in TORCH_COLS}
            for n in sorted(set().union(*runs))}


def best(cands):
    """(µs, name) of the smallest figure, or (None, None)."""
    got = [(us, name) for us, name in cands if us is not None]
    return min(got) if got else (None, None)


def fmt(value, width, prec=2):
    return f"{value:{width}.{prec}f}" if value is not None else f"{'-':>{width}}"


def no_multicast_env():
    """This environment with the GPU safety rule of docs/design.md (no NVLink multicast)."""
    return dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                NVSHMEM_DISABLE_NVLS="1")


def ratio(ours, peer):
    return f"{ours / peer:7.3f}" if ours is not None and peer else f"{'-':>7}"


def canned(kind, sizes, dtype, iters, graph, fail, rep=0):
    """Plausible outputs for --dry-run (PyTorch figures recorded from an earlier
    2-GPU run; `make bench-gpu`, or this script without --dry-run, measures
    them anew).  Repetition `rep` scales every figure by 1.5, 1, 0.9, 1.5, ...:
    of three runs, only the median is the unscaled figure (not the first,
    the last or the mean)."""
    scale = (1.5, 1.0, 0.9)[rep % 3]
    torch_us = {  # one_shot e/g, two_shot e/g, nccl e/g
        4 << 10: (11.0, 6.2, 10.6, 6.1, 44.4, 11.2),
        16 << 10: (11.2, 6.4, 10.1, 6.6, 44.0, 11.8),
        64 << 10: (11.5, 6.8, 9.7, 7.2, 43.7, 12.3),
        256 << 10: (12.0, 8.9, 10.5, 8.3, 42.5, 14.6),
        1 << 20: (14.0, 13.1, 11.6, 10.1, 41.8, 19.0),
        4 << 20: (31.0, 30.5, 21.7, 19.9, 41.7, 36.1),
        16 << 20: (98.0, 97.1, 60.3, 58.2, 77.1, 77.1),
        64 << 20: (371.0, 370.3, 217.1, 212.4, 248.1, 253.2),
        256 << 20: (None, None, 821.3, 820.1, 893.2, 892.3),
    }
    if kind == "symmem":
        if fail == "fail-symmem" and graph:
            return ("", "symmem-bench: cudaGraphInstantiate failed: operation not permitted\n"
                    "symmem-run: rank 0 exited with status 1\n", 1)
        out = ["collective,backend,ranks,inplace,size_bytes,count,type,op,time_us,algbw_gbps,"
               "busbw_gbps,wrong,nccl_time_us,ratio,algo"]
        for n in sizes:
            t = torch_us.get(n, torch_us[4 << 10])
            ours = scale * (0.45 if graph else 0.55) * min(x for x in t[2:4] if x)
            nccl = scale * (t[5] if graph else t[4])
            algbw = n / (ours * 1e3)
            out.append(f"all_reduce,cuda,2,1,{n},{n // 2},{dtype},sum,{ours:.3f},{algbw:.4f},"
                       f"{algbw:.4f},0,{nccl:.3f},{ours / nccl:.4f},"
                       f"{'ll' if n <= 64 << 10 else 'll128' if n <= 4 << 20 else 'two_shot'}")
        return ("\n".join(out) + "\n", "", 0)
    if fail == "fail-torch":
        return ("", "Traceback (most recent call last):\n  File \"<string>\", line 1\n"
                "ModuleNotFoundError: No module named 'torch'\n", 1)
    out = [f"# torch 2.11.0+cu128 all-reduce sum {dtype}, 2 ranks; eager: {iters[0]} calls, graph:"
           f" {iters[1]} calls in one CUDA graph; warmup 5; check 1; µs per call, mean,"
           " slowest rank",
           "# size_bytes one_shot_eager one_shot_graph two_shot_eager two_shot_graph"
           " nccl_eager nccl_graph"]
    for n in sizes:
        t = torch_us.get(n, torch_us[4 << 10])
        if t[0] is None:
            out.append(f"# {n}: one_shot eager: n/a (RuntimeError: one_shot_all_reduce: input"
                       " exceeds the max size)")
            out.append(f"# {n}: one_shot graph: n/a (RuntimeError: one_shot_all_reduce: input"
                       " exceeds the max size)")
        out.append(f"  {n:12d} " + " ".join(f"{scale * x:14.2f}" if x is not None
                                             else f"{'n/a':>14}" for x in t))
    return ("\n".join(out) + "\n", "W0101 torchrun: some warning on stderr\n", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--minbytes", default="4K")
    ap.add_argument("--maxbytes", default="256M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    ap.add_argument("--eager-iters", type=int, default=50)
    ap.add_argument("--graph-iters", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each side, interleaved; figures are medians")
    ap.add_argument("--dry-run", nargs="?", const="ok", default=None,
                    choices=("ok", "fail-torch", "fail-symmem"))
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    sizes = sweep(parse_size(args.minbytes), parse_size(args.maxbytes), args.factor)
    env = no_multicast_env()
    iters = (args.eager_iters, args.graph_iters)

    def dry(kind, rep, graph=False):
        if args.dry_run is None:
            return None
        return canned(kind, sizes, args.dtype, iters, graph, args.dry_run, rep)

    failures = []
    symm_runs = {"eager": [], "graph": []}
    torch_runs, notes = [], []
    for rep in range(args.repeat):
        for mode, graph in (("eager", False), ("graph", True)):
            cmd = [os.path.join(args.build, "tools", "symmem-run"), "-n", str(args.ranks), "--",
                   os.path.join(args.build, "tools", "symmem-bench"), "--csv", "-b",
                   args.minbytes, "-e", args.maxbytes, "-f", str(args.factor), "--dtype",
                   args.dtype, "-c", "1", "-n", str(iters[graph])] + (["--graph"] if graph else [])
            try:
                symm_runs[mode].append(parse_symmem_csv(run(cmd, env, dry("symmem", rep, graph))))
            except Failed as exc:
                failures.append(f"symmem-bench {mode}, run {rep + 1}: {exc}")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.ranks),
               os.path.join(HERE, "torch_allreduce.py"), "--sizes",
               ",".join(size_label(n) for n in sizes), "--dtype", args.dtype,
               "--eager-iters", str(iters[0]), "--graph-iters", str(iters[1])]
        try:
            rows, run_notes = parse_torch(run(cmd, env, dry("torch", rep)))
            torch_runs.append(rows)
            notes = notes or run_notes
        except Failed as exc:
            failures.append(f"torch_allreduce.py, run {rep + 1}: {exc}")
    symm = {mode: median_symmem(r) if r else {} for mode, r in symm_runs.items()}
    theirs = median_torch(torch_runs) if torch_runs else {}
    for line in notes:
        print(line)

    if symm["eager"] or symm["graph"] or theirs:
        runs = f", median of {args.repeat} runs" if args.repeat > 1 else ""
        print(f"\nall-reduce sum {args.dtype}, {args.ranks} ranks, µs per call (eager:"
              f" {iters[0]} back-to-back calls; graph: {iters[1]} calls in one CUDA graph{runs});"
              "\nratio = symmem / best peer, the fastest of PyTorch's one_shot, two_shot,"
              " nccl (dist.all_reduce) and symmem-bench's own ncclAllReduce (nccl-c)")
        print(f"{'size':>6} {'symmem':>9} {'symmem':>9} {'best torch':>20} {'best torch':>20}"
              f" {'nccl':>9} {'nccl-c':>9} {'ratio':>7} {'ratio':>7}  {'best peer':>17}"
              f"  {'symmem':>8}")
        print(f"{'':>6} {'eager':>9} {'graph':>9} {'eager (op)':>20} {'graph (op)':>20}"
              f" {'graph':>9} {'graph':>9} {'eager':>7} {'graph':>7}  {'eager / graph':>17}"
              f"  {'algo':>8}")
        for n in sorted(set(symm["eager"]) | set(symm["graph"]) | set(theirs)):
            t = theirs.get(n, {})
            se = symm["eager"].get(n, (None, None, None))
            sg = symm["graph"].get(n, (None, None, None))
            cells, peers = [], []
            for mode, s in (("eager", se), ("graph", sg)):
                bt = best((t.get(f"{op}_{mode}"), op) for op in TORCH_OPS)
                bp = best([bt, (s[1], "nccl-c")])
                cells.append(bt)
                peers.append(bp)
            tb = [f"{fmt(us, 9)} ({op or '-':>8})" for us, op in cells]
            print(f"{size_label(n):>6} {fmt(se[0], 9)} {fmt(sg[0], 9)} {tb[0]} {tb[1]}"
                  f" {fmt(t.get('nccl_graph'), 9)} {fmt(sg[1], 9)}"
                  f" {ratio(se[0], peers[0][0])} {ratio(sg[0], peers[1][0])}"
                  f"  {peers[0][1] or '-':>8}/{peers[1][1] or '-':<8}  {sg[2] or se[2] or '-':>8}")
    report_failures("compare_allreduce", failures)


if __name__ == "__main__":
    main()
