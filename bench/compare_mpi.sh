#!/bin/sh
# Open MPI's MPI_Allreduce beside symmem's host backend on this CPU machine:
# f32 sum, the same sizes, the same number of processes, each timed the same
# way (warmup, then back-to-back calls, mean per call of the slowest rank).
# symmem is shown in place on a symmetric tensor (its natural use) and out of
# place from malloc'd memory (what MPI gets); ratio = symmem time / MPI time.
#
#   bench/compare_mpi.sh [BUILD_DIR]
#   environment: RANKS (2), MINBYTES (8), MAXBYTES (16M), STEP (2), ITERS (20),
#                WARMUP (5), ROUNDS (3)
#
# The three runs are repeated ROUNDS times, interleaved, and each column is
# the median of its rounds: on a shared VM the memory bandwidth was seen to
# swing by 4x between runs minutes apart, which a single sequential pass
# turns into a ratio that belongs to neither side.
#
# It installs nothing: without mpicc and mpirun it says how to get them.
set -u
BUILD=${1:-build}
RANKS=${RANKS:-2}
MINBYTES=${MINBYTES:-8}
MAXBYTES=${MAXBYTES:-16M}
STEP=${STEP:-2}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)

for tool in mpicc mpirun; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "compare_mpi: $tool not found; install Open MPI first, e.g." >&2
    echo "  apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 1
  fi
done
for tool in symmem-run symmem-bench; do
  if [ ! -x "$BUILD/tools/$tool" ]; then
    echo "compare_mpi: $BUILD/tools/$tool not built (run make, or pass the build folder)" >&2
    exit 1
  fi
done

tmp=$(mktemp -d /tmp/symm-compare-mpi.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# A trap on INT/TERM alone would run and then let the script go on without
# its temporary files; exiting runs the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" || exit 1

# Open MPI refuses root unless told, and counts hardware threads strictly.
mpi_flags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
sweep="-b $MINBYTES -e $MAXBYTES -f $STEP -n $ITERS -w $WARMUP"

echo "## $ROUNDS rounds of: MPI_Allreduce: mpirun -np $RANKS $mpi_flags mpi_allreduce $sweep"
for inplace in 1 0; do
  echo "##   symmem: SYMM_BACKEND=host symmem-run -n $RANKS -- symmem-bench --csv --inplace $inplace $sweep"
done
r=1
while [ "$r" -le "$ROUNDS" ]; do
  # shellcheck disable=SC2086
  mpirun -np "$RANKS" $mpi_flags "$tmp/mpi_allreduce" $sweep >"$tmp/mpi.$r.csv" || exit 1
  for inplace in 1 0; do
    # shellcheck disable=SC2086
    SYMM_BACKEND=host "$BUILD/tools/symmem-run" -n "$RANKS" -- "$BUILD/tools/symmem-bench" \
      --csv --inplace "$inplace" -c 1 $sweep >"$tmp/symm$inplace.$r.csv" || exit 1
  done
  r=$((r + 1))
done

# Join on size_bytes: mpi.*.csv is size,count,time,wrong; symmem's CSV has
# size in field 5, time in 9, wrong in 12.  Median of the rounds per column.
awk -F, -v ranks="$RANKS" -v rounds="$ROUNDS" '
  function median(key,    n, i, j, t, v) {
    n = cnt[key]
    for (i = 1; i <= n; i++) v[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function add(key, x) { val[key, ++cnt[key]] = x }
  FNR == 1 { f = FILENAME; sub(/.*\//, "", f)
             kind = f ~ /^mpi\./ ? "mpi" : f ~ /^symm1\./ ? "in" : "out"; next }
  kind == "mpi" { add("mpi" SUBSEP $1, $3); wrong[$1] += $4; if (!($1 in seen)) { seen[$1]; order[++n] = $1 }; next }
  { add(kind SUBSEP $5, $9); wrong[$5] += $12 }
  END {
    printf "# f32 sum all-reduce, %d ranks, host backend vs Open MPI, median of %d rounds; ratio = symmem / MPI\n", ranks, rounds
    printf "#%13s  %12s  %14s  %6s  %14s  %6s  %6s\n", "size(B)", "mpi(us)", "symm_inpl(us)",
           "ratio", "symm_oop(us)", "ratio", "#wrong"
    bad = 0
    for (i = 1; i <= n; i++) {
      s = order[i]
      if (!(("in" SUBSEP s) in cnt) || !(("out" SUBSEP s) in cnt)) continue
      m = median("mpi" SUBSEP s); a = median("in" SUBSEP s); b = median("out" SUBSEP s)
      bad += wrong[s]
      printf "%14d  %12.2f  %14.2f  %6.3f  %14.2f  %6.3f  %6d\n", s, m, a, a / m, b, b / m, wrong[s]
    }
    if (bad) { printf "# %d wrong values\n", bad; exit 1 }
  }' "$tmp"/mpi.*.csv "$tmp"/symm1.*.csv "$tmp"/symm0.*.csv
