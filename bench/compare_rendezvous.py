"""Runs symmem's bench_rendezvous and PyTorch's torch_rendezvous.py on the
same sizes in one command and prints both with the ratio (ours / PyTorch;
below 1 means symmem is faster).

  python3 bench/compare_rendezvous.py --build build [--ranks 2] [--sizes 1M,64M,1G]
      [--dry-run [ok|fail-torch|fail-symmem]]

A side that fails is reported (exit status 1) after the table of what the
other side measured, which is still printed.  --dry-run feeds canned outputs
instead of running anything (tests the parsing and the table; fail-* makes
one side fail).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# One way to run a side and report its failure, shared with the all-reduce script.
from compare_allreduce import (Failed, fmt, no_multicast_env, parse_size,  # noqa: E402
                               report_failures, run)
# Columns after size_bytes.
SYMM_COLS = ("init_ms", "first_ms", "cold_ms", "pool_us")
TORCH_COLS = ("first_ms", "cold_ms")


def parse_rows(text, names, who):
    """{size_bytes: {column: value}} of the rows; '#' lines are echoed."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("#"):
            print(line)
            continue
        cols = line.split()
        if not cols or not cols[0].isdigit():
            continue
        if len(cols) != 1 + len(names):
            raise Failed(f"{who} row with {len(cols)} columns: {line!r}")
        try:
            rows[int(cols[0])] = dict(zip(names, (float(c) for c in cols[1:])))
        except ValueError:
            raise Failed(f"{who} row that does not parse: {line!r}") from None
    if not rows:
        raise Failed(f"no rows in {who}'s output")
    return rows


def canned(kind, sizes, fail):
    """Plausible outputs for --dry-run."""
    if kind == "symmem":
        if fail == "fail-symmem":
            return ("", "symm_tensor_rendezvous: SYMM_ERR_TIMEOUT\n"
                    "symmem-run: rank 1 exited with status 1\n", 1)
        out = ["# symmem alloc+rendezvous: backend native, 2 ranks, 10 iterations, slowest rank,"
               " median"]
        out += [f"  {n:12d} {180.0:10.2f} {2.10:10.2f} {0.4 + n / 2e9:10.3f} {35.0:10.1f}"
                for n in sizes]
        return ("\n".join(out) + "\n", "", 0)
    if fail == "fail-torch":
        return ("", "Traceback (most recent call last):\n  File \"<string>\", line 1\n"
                "ModuleNotFoundError: No module named 'torch'\n", 1)
    out = ["# torch 2.11.0+cu128 symm_mem.empty+rendezvous, 2 ranks, 10 iterations, slowest rank,"
           " median"]
    out += [f"  {n:12d} {95.0:10.2f} {1.2 + n / 1e9:10.3f}" for n in sizes]
    return ("\n".join(out) + "\n", "W0101 torchrun: some warning on stderr\n", 0)


def ms(value):
    return f"{value:.2f} ms" if value is not None else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--dry-run", nargs="?", const="ok", default=None,
                    choices=("ok", "fail-torch", "fail-symmem"))
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    env = no_multicast_env()

    def dry(kind):
        return None if args.dry_run is None else canned(kind, sizes, args.dry_run)

    failures = []
    ours, theirs = {}, {}
    cmd = [os.path.join(args.build, "tools", "symmem-run"), "-n", str(args.ranks), "--",
           os.path.join(args.build, "bench", "bench_rendezvous"), "--sizes", args.sizes,
           "--iters", str(args.iters)]
    try:
        ours = parse_rows(run(cmd, env, dry("symmem")), SYMM_COLS, "bench_rendezvous")
    except Failed as exc:
        failures.append(f"bench_rendezvous: {exc}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.ranks),
           os.path.join(HERE, "torch_rendezvous.py"), "--sizes", args.sizes,
           "--iters", str(args.iters)]
    try:
        theirs = parse_rows(run(cmd, env, dry("torch")), TORCH_COLS, "torch_rendezvous.py")
    except Failed as exc:
        failures.append(f"torch_rendezvous.py: {exc}")

    if ours or theirs:
        print(f"\n{'size':>12} {'symmem cold ms':>15} {'torch cold ms':>14} {'ratio':>7} "
              f"{'symmem pool us':>15}")
        for size in sorted(set(ours) | set(theirs)):
            o, t = ours.get(size, {}), theirs.get(size, {})
            oc, tc = o.get("cold_ms"), t.get("cold_ms")
            ratio = f"{oc / tc:7.2f}" if oc is not None and tc else f"{'-':>7}"
            print(f"{size:12d} {fmt(oc, 15, 3)} {fmt(tc, 14, 3)} {ratio} "
                  f"{fmt(o.get('pool_us'), 15, 1)}")
        # "first" is one 1 MiB allocation per process, repeated on every row.
        o = ours[min(ours)] if ours else {}
        t = theirs[min(theirs)] if theirs else {}
        of, tf = o.get("first_ms"), t.get("first_ms")
        ratio = f"{of / tf:.3f}" if of is not None and tf else "-"
        print(f"\nfirst alloc+rendezvous after init (1 MiB): symmem {ms(of)}, torch {ms(tf)}"
              f" (ratio {ratio}); symm_comm_init {ms(o.get('init_ms'))}")
    report_failures("compare_rendezvous", failures)


if __name__ == "__main__":
    main()
