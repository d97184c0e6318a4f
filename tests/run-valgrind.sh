#!/bin/sh
# A representative subset of the CPU tests under valgrind memcheck (called
# by `make test-valgrind`): init and destroy, rendezvous and views,
# signals, collectives, the store, the fd exchange, the seam's own backend.
# Every process (the ranks are forked children) must end with no memory
# error and no definite leak.
#   tests/run-valgrind.sh [BUILD_DIR]
set -u
BUILD=${1:-build}
TESTS="core_single_rank core_signal_pad_and_validate core_tensor_after_destroy
  ranks_full_path_2 ranks_pool_reuse ranks_mismatch_size signal_ping_pong coll_ops_2
  store_set_get store_bad_args fdx_all_pairs seam_arena_2 seam_collective_alloc"
command -v valgrind >/dev/null || { echo "run-valgrind: valgrind not found" >&2; exit 1; }
passed=0
failed=0
for t in $TESTS; do
  log=$(mktemp /tmp/symm-valgrind.XXXXXX)
  if timeout 600 valgrind -q --error-exitcode=99 --leak-check=full \
      --errors-for-leak-kinds=definite --trace-children=yes \
      "$BUILD/tests/symm-tests" "$t" >"$log" 2>&1; then
    echo "valgrind $t: ok"
    passed=$((passed + 1))
  else
    echo "valgrind $t: FAILED"
    cat "$log"
    failed=$((failed + 1))
  fi
  rm -f "$log"
done
echo "run-valgrind: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
