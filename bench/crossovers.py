"""Reads the per-algorithm all-reduce sweeps of `make bench-gpu` (sections
"## all-reduce, algorithm ALGO forced, CUDA graph, N ranks" followed by
symmem-bench rows) and prints, for each rank count, the time of every
algorithm at every size, the fastest one, and the thresholds that `auto`
(choose_allreduce in src/core/collective.c) should use: the largest size
up to which LL, LL128 and one-shot are still the fastest of the ones left.

  python3 bench/crossovers.py LOG [LOG ...]
  python3 bench/crossovers.py --self-test

Rows whose algo column (symmem-bench's, the algorithm that ran) names
another algorithm than the one forced are fallbacks (LL beyond its area
runs LL128, ...) and are left out; older logs without the column count
every row under the algorithm asked for.  The thresholds only ever move
forward in the order ll, ll128, one_shot, two_shot, as auto's choice does.
"""
import re
import sys

ORDER = ("ll", "ll128", "one_shot", "two_shot")
HEADER = re.compile(r"^## all-reduce, algorithm (\w+) forced, CUDA graph, (\d+) ranks")


def parse(lines):
    """{ranks: {algo: {size: time_us}}} from bench-gpu output."""
    out, cur, asked = {}, None, None
    for line in lines:
        m = HEADER.match(line)
        if m:
            asked, ranks = m.group(1), int(m.group(2))
            cur = out.setdefault(ranks, {}).setdefault(asked, {}) if asked in ORDER else None
            continue
        if line.startswith("##"):
            cur = None
            continue
        fields = line.split()
        if cur is None or len(fields) < 8 or line.lstrip().startswith("#"):
            continue
        try:
            size, time_us, wrong = int(fields[0]), float(fields[4]), fields[7]
        except ValueError:
            continue
        if wrong not in ("0", "N/A"):
            raise SystemExit(f"crossovers: {wrong} wrong values at {size} bytes ({line.strip()})")
        if len(fields) > 8 and fields[8] in ORDER and fields[8] != asked:
            continue  # a fallback: another algorithm ran
        cur[size] = time_us
    return out


def thresholds(times):
    """Largest size for which each of ll, ll128, one_shot is chosen, walking
    the sizes upwards and never going back to an earlier algorithm."""
    sizes = sorted(set().union(*(t.keys() for t in times.values())))
    limit, stage = {a: 0 for a in ORDER[:-1]}, 0
    for size in sizes:
        cands = [(times[a][size], i) for i, a in enumerate(ORDER) if a in times and size in times[a]]
        if not cands:
            continue
        best = min(cands)[1]
        stage = max(stage, best)
        if stage < len(ORDER) - 1:
            limit[ORDER[stage]] = size
    return sizes, limit


def label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def report(data):
    lines = []
    for ranks in sorted(data):
        times = data[ranks]
        sizes, limit = thresholds(times)
        lines.append(f"# all-reduce bf16, CUDA graph, {ranks} ranks, us per call")
        lines.append("%10s" % "size" + "".join("%10s" % a for a in ORDER) + "   fastest")
        for size in sizes:
            row = [times.get(a, {}).get(size) for a in ORDER]
            known = [(t, a) for t, a in zip(row, ORDER) if t is not None]
            fastest = min(known)[1] if known else "-"
            lines.append("%10s" % label(size) +
                         "".join("%10s" % ("-" if t is None else f"{t:.2f}") for t in row) +
                         f"   {fastest}")
        parts = [f"{a} up to {label(limit[a])}" for a in ORDER[:-1] if limit[a]]
        lines.append(f"auto at {ranks} ranks: " + (", ".join(parts) + ", " if parts else "") +
                     "two_shot above")
        lines.append("")
    return "\n".join(lines)


SAMPLE = """## all-reduce, algorithm ll forced, CUDA graph, 2 ranks
# symmem-bench 0.1.0
          4096          2048   bf16    sum        3.06        1.340        1.340       0
        262144        131072   bf16    sum        4.93       53.160       53.160       0
       1048576        524288   bf16    sum       10.08      103.992      103.992       0
## all-reduce, algorithm ll forced, CUDA graph, 4 ranks
          4096          2048   bf16    sum        4.00        1.024        1.536       0        ll
       1048576        524288   bf16    sum        9.00      116.508      174.762       0     ll128
## all-reduce, algorithm ll128 forced, CUDA graph, 2 ranks
          4096          2048   bf16    sum        3.42        1.198        1.198       0
        262144        131072   bf16    sum        4.51       58.125       58.125       0
       1048576        524288   bf16    sum        8.05      130.258      130.258       0
       4194304       2097152   bf16    sum       21.40      195.991      195.991       0
## all-reduce, algorithm one_shot forced, CUDA graph, 2 ranks
          4096          2048   bf16    sum        5.92        0.692        0.692       0
       1048576        524288   bf16    sum       10.04      104.438      104.438       0
       4194304       2097152   bf16    sum       21.27      197.193      197.193       0
## all-reduce, algorithm two_shot forced, CUDA graph, 2 ranks
          4096          2048   bf16    sum        7.77        0.527        0.527       0
       1048576        524288   bf16    sum       11.45       91.578       91.578       0
       4194304       2097152   bf16    sum       21.13      198.505      198.505       0
      16777216       8388608   bf16    sum       56.94      294.648      294.648       0
## all_gather, bf16, CUDA graph, 2 ranks
         65536         32768   bf16   none        5.70       11.497        5.749       0
"""


def self_test():
    data = parse(SAMPLE.splitlines())
    assert sorted(data) == [2, 4], data
    assert data[2]["ll"][262144] == 4.93 and 65536 not in data[2]["two_shot"], data
    assert data[4]["ll"] == {4096: 4.0}, data  # the LL128 row is a fallback
    del data[4]
    sizes, limit = thresholds(data[2])
    assert sizes == [4096, 262144, 1048576, 4194304, 16777216], sizes
    assert limit == {"ll": 4096, "ll128": 1048576, "one_shot": 0}, limit
    text = report(data)
    assert "auto at 2 ranks: ll up to 4K, ll128 up to 1M, two_shot above" in text, text
    # Once LL128 took over, LL winning again at a larger size changes nothing.
    back = {"ll": {1: 1.0, 2: 5.0, 3: 1.0}, "ll128": {1: 2.0, 2: 1.0, 3: 2.0},
            "two_shot": {1: 9.0, 2: 9.0, 3: 9.0}}
    assert thresholds(back)[1] == {"ll": 1, "ll128": 3, "one_shot": 0}, thresholds(back)
    try:
        parse(["## all-reduce, algorithm ll forced, CUDA graph, 2 ranks",
               "  4096  2048  bf16  sum  3.0  1.0  1.0  5"])
    except SystemExit as exc:
        assert "5 wrong values" in str(exc)
    else:
        raise AssertionError("wrong values were not refused")
    print("crossovers: self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    lines = []
    for path in argv[1:]:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(f.read().splitlines())
    data = parse(lines)
    if not data:
        print("crossovers: no per-algorithm all-reduce sweeps found", file=sys.stderr)
        return 1
    print(report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
