#!/bin/sh
# Open MPI beside symmem's host backend on this CPU machine, each timed the
# same way (warmup, then back-to-back calls, mean per call of the slowest
# rank), the same sizes and the same number of processes:
#
#   COLL=all_reduce (default): MPI_Allreduce against symm_all_reduce, f32
#     sum; ratio = symmem time / MPI time.
#   COLL=all_to_all_v: MPI_Alltoallv against symm_all_to_all_v, f32, with
#     the same counts on both sides (tools/symmem_bench_split.h, which
#     bench/mpi_alltoallv.c includes): every rank sends SIZE bytes split
#     over the ranks, uniformly (skew 1) or skewed like MoE routing (skew
#     S: the hottest rank gets S times the coldest); ratio = MPI time /
#     symmem time (above 1: symmem is faster).
#
# symmem is shown in place on a symmetric tensor (its natural use) and out
# of place from malloc'd memory (what MPI gets).
#
#   bench/compare_mpi.sh [BUILD_DIR]
#   environment: COLL (all_reduce), RANKS (all_reduce: 2; all_to_all_v:
#                "2 4", a list), SKEWS (all_to_all_v: "1 4"), MINBYTES (8;
#                all_to_all_v: 1K), MAXBYTES (16M), STEP (2), ITERS (20),
#                WARMUP (5), ROUNDS (3), BIND (default | core | none)
#
# The runs are repeated ROUNDS times, interleaved, and each column is the
# median of its rounds: on a shared VM the memory bandwidth was seen to
# swing by 4x between runs minutes apart, which a single sequential pass
# turns into a ratio that belongs to neither side.
#
# BIND says where the processes run.  default: neither launcher is told,
# and each binds as it does by default: mpirun rank r to core r up to 2
# processes, nowhere when oversubscribed; symmem-run a core per rank where
# there is one, else nowhere.  core: both sides bind rank r to CPU r mod
# the CPUs, oversubscribed too (mpirun --bind-to core:overload-allowed,
# symmem-bench under taskset).  none: neither binds.  Small calls between
# two processes that share a CPU wait for the scheduler, so the choice can
# move small-size times by 10x on a machine with few CPUs.
#
# It installs nothing: without mpicc and mpirun it says how to get them.
set -u
BUILD=${1:-build}
COLL=${COLL:-all_reduce}
case "$COLL" in
  all_reduce) RANKS=${RANKS:-2}; MINBYTES=${MINBYTES:-8}; SKEWS=1 ;;
  all_to_all_v) RANKS=${RANKS:-2 4}; MINBYTES=${MINBYTES:-1K}; SKEWS=${SKEWS:-1 4} ;;
  *) echo "compare_mpi: COLL=$COLL; it takes all_reduce or all_to_all_v" >&2; exit 2 ;;
esac
MAXBYTES=${MAXBYTES:-16M}
STEP=${STEP:-2}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
BIND=${BIND:-default}
case "$BIND" in
  default | core | none) ;;
  *) echo "compare_mpi: BIND=$BIND; it takes default, core or none" >&2; exit 2 ;;
esac
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
case "$COLL" in
  all_reduce) mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" || exit 1 ;;
  all_to_all_v) mpicc -O2 -o "$tmp/mpi_alltoallv" "$here/mpi_alltoallv.c" -lm || exit 1 ;;
esac

# Open MPI refuses root unless told, and counts hardware threads strictly.
mpi_flags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
[ "$BIND" = core ] && mpi_flags="$mpi_flags --bind-to core:overload-allowed"
[ "$BIND" = none ] && mpi_flags="$mpi_flags --bind-to none"
sweep="-b $MINBYTES -e $MAXBYTES -f $STEP -n $ITERS -w $WARMUP"
if [ "$BIND" = core ] && ! command -v taskset >/dev/null 2>&1; then
  echo "compare_mpi: BIND=core needs taskset (util-linux)" >&2
  exit 1
fi
cpus=$(nproc)

# symmem-bench ARGS on $1 host ranks, each bound as BIND says.
symm_bench() {
  n=$1
  shift
  if [ "$BIND" = core ]; then
    # shellcheck disable=SC2016
    SYMM_BACKEND=host "$BUILD/tools/symmem-run" -n "$n" --bind-to none -- sh -c \
      'c=$1 prog=$2; shift 2; exec taskset -c $((SYMM_LOCAL_RANK % c)) "$prog" "$@"' sh "$cpus" \
      "$BUILD/tools/symmem-bench" "$@"
  elif [ "$BIND" = none ]; then
    SYMM_BACKEND=host "$BUILD/tools/symmem-run" -n "$n" --bind-to none -- \
      "$BUILD/tools/symmem-bench" "$@"
  else
    SYMM_BACKEND=host "$BUILD/tools/symmem-run" -n "$n" -- "$BUILD/tools/symmem-bench" "$@"
  fi
}

# ROUNDS interleaved rounds of the MPI program and symmem-bench in and out
# of place, for RANKS ranks ($1) and skew $2: mpi.R.csv, symm1.R.csv and
# symm0.R.csv in a fresh $tmp/run.
run_rounds() {
  rm -rf "$tmp/run" && mkdir "$tmp/run" || exit 1
  if [ "$COLL" = all_reduce ]; then
    mpi_prog="$tmp/mpi_allreduce"; mpi_args=""; symm_args=""
  else
    mpi_prog="$tmp/mpi_alltoallv"; mpi_args="-s $2"; symm_args="--coll all_to_all_v --skew $2"
  fi
  echo "## $ROUNDS rounds of: mpirun -np $1 $mpi_flags $(basename "$mpi_prog") $mpi_args $sweep"
  for inplace in 1 0; do
    echo "##   symmem: SYMM_BACKEND=host symmem-run -n $1 -- symmem-bench --csv $symm_args --inplace $inplace $sweep"
  done
  echo "##   binding: $BIND$([ "$BIND" = core ] && echo " (rank r on CPU r mod $cpus, both sides)")"
  # Other jobs on the machine move these figures more than anything here.
  [ -r /proc/loadavg ] && echo "##   load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($cpus CPUs)"
  r=1
  while [ "$r" -le "$ROUNDS" ]; do
    # shellcheck disable=SC2086
    mpirun -np "$1" $mpi_flags "$mpi_prog" $mpi_args $sweep >"$tmp/run/mpi.$r.csv" || exit 1
    for inplace in 1 0; do
      # shellcheck disable=SC2086
      symm_bench "$1" --csv $symm_args --inplace "$inplace" -c 1 $sweep \
        >"$tmp/run/symm$inplace.$r.csv" || exit 1
    done
    r=$((r + 1))
  done
}

# Joins on size_bytes: mpi.*.csv is size,count,time,wrong (after a "# split"
# line for all-to-all-v); symmem's CSV has size in field 5, time in 9, wrong
# in 12.  Median of the rounds per column.  Exit status 1 on wrong values.
table() {
  awk -F, -v ranks="$1" -v rounds="$ROUNDS" -v coll="$COLL" -v skew="$2" -v bind="$BIND" '
  function median(key,    n, i, j, t, v) {
    n = cnt[key]
    for (i = 1; i <= n; i++) v[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function add(key, x) { val[key, ++cnt[key]] = x }
  FNR == 1 { f = FILENAME; sub(/.*\//, "", f)
             kind = f ~ /^mpi\./ ? "mpi" : f ~ /^symm1\./ ? "in" : "out" }
  /^# split: / { if (shares == "") { shares = $0; sub(/^# split: skew [^;]*; /, "", shares) }; next }
  (kind == "mpi" ? $1 : $5) !~ /^[0-9]+$/ { next }  # the CSV headers
  kind == "mpi" { add("mpi" SUBSEP $1, $3); wrong[$1] += $4; if (!($1 in seen)) { seen[$1]; order[++n] = $1 }; next }
  { add(kind SUBSEP $5, $9); wrong[$5] += $12 }
  END {
    v = coll == "all_to_all_v"
    if (v) {
      printf "# f32 all-to-all-v, %d ranks, skew %s (%s), host backend vs Open MPI MPI_Alltoallv, binding %s, median of %d rounds; ratio = MPI / symmem (> 1: symmem faster)\n", ranks, skew, shares, bind, rounds
      printf "#%13s  %12s  %14s  %6s  %14s  %6s  %6s\n", "size/rank(B)", "mpi(us)", "symm_inpl(us)",
             "ratio", "symm_oop(us)", "ratio", "#wrong"
    } else {
      printf "# f32 sum all-reduce, %d ranks, host backend vs Open MPI, median of %d rounds; ratio = symmem / MPI\n", ranks, rounds
      printf "#%13s  %12s  %14s  %6s  %14s  %6s  %6s\n", "size(B)", "mpi(us)", "symm_inpl(us)",
             "ratio", "symm_oop(us)", "ratio", "#wrong"
    }
    bad = 0
    for (i = 1; i <= n; i++) {
      s = order[i]
      if (!(("in" SUBSEP s) in cnt) || !(("out" SUBSEP s) in cnt)) continue
      m = median("mpi" SUBSEP s); a = median("in" SUBSEP s); b = median("out" SUBSEP s)
      bad += wrong[s]
      printf "%14d  %12.2f  %14.2f  %6.3f  %14.2f  %6.3f  %6d\n", s, m, a, v ? m / a : a / m, b,
             v ? m / b : b / m, wrong[s]
    }
    if (bad) { printf "# %d wrong values\n", bad; exit 1 }
  }' "$tmp"/run/mpi.*.csv "$tmp"/run/symm1.*.csv "$tmp"/run/symm0.*.csv
}

status=0
for ranks in $RANKS; do
  for skew in $SKEWS; do
    run_rounds "$ranks" "$skew"
    table "$ranks" "$skew" || status=1
  done
done
exit $status
