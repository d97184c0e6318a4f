#!/bin/sh
# shellcheck disable=SC2086 # $QUICK, $COLL_QUICK: lists of test names, split on purpose
# GPU test suite (called by `make test-gpu`).
#   tests/gpu/run-gpu-tests.sh [BUILD_DIR]
# The GPU tests are two lists of the tests' runner (tests/gpu/list-gpu.h:
# symm-gpu-tests, the native backend; list-gpu-coll.h: symm-gpu-coll-tests,
# the collectives), built as rank programs: symmem-run starts one process
# per rank (compute-sanitizer may wrap each), and every rank runs the tests
# named after the program (default: the whole list) in order, printing
# "rank R: ok NAME (N checks)" per test and "rank R: N passed, N failed,
# N skipped, N checks" at the end.  A failed check aborts its rank and
# symmem-run stops the job; each test has its own timeout (the runner's
# SIGALRM).  A step fails if any rank failed, or if every test skipped.
#
# Steps: symmem-info; the GPU tests with 2 ranks (one GPU each), 4 ranks
# (two per GPU, SYMM_ALLOW_SHARED_DEVICE=1) and 8 shared ranks; the refusal
# of shared GPUs without that setting (gpu_shared_device_refused alone);
# the collectives (2 ranks, 2 ranks with one block per kernel, 4 and 8
# shared ranks, 2 ranks on each available provider backend, nvshmem both
# through symmem's bootstrap plugin and from a unique id) and a rank
# that never calls (gpu_coll_rank_never_calls alone, SYMM_TIMEOUT_MS=3000);
# the GPU example examples/ring_signals; the PyTorch examples
# (python/examples/torch_*.py) where torch has CUDA; the native backend's
# protocol and the multi-process conformance tests over the fake driver;
# the GPU tests and the collectives once more under compute-sanitizer
# memcheck, and the collectives under racecheck (shared-memory hazards in
# the kernels).  The runs marked quick leave out the longest tests
# (gpu_alloc_cycles_long, gpu_coll_ops_large).
# Exits non-zero if any step failed.  SYMM_GPU_TEST_STATE (below) lets a
# run cut short go on where it stopped.  compute-sanitizer does not count the
# driver errors that symmem provokes on purpose (the fabric-export probe, the
# validate tests on non-VMM memory): those are checked by the tests.
set -u
BUILD=$(cd "${1:-build}" 2>/dev/null && pwd) || {
  echo "run-gpu-tests: build directory ${1:-build} not found" >&2
  exit 1
}
RUN="$BUILD/tools/symmem-run"
INFO="$BUILD/tools/symmem-info"
PROG="$BUILD/tests/gpu/symm-gpu-tests"
COLL="$BUILD/tests/gpu/symm-gpu-coll-tests"
STEP_TIMEOUT=${SYMM_GPU_TEST_TIMEOUT:-900}

# The GPU safety rule (docs/design.md): NVLink multicast stays off on shared hosts.
# These must be set before anything touches a GPU; the tests check them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SYMM_BACKEND=native
# The test programs link libsymmem statically: the nvshmem backend's
# bootstrap plugin is not beside them, so they are told where it is.
export SYMM_NVSHMEM_BOOTSTRAP_PLUGIN="$BUILD/libsymmem_nvshmem_bootstrap.so"

for f in "$RUN" "$INFO" "$PROG" "$COLL" "$BUILD/examples/ring_signals"; do
  if [ ! -x "$f" ]; then
    echo "run-gpu-tests: $f missing (was the build made with nvcc present?)" >&2
    exit 1
  fi
done

# The quick runs: every test but the longest of each list (word-split on
# purpose where used).
QUICK=$("$PROG" --list | grep -vx gpu_alloc_cycles_long)
COLL_QUICK=$("$COLL" --list | grep -vx gpu_coll_ops_large)

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] 2>/dev/null || ngpu=0
echo "# run-gpu-tests: $ngpu GPU(s) visible"
if [ "$ngpu" -lt 1 ]; then
  echo "run-gpu-tests: no GPU visible (nvidia-smi -L)" >&2
  "$INFO" >&2
  exit 1
fi

passed=0
failed=0
failed_steps=""
# SYMM_GPU_TEST_STATE=FILE: each step that passes is recorded in FILE, and
# a step FILE already records is not run again (counted as passed): a run
# cut short by a time limit goes on where it stopped when started again.
STATE=${SYMM_GPU_TEST_STATE:-}
step() {
  name=$1
  shift
  if [ -n "$STATE" ] && [ -f "$STATE" ] && grep -qxF "$name" "$STATE"; then
    echo "=== $name: ok (passed in an earlier run, $STATE)"
    passed=$((passed + 1))
    return
  fi
  echo "=== $name: $*"
  if timeout "$STEP_TIMEOUT" "$@"; then
    echo "=== $name: ok"
    [ -n "$STATE" ] && echo "$name" >>"$STATE"
    passed=$((passed + 1))
  else
    echo "=== $name: FAILED (exit $?)"
    failed=$((failed + 1))
    failed_steps="$failed_steps
  $name"
  fi
}

# Two ranks need two GPUs unless they may share one.
two_rank_env=""
[ "$ngpu" -lt 2 ] && two_rank_env="SYMM_ALLOW_SHARED_DEVICE=1"

step "symmem-info" "$INFO"
step "GPU tests, 2 ranks" env $two_rank_env "$RUN" -n 2 -- "$PROG"
step "GPU tests, 4 ranks on $ngpu GPU(s), shared" env SYMM_ALLOW_SHARED_DEVICE=1 \
  "$RUN" -n 4 -- "$PROG"
if [ "$ngpu" -lt 4 ]; then
  step "gpu_shared_device_refused, 4 ranks without SYMM_ALLOW_SHARED_DEVICE" \
    env -u SYMM_ALLOW_SHARED_DEVICE "$RUN" -n 4 -- "$PROG" gpu_shared_device_refused
fi
# Collectives: every op/dtype/reduction/algorithm against a host reference,
# graph capture and replay, mismatched calls; then a rank that never calls
# (short timeout: the others must report SYMM_ERR_TIMEOUT, not hang).  The
# 4-rank run shares GPUs between processes, which time-slice: slow but it
# must still be correct.
step "collectives, 2 ranks" env $two_rank_env "$RUN" -n 2 -- "$COLL"
# The same collectives on the provider backends' memory, those symmem-info
# reports available here.  NCCL refuses two ranks on one GPU.
for be in cuda nccl nvshmem; do
  if ! "$INFO" | grep -Eq "^  $be +available"; then
    echo "=== collectives on $be: skipped ($be not available here)"
  elif [ "$be" = nccl ] && [ "$ngpu" -lt 2 ]; then
    echo "=== collectives on nccl: skipped (NCCL needs one GPU per rank, $ngpu GPU here)"
  else
    step "collectives on $be, 2 ranks, quick" env $two_rank_env SYMM_BACKEND=$be \
      "$RUN" -n 2 -- "$COLL" $COLL_QUICK
  fi
done
# The user's own memory registered on every provider backend (native ran
# it above): NVSHMEM registers whole mappings of its granularity, set to
# the 2 MiB the test allocates.
for be in cuda nccl nvshmem; do
  if ! "$INFO" | grep -Eq "^  $be +available"; then
    echo "=== gpu_register_user on $be: skipped ($be not available here)"
  elif [ "$be" = nccl ] && [ "$ngpu" -lt 2 ]; then
    echo "=== gpu_register_user on nccl: skipped (NCCL needs one GPU per rank, $ngpu GPU here)"
  else
    step "gpu_register_user on $be, 2 ranks" env $two_rank_env SYMM_BACKEND=$be \
      NVSHMEM_CUMEM_GRANULARITY=2097152 "$RUN" -n 2 -- "$PROG" gpu_register_user
  fi
done
# NVSHMEM's default granularity (512 MiB) and a 2 MiB mapping, which NVSHMEM
# 3.4.5 faults the context on: refused before NVSHMEM sees it.
if "$INFO" | grep -Eq "^  nvshmem +available"; then
  step "gpu_register_user on nvshmem, granularity unset (refused), 2 ranks" \
    env -u NVSHMEM_CUMEM_GRANULARITY $two_rank_env SYMM_BACKEND=nvshmem \
    "$RUN" -n 2 -- "$PROG" gpu_register_user
fi
# NVSHMEM both ways: above through symmem's bootstrap plugin (auto, where
# the plugin is found), here from rank 0's unique id.
if "$INFO" | grep -Eq "^  nvshmem +available"; then
  step "collectives on nvshmem from a unique id, 2 ranks, quick" env $two_rank_env \
    SYMM_BACKEND=nvshmem SYMM_NVSHMEM_BOOTSTRAP=uniqueid "$RUN" -n 2 -- "$COLL" $COLL_QUICK
fi
# Machines with more GPUs: every GPU its own rank, up to 8 (issue 5's run).
if [ "$ngpu" -ge 3 ]; then
  nall=$ngpu
  [ "$nall" -gt 8 ] && nall=8
  step "GPU tests, $nall ranks, one GPU each" "$RUN" -n "$nall" -- "$PROG"
  step "collectives, $nall ranks, one GPU each" "$RUN" -n "$nall" -- "$COLL"
fi
step "collectives, 4 ranks on $ngpu GPU(s), shared, quick" env SYMM_ALLOW_SHARED_DEVICE=1 \
  "$RUN" -n 4 -- "$COLL" $COLL_QUICK
# One block per kernel: LL128 then runs many rounds (64 lines each), which
# the default grids reach only from about 1 MiB.
step "collectives, 2 ranks, one block per kernel, quick" env $two_rank_env \
  SYMM_COLL_MAX_BLOCKS=1 "$RUN" -n 2 -- "$COLL" $COLL_QUICK
# Issue 5's run on fewer GPUs: 8 ranks share them, for correctness (the
# channel count per rank is smallest there: 27 at 8 ranks).
if [ "$ngpu" -lt 8 ]; then
  step "GPU tests, 8 ranks on $ngpu GPU(s), shared" env SYMM_ALLOW_SHARED_DEVICE=1 \
    "$RUN" -n 8 -- "$PROG"
  step "collectives, 8 ranks on $ngpu GPU(s), shared, quick" env SYMM_ALLOW_SHARED_DEVICE=1 \
    "$RUN" -n 8 -- "$COLL" $COLL_QUICK
fi
step "gpu_coll_rank_never_calls, 2 ranks" env $two_rank_env SYMM_TIMEOUT_MS=3000 \
  "$RUN" -n 2 -- "$COLL" gpu_coll_rank_never_calls
# The GPU example (a user kernel with the device-side signals) checks what
# it received and exits non-zero on any wrong element or device error.
step "examples/ring_signals, 2 ranks" env $two_rank_env "$RUN" -n 2 -- \
  "$BUILD/examples/ring_signals"
# PyTorch on the GPU (python/examples), where python3 has torch with CUDA:
# zero-copy views and an all-reduce on torch's stream, the all-reduce in a
# CUDA graph, torch.cuda.MemPool blocks from symmem's allocator.
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  2>/dev/null; then
  for ex in torch_gpu torch_graph torch_mempool; do
    step "python/examples/$ex.py, 2 ranks" env $two_rank_env \
      SYMMEM_LIBRARY="$BUILD/libsymmem.so" PYTHONPATH="$REPO/python" \
      "$RUN" -n 2 -- python3 "$REPO/python/examples/$ex.py"
  done
else
  echo "=== PyTorch examples: SKIP (no python3 with torch and CUDA here)"
fi
# The multi-process conformance tests and the backend's protocol tests run
# with the native backend over the fake driver (tests/fakes/fake_cuda.c): its
# "device memory" is host memory, which those CPU-side tests read and write
# directly (the harness reads SYMM_TEST_BACKEND; tests labelled
# "conformance").  The real GPU is covered by symm-gpu-tests above.
FAKE="$BUILD/tests/fakes/libsymm-fakecuda.so"
# Expanded by the inner sh: $0 is the build directory, "$@" ctest's options.
# shellcheck disable=SC2016
CTEST_IN_BUILD='cd "$0" && exec ctest --output-on-failure --timeout 300 "$@"'
step "native over the fake driver" sh -c "$CTEST_IN_BUILD" "$BUILD" -R '^native_fake_'
step "conformance suite (native, fake driver)" env SYMM_TEST_BACKEND=native \
  SYMM_CUDA_LIB="$FAKE" SYMM_ALLOW_SHARED_DEVICE=1 \
  sh -c "$CTEST_IN_BUILD" "$BUILD" -L conformance --no-tests=ignore
SANITIZER=$(command -v compute-sanitizer ||
  echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$SANITIZER" ]; then
  step "compute-sanitizer memcheck, GPU tests, quick" env $two_rank_env "$RUN" -n 2 -- \
    "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 97 "$PROG" $QUICK
  step "compute-sanitizer memcheck, collectives, quick" env $two_rank_env "$RUN" -n 2 -- \
    "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 97 "$COLL" $COLL_QUICK
  step "compute-sanitizer racecheck, collectives, quick" env $two_rank_env "$RUN" -n 2 -- \
    "$SANITIZER" --tool racecheck --report-api-errors no --error-exitcode 97 "$COLL" $COLL_QUICK
else
  echo "=== compute-sanitizer memcheck: compute-sanitizer not found"
  failed=$((failed + 1))
  failed_steps="$failed_steps
  compute-sanitizer (not found)"
fi

echo "run-gpu-tests: $passed passed, $failed failed$failed_steps"
[ "$failed" -eq 0 ]
