#!/bin/sh
# bench/compare_mpi.sh end to end at tiny sizes (what it prints, not how
# fast): every collective beside its MPI counterpart at 2 ranks, a table per
# collective (two for all_to_all_v's skews) whose #wrong column is 0 on
# every row, the floor lines; wrong values injected
# into symmem's side make it fail with the count; a collective it does not
# know, a STEP below 2, a size it cannot read and an empty sweep are
# refused.
#   tests/check-compare-mpi.sh BUILD_DIR SOURCE_DIR
# Exit 77 (ctest's skip) without mpicc and mpirun.
set -u
BUILD=$1
SRC=$2
for tool in mpicc mpirun; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool not found (Open MPI: apt-get install openmpi-bin libopenmpi-dev)"
    exit 77
  fi
done
out=$(mktemp /tmp/check-compare-mpi.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT
fail() { echo "check-compare-mpi: FAILED: $*"; cat "$out"; exit 1; }
quick() {
  env COLL=all RANKS=2 ROUNDS=1 ITERS=2 WARMUP=1 MAXBYTES=4K STEP=4 BIND=none "$@" \
    sh "$SRC/bench/compare_mpi.sh" "$BUILD" >"$out" 2>&1
}

quick
rc=$?
[ "$rc" -eq 0 ] || fail "exit $rc on a clean run"
for c in all_reduce all_gather reduce_scatter broadcast all_to_all; do
  grep -q "^# f32 $c.*vs Open MPI MPI_" "$out" || fail "no table for $c"
done
[ "$(grep -c '^# f32 all_to_all_v' "$out")" -eq 2 ] || fail "all_to_all_v: not one table per skew"
# Every data row: 7 columns, the last (#wrong) 0; at least 2 rows per table.
awk '/^# f32 / { if (t && rows < 2) bad = 1; t++; rows = 0; next }
     /^ +[0-9]/ { rows++; if (NF != 7 || $7 != 0) bad = 1 }
     END { if (t != 7 || rows < 2 || bad) exit 1 }' "$out" || fail "rows or #wrong"

# The all-reduce table's floor: at 2 ranks the cache-line round trip; with
# more ranks than CPUs (checked where that is 3 or 4 ranks), the context
# switches of the ranks that share a CPU.
if [ -x "$BUILD/bench/cacheline_pingpong" ] && [ "$(nproc)" -ge 2 ]; then
  grep -q '^# floor: 8 B in place .* x the cache-line round trip' "$out" ||
    fail "no round-trip floor at 2 ranks"
  # all_gather, broadcast, all_to_all: against the kernel's copy from
  # another process, or why it was not measured.
  [ "$(grep -Ec "^# floor: [0-9]+ B out of place, each rank receives .* of the kernel's copy from another process|^# floor: the kernel's copy from another process not measured" "$out")" -eq 3 ] ||
    fail "not one cross-process copy floor for each kind that moves data"
  cpus=$(nproc)
  if [ "$cpus" -le 3 ]; then
    quick COLL=all_reduce RANKS=$((cpus + 1))
    rc=$?
    [ "$rc" -eq 0 ] || fail "$((cpus + 1)) ranks on $cpus CPUs: exit $rc"
    grep -q "^# floor: 8 B in place .* x the scheduler's floor: 2 ranks a CPU run in turn, 2 context switches" "$out" ||
      fail "no scheduler's floor with more ranks than CPUs"
  fi
fi

quick BENCH_FLAGS="--inject-errors 1" COLL=all_gather
rc=$?
[ "$rc" -eq 1 ] || fail "injected errors: exit $rc, want 1"
grep -Eq '(^# |symmem-bench: )[1-9][0-9]* wrong values' "$out" || fail "injected errors not counted"

quick COLL=all_reduce,allgather
rc=$?
[ "$rc" -eq 2 ] || fail "unknown collective: exit $rc, want 2"
grep -q 'COLL has allgather' "$out" || fail "unknown collective not named"
for bad in STEP=1 MAXBYTES=3Q MINBYTES=8M; do
  quick "$bad"
  rc=$?
  [ "$rc" -eq 2 ] || fail "$bad: exit $rc, want 2"
done
grep -q 'no size from 8M to 4K' "$out" || fail "an empty sweep not named"
echo "check-compare-mpi: passed"
