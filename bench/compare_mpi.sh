#!/bin/sh
# Open MPI's MPI_Allreduce beside symmem's host backend on this CPU machine:
# f32 sum, the same sizes, the same number of processes, each timed the same
# way (warmup, then back-to-back calls, mean per call of the slowest rank).
# symmem is shown in place on a symmetric tensor (its natural use) and out of
# place from malloc'd memory (what MPI gets); ratio = symmem time / MPI time.
#
#   bench/compare_mpi.sh [BUILD_DIR]
#   environment: RANKS (2), MINBYTES (8), MAXBYTES (16M), STEP (2), ITERS (20),
#                WARMUP (5)
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
trap 'rm -rf "$tmp"' EXIT INT TERM
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" || exit 1

# Open MPI refuses root unless told, and counts hardware threads strictly.
mpi_flags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
sweep="-b $MINBYTES -e $MAXBYTES -f $STEP -n $ITERS -w $WARMUP"

echo "## MPI_Allreduce: mpirun -np $RANKS $mpi_flags mpi_allreduce $sweep"
# shellcheck disable=SC2086
mpirun -np "$RANKS" $mpi_flags "$tmp/mpi_allreduce" $sweep >"$tmp/mpi.csv" || exit 1
for inplace in 1 0; do
  echo "## symmem: SYMM_BACKEND=host symmem-run -n $RANKS -- symmem-bench --csv --inplace $inplace $sweep"
  # shellcheck disable=SC2086
  SYMM_BACKEND=host "$BUILD/tools/symmem-run" -n "$RANKS" -- "$BUILD/tools/symmem-bench" \
    --csv --inplace "$inplace" -c 1 $sweep >"$tmp/symm$inplace.csv" || exit 1
done

# Join on size_bytes: mpi.csv is size,count,time,wrong; symmem's CSV has
# size in field 5, time in 9, wrong in 12.
awk -F, -v ranks="$RANKS" '
  FNR == 1 { file++; next }
  file == 1 { mpi[$1] = $3; mwrong[$1] = $4; order[++n] = $1; next }
  file == 2 { symin[$5] = $9; swrong[$5] += $12; next }
  file == 3 { symout[$5] = $9; swrong[$5] += $12; next }
  END {
    printf "# f32 sum all-reduce, %d ranks, host backend vs Open MPI; ratio = symmem / MPI\n", ranks
    printf "#%13s  %12s  %14s  %6s  %14s  %6s  %6s\n", "size(B)", "mpi(us)", "symm_inpl(us)",
           "ratio", "symm_oop(us)", "ratio", "#wrong"
    bad = 0
    for (i = 1; i <= n; i++) {
      s = order[i]
      if (!(s in symin) || !(s in symout)) continue
      w = mwrong[s] + swrong[s]
      bad += w
      printf "%14d  %12.2f  %14.2f  %6.3f  %14.2f  %6.3f  %6d\n", s, mpi[s], symin[s],
             symin[s] / mpi[s], symout[s], symout[s] / mpi[s], w
    }
    if (bad) { printf "# %d wrong values\n", bad; exit 1 }
  }' "$tmp/mpi.csv" "$tmp/symm1.csv" "$tmp/symm0.csv"
