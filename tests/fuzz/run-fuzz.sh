#!/bin/sh
# Runs every fuzz target of BUILD (make fuzz) for SECONDS each on a copy of
# its seed corpus, so that the run never writes into the repository.  A
# crash, leak, UBSan report, timeout or out-of-memory fails the target; its
# reproducer is kept under BUILD/fuzz-findings/.  One summary line per
# target, then "fuzz: N passed, N failed"; the exit status is non-zero if
# any target failed.
#   sh tests/fuzz/run-fuzz.sh BUILD [SECONDS] [TARGET...]
set -u
build=${1:?usage: run-fuzz.sh BUILD [SECONDS] [TARGET...]}
seconds=${2:-60}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
targets=${*:-"store fdx settings bench-options"}
findings="$build/fuzz-findings"
work=$(mktemp -d "${TMPDIR:-/tmp}/symm-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$findings"
passed=0
failed=0
for t in $targets; do
  exe="$build/tests/fuzz/fuzz-$t"
  corpus="$work/$t"
  mkdir -p "$corpus" "$work/$t-artifacts"
  cp "$here/corpus/$t"/* "$corpus"/
  log="$work/$t.log"
  # -close_fd_mask=3: the targets' own output (usage texts, store
  # warnings) goes nowhere; libFuzzer and the sanitizers still report.
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak
  # or runaway allocation.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
      -print_final_stats=1 -artifact_prefix="$work/$t-artifacts/" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz-$t: passed (${runs:-?} runs in ${seconds} s, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l) inputs)"
  else
    failed=$((failed + 1))
    echo "fuzz-$t: FAILED (exit $rc after ${runs:-?} runs)"
    report=$log
    for a in "$work/$t-artifacts"/*; do
      [ -f "$a" ] || continue
      kept="$findings/$(basename "$a")"
      cp "$a" "$kept"
      echo "  reproducer: $kept (run: $exe $kept)"
      # Again with the target's own output, which the run discarded.
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$exe" "$kept" >"$work/$t.rerun" 2>&1
      grep -q 'ERROR\|runtime error' "$work/$t.rerun" && report="$work/$t.rerun"
    done
    sed -n '/ERROR\|runtime error\|^fuzz-[a-z-]*: /,/^SUMMARY/p' "$report" | grep -v 'Running 1 inputs' |
      head -n 40 | sed 's/^/  /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
