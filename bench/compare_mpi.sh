#!/bin/sh
# Open MPI beside symmem's host backend on this CPU machine, each timed the
# same way (warmup, then back-to-back calls, mean per call of the slowest
# rank), the same sizes, the same number of processes, bound the same way:
#
#   all_reduce      MPI_Allreduce             vs symm_all_reduce (f32 sum)
#   all_gather      MPI_Allgather             vs symm_all_gather
#   reduce_scatter  MPI_Reduce_scatter_block  vs symm_reduce_scatter (sum)
#   broadcast       MPI_Bcast (root 0)        vs symm_broadcast
#   all_to_all      MPI_Alltoall              vs symm_all_to_all
#   all_to_all_v    MPI_Alltoallv             vs symm_all_to_all_v, with the
#     same counts on both sides (tools/symmem_bench_split.h): every rank
#     sends SIZE bytes split over the ranks, uniformly (skew 1) or skewed
#     like MoE routing (skew S: the hottest rank gets S times the coldest).
#
# Sizes mean what they mean to symmem-bench and nccl-tests: the bytes of
# the whole result, which the gathers and scatters split over the ranks;
# for all_to_all_v the bytes each rank sends.  The MPI side is
# bench/mpi_coll.c (bench/mpi_alltoallv.c for all_to_all_v).  Every ratio
# is symmem's time over MPI's: below 1, symmem is faster (issue goals are
# stated that way: all-reduce <= 0.5, the others <= 0.7).  symmem is shown
# in place on a symmetric tensor (its natural use) and out of place from
# malloc'd memory (what MPI gets).
#
# With all_reduce in COLL and build/bench/cacheline_pingpong built, the
# machine's floor is measured first (a cache-line round trip between two
# pinned CPUs, one core's copy bandwidth, the context switch of two
# processes taking turns on one CPU) and each all-reduce table ends with
# the smallest size as a multiple of the round trip (with more ranks than
# CPUs, of the k context switches a call costs where k ranks share each
# CPU: each must run once a call) and the largest size's algorithm
# bandwidth (bytes / time) as a fraction of the copy bandwidth.  The
# all-gather, broadcast and all-to-all tables end with what each rank
# receives per second at the largest size out of place, on both sides,
# against the kernel's copy from another process (process_vm_readv, which
# both use there), measured with the floor.
#
#   bench/compare_mpi.sh [BUILD_DIR]
#   environment: COLL (all_reduce; a list, or "all" for every one above),
#                RANKS ("2 4"), SKEWS (all_to_all_v: "1 4"), MINBYTES (8;
#                all_to_all_v: 1K), MAXBYTES (16M), STEP (2), ITERS (20),
#                WARMUP (5), SMALL_ITERS (50 x ITERS), SMALL_WARMUP
#                (20 x WARMUP), ROUNDS (3), BIND (core | default | none),
#                BENCH_FLAGS (more symmem-bench options, e.g.
#                "--algo two_shot"; tests pass "--inject-errors 1")
#
# Sizes below 8 KiB get SMALL_ITERS timed calls after SMALL_WARMUP
# untimed ones, on both sides (a second sweep of each program): 20 calls
# of 8 bytes last about 5 us, and the first size of a sweep then measured
# its warm-up (8 B at 3 to 14 round trips where a thousand calls take 2).
#
# The runs are repeated ROUNDS times, interleaved, and each column is the
# median of its rounds: on a shared VM the memory bandwidth was seen to
# swing by 4x between runs minutes apart, which a single sequential pass
# turns into a ratio that belongs to neither side.
#
# BIND says where the processes run.  core (the default): both sides bind
# rank r to CPU r mod the CPUs, oversubscribed too (mpirun --bind-to
# core:overload-allowed, symmem-bench under taskset).  default: neither
# launcher is told, and each binds as it does by default: mpirun rank r to
# core r up to 2 processes, nowhere when oversubscribed; symmem-run a core
# per rank where there is one, else nowhere.  none: neither binds.  Small
# calls between two processes that share a CPU wait for the scheduler, so
# the choice can move small-size times by 10x on a machine with few CPUs.
#
# It installs nothing: without mpicc and mpirun it says how to get them.
# Exit status: 1 if any side returned a wrong value, 2 on a bad setting.
set -u
BUILD=${1:-build}
ALL="all_reduce all_gather reduce_scatter broadcast all_to_all all_to_all_v"
COLL=$(echo "${COLL:-all_reduce}" | tr ',' ' ')
[ "$COLL" = all ] && COLL=$ALL
for c in $COLL; do
  case " $ALL " in
    *" $c "*) ;;
    *) echo "compare_mpi: COLL has $c; it takes all, or a list of: $ALL" >&2; exit 2 ;;
  esac
done
RANKS=${RANKS:-2 4}
SKEWS=${SKEWS:-1 4}
MAXBYTES=${MAXBYTES:-16M}
STEP=${STEP:-2}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SMALL_BELOW=8192
ROUNDS=${ROUNDS:-3}
BIND=${BIND:-core}
whole() {
  for v in "$@"; do
    case "${v#*=}" in
      '' | *[!0-9]*) echo "compare_mpi: $v is not a whole number" >&2; exit 2 ;;
    esac
  done
}
whole "STEP=$STEP" "ITERS=$ITERS" "WARMUP=$WARMUP" "ROUNDS=$ROUNDS"
SMALL_ITERS=${SMALL_ITERS:-$((50 * ITERS))}
SMALL_WARMUP=${SMALL_WARMUP:-$((20 * WARMUP))}
whole "SMALL_ITERS=$SMALL_ITERS" "SMALL_WARMUP=$SMALL_WARMUP"
if [ "$STEP" -lt 2 ] || [ "$ROUNDS" -lt 1 ]; then
  echo "compare_mpi: STEP must be 2 or more and ROUNDS 1 or more" >&2
  exit 2
fi
case "$BIND" in
  default | core | none) ;;
  *) echo "compare_mpi: BIND=$BIND; it takes core, default or none" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)

# SIZE as symmem-bench reads it (8, 1K, 4M, 1G, 64KB, 16MiB) in bytes;
# exit 2 on anything else.
to_bytes() {
  n=${1%B}
  n=${n%i}
  unit=1
  case "$n" in
    *[kK]) unit=1024 n=${n%?} ;;
    *[mM]) unit=1048576 n=${n%?} ;;
    *[gG]) unit=1073741824 n=${n%?} ;;
  esac
  case "$n" in
    '' | *[!0-9]*) echo "compare_mpi: size $1 is not a number with K, M or G" >&2; exit 2 ;;
  esac
  n=$(echo "$n" | sed 's/^0*\([0-9]\)/\1/') # no octal
  echo $((n * unit))
}

# The sweeps from $1 bytes: "-b A -e B -n N -w W" once for the sizes below
# SMALL_BELOW and once for the rest, each where it has a size.
sweeps() {
  s=$(to_bytes "$1") && max=$(to_bytes "$MAXBYTES") || exit 2
  small=""
  while [ "$s" -lt "$SMALL_BELOW" ] && [ "$s" -le "$max" ]; do
    small=$s
    s=$((s * STEP))
  done
  if [ -n "$small" ]; then
    echo "-b $(to_bytes "$1") -e $small -f $STEP -n $SMALL_ITERS -w $SMALL_WARMUP"
  fi
  if [ "$s" -le "$max" ]; then echo "-b $s -e $max -f $STEP -n $ITERS -w $WARMUP"; fi
}

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
if [ "$BIND" = core ] && ! command -v taskset >/dev/null 2>&1; then
  echo "compare_mpi: BIND=core needs taskset (util-linux)" >&2
  exit 1
fi

tmp=$(mktemp -d /tmp/symm-compare-mpi.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# A trap on INT/TERM alone would run and then let the script go on without
# its temporary files; exiting runs the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
mpicc -O2 -o "$tmp/mpi_coll" "$here/mpi_coll.c" || exit 1
mpicc -O2 -o "$tmp/mpi_alltoallv" "$here/mpi_alltoallv.c" -lm || exit 1

# Open MPI refuses root unless told, and counts hardware threads strictly.
mpi_flags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
[ "$BIND" = core ] && mpi_flags="$mpi_flags --bind-to core:overload-allowed"
[ "$BIND" = none ] && mpi_flags="$mpi_flags --bind-to none"
cpus=$(nproc)

# The floor (all_reduce and the kinds that move data): "round_trip_ns
# copy_gbps switch_ns cma_gbps", or empty.
floor=""
case " $COLL " in
  *" all_reduce "* | *" all_gather "* | *" broadcast "* | *" all_to_all "*)
    if [ -x "$BUILD/bench/cacheline_pingpong" ] && [ "$cpus" -ge 2 ]; then
      "$BUILD/bench/cacheline_pingpong" >"$tmp/floor" || exit 1
      sed 's/^/## /' "$tmp/floor"
      floor=$(sed -n 's/^floor: round_trip_ns=\([0-9.]*\) copy_gbps=\([0-9.]*\) switch_ns=\([0-9.]*\) cma_gbps=\([0-9.]*\).*/\1 \2 \3 \4/p' "$tmp/floor")
    else
      echo "## floor: not measured ($BUILD/bench/cacheline_pingpong not built, or one CPU)"
    fi
    ;;
esac

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
# of place, collective $1, $2 ranks, skew $3: mpi.R.csv, symm1.R.csv and
# symm0.R.csv in a fresh $tmp/run.
run_rounds() {
  rm -rf "$tmp/run" && mkdir "$tmp/run" || exit 1
  if [ "$1" = all_to_all_v ]; then
    mpi_prog="$tmp/mpi_alltoallv"; mpi_args="-s $3"; symm_args="--coll all_to_all_v --skew $3"
    min=${MINBYTES:-1K}
  else
    mpi_prog="$tmp/mpi_coll"; mpi_args="-c $1"; symm_args="--coll $1"
    min=${MINBYTES:-8}
  fi
  all_sweeps=$(sweeps "$min") || exit 2
  if [ -z "$all_sweeps" ]; then
    echo "compare_mpi: no size from $min to $MAXBYTES" >&2
    exit 2
  fi
  echo "$all_sweeps" | while read -r sweep; do
    echo "## $ROUNDS rounds of: mpirun -np $2 $mpi_flags $(basename "$mpi_prog") $mpi_args $sweep"
    for inplace in 1 0; do
      echo "##   symmem: SYMM_BACKEND=host symmem-run -n $2 -- symmem-bench --csv $symm_args --inplace $inplace $sweep ${BENCH_FLAGS:-}"
    done
  done
  echo "##   binding: $BIND$([ "$BIND" = core ] && echo " (rank r on CPU r mod $cpus, both sides)")"
  # Other jobs on the machine move these figures more than anything here.
  [ -r /proc/loadavg ] && echo "##   load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($cpus CPUs)"
  r=1
  while [ "$r" -le "$ROUNDS" ]; do
    for sweep in $(echo "$all_sweeps" | tr ' ' ,); do
      sweep=$(echo "$sweep" | tr , ' ')
      # shellcheck disable=SC2086
      mpirun -np "$2" $mpi_flags "$mpi_prog" $mpi_args $sweep >>"$tmp/run/mpi.$r.csv" || exit 1
      for inplace in 1 0; do
        # shellcheck disable=SC2086
        symm_bench "$2" --csv $symm_args --inplace "$inplace" -c 1 $sweep ${BENCH_FLAGS:-} \
          >>"$tmp/run/symm$inplace.$r.csv" || exit 1
      done
    done
    r=$((r + 1))
  done
}

# Joins on size_bytes: mpi.*.csv is size,count,time,wrong (after a "# split"
# line for all-to-all-v); symmem's CSV has size in field 5, time in 9, wrong
# in 12.  Median of the rounds per column.  Exit status 1 on wrong values.
# $1 collective, $2 ranks, $3 skew.
table() {
  awk -F, -v coll="$1" -v ranks="$2" -v skew="$3" -v rounds="$ROUNDS" -v bind="$BIND" \
    -v floor="$floor" -v cpus="$cpus" '
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
    split("all_reduce:MPI_Allreduce all_gather:MPI_Allgather reduce_scatter:MPI_Reduce_scatter_block " \
          "broadcast:MPI_Bcast all_to_all:MPI_Alltoall all_to_all_v:MPI_Alltoallv", pairs, " ")
    for (i in pairs) { split(pairs[i], kv, ":"); peer[kv[1]] = kv[2] }
    v = coll == "all_to_all_v"
    printf "# f32 %s%s, %d ranks%s, host backend vs Open MPI %s, binding %s, median of %d rounds; ratio = symmem / MPI (< 1: symmem faster)\n",
           coll, coll ~ /reduce/ ? " (sum)" : "", ranks, v ? ", skew " skew " (" shares ")" : "",
           peer[coll], bind, rounds
    printf "#%13s  %12s  %14s  %6s  %14s  %6s  %6s\n", v ? "size/rank(B)" : "size(B)", "mpi(us)",
           "symm_inpl(us)", "ratio", "symm_oop(us)", "ratio", "#wrong"
    bad = 0; first = ""; last = ""
    for (i = 1; i <= n; i++) {
      s = order[i]
      if (!(("in" SUBSEP s) in cnt) || !(("out" SUBSEP s) in cnt)) continue
      m = median("mpi" SUBSEP s); a = median("in" SUBSEP s); b = median("out" SUBSEP s)
      bad += wrong[s]
      printf "%14d  %12.2f  %14.2f  %6.3f  %14.2f  %6.3f  %6d\n", s, m, a, a / m, b, b / m, wrong[s]
      if (first == "") { first = s; fa = a; fb = b }
      last = s; la = a; lb = b; lm = m
    }
    if (coll == "all_reduce" && floor != "" && first != "") {
      split(floor, fl, " ")
      k = int((ranks + cpus - 1) / cpus)  # ranks a CPU
      if (k < 2)
        printf "# floor: %d B in place %.2f us = %.1f x the cache-line round trip (%.0f ns); out of place %.1f x\n",
               first, fa, fa * 1000 / fl[1], fl[1], fb * 1000 / fl[1]
      else
        printf "# floor: %d B in place %.2f us = %.2f x the scheduler'"'"'s floor: %d ranks a CPU run in turn, %d context switches (%.2f us each) a call; out of place %.2f x\n",
               first, fa, fa * 1000 / (k * fl[3]), k, k, fl[3] / 1000, fb * 1000 / (k * fl[3])
      printf "# floor: %d B in place %.2f GB/s (bytes / time) = %.0f%% of one core'"'"'s copy bandwidth (%.2f GB/s); out of place %.0f%%\n",
             last, last / (la * 1000), 100 * last / (la * 1000) / fl[2], fl[2], 100 * last / (lb * 1000) / fl[2]
    }
    # What each rank receives from its peers, read out of place with the
    # kernel'"'"'s copy from another process on both sides (from 32 KiB a
    # piece: symmem'"'"'s cross-memory attach, Open MPI'"'"'s single copy).
    got = coll == "broadcast" ? last : coll ~ /^all_(gather|to_all)$/ ? last * (ranks - 1) / ranks : 0
    if (got && floor != "" && last != "") {
      split(floor, fl, " ")
      if (fl[4] > 0)
        printf "# floor: %d B out of place, each rank receives %.2f GB/s (received bytes / time) = %.0f%% of the kernel'"'"'s copy from another process (%.2f GB/s, process_vm_readv of 8 MiB); MPI %.0f%%\n",
               last, got / (lb * 1000), 100 * got / (lb * 1000) / fl[4], fl[4], 100 * got / (lm * 1000) / fl[4]
      else
        printf "# floor: the kernel'"'"'s copy from another process not measured (process_vm_readv not permitted here)\n"
    }
    if (bad) { printf "# %d wrong values\n", bad; exit 1 }
  }' "$tmp"/run/mpi.*.csv "$tmp"/run/symm1.*.csv "$tmp"/run/symm0.*.csv
}

status=0
for coll in $COLL; do
  skews=1
  [ "$coll" = all_to_all_v ] && skews=$SKEWS
  for ranks in $RANKS; do
    for skew in $skews; do
      run_rounds "$coll" "$ranks" "$skew"
      table "$coll" "$ranks" "$skew" || status=1
    done
  done
done
exit $status
