#!/bin/sh
# Where no GPU is, every test of a GPU rank program (symm-gpu-tests,
# symm-gpu-coll-tests) skips with a reason naming the missing GPU: run
# alone, and as every rank of a job under symmem-run (the runner's rank
# mode, as run-gpu-tests.sh starts them).  Where a GPU is visible it skips
# itself (exit 77): `make test-gpu` runs the tests there.
#   check-gpu-skips.sh PROG SYMMEM_RUN
set -u
prog=$1
run=$2
name=$(basename "$prog")
if nvidia-smi -L 2>/dev/null | grep -q '^GPU' || [ -e /dev/nvidia0 ]; then
  echo "SKIP: a GPU is visible here: make test-gpu runs $name"
  exit 77
fi
fail() {
  echo "check-gpu-skips: FAIL: $*"
  exit 1
}
# The programs' output, indented: their "SKIP:" lines are theirs, not this
# check's (tests/print-skips.sh lists the tests that print one).
show() {
  printf '%s\n' "$1" | sed 's/^/  | /'
}

tests=$("$prog" --list) || fail "$name --list failed"
n=0
for t in $tests; do
  out=$("$prog" "$t" 2>&1)
  rc=$?
  show "$out"
  [ "$rc" -eq 77 ] || fail "$name $t exited $rc, not 77 (skip)"
  printf '%s\n' "$out" | grep -q '^SKIP: no GPU: ' ||
    fail "$name $t printed no \"SKIP: no GPU: <why>\" line"
  printf '%s\n' "$out" | grep -q "^rank 0: skip $t (0 checks)\$" ||
    fail "$name $t printed no \"rank 0: skip $t\" line"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "$name lists no tests"

# Two ranks, each running the whole list: both skip everything (the first
# to exit may end the other before its summary, so one summary will do).
out=$("$run" -n 2 -- "$prog" 2>&1)
rc=$?
show "$out"
[ "$rc" -eq 77 ] || fail "symmem-run -n 2 -- $name exited $rc, not 77 (every test skipped)"
printf '%s\n' "$out" | grep -Eq "^rank [01]: 0 passed, 0 failed, $n skipped, 0 checks\$" ||
  fail "no rank's summary says \"0 passed, 0 failed, $n skipped, 0 checks\""
echo "check-gpu-skips: passed, $n tests of $name skip without a GPU"
