"""Runs symmem's bench_rendezvous and PyTorch's torch_rendezvous.py on the
same sizes in one command and prints both with the ratio (ours / PyTorch;
below 1 means symmem is faster).

  python3 bench/compare_rendezvous.py --build build [--ranks 2] [--sizes 1M,64M,1G]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"command failed with {out.returncode}")
    rows = {}
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            print(line)
            continue
        cols = line.split()
        if cols and cols[0].isdigit():
            rows[int(cols[0])] = [float(c) for c in cols[1:]]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    ours = run([os.path.join(args.build, "tools", "symmem-run"), "-n", str(args.ranks), "--",
                os.path.join(args.build, "bench", "bench_rendezvous"), "--sizes", args.sizes,
                "--iters", str(args.iters)], env)
    theirs = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                  str(args.ranks), os.path.join(HERE, "torch_rendezvous.py"), "--sizes",
                  args.sizes, "--iters", str(args.iters)], env)
    # ours: init_ms first_ms cold_ms pool_us; theirs: first_ms cold_ms
    print(f"\n{'size':>12} {'symmem cold ms':>15} {'torch cold ms':>14} {'ratio':>7} "
          f"{'symmem pool us':>15}")
    for size in sorted(ours):
        o = ours[size]
        t = theirs.get(size)
        ratio = f"{o[2] / t[1]:7.2f}" if t else "      -"
        print(f"{size:12d} {o[2]:15.3f} {t[1] if t else float('nan'):14.3f} {ratio} {o[3]:15.1f}")
    o = ours[min(ours)]
    t = theirs.get(min(ours))
    print(f"\nfirst alloc+rendezvous after init (1 MiB): symmem {o[1]:.2f} ms, torch "
          f"{t[0] if t else float('nan'):.2f} ms (ratio {o[1] / t[0] if t else float('nan'):.3f}); "
          f"symm_comm_init {o[0]:.2f} ms")


if __name__ == "__main__":
    main()
