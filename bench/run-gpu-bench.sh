#!/bin/sh
# GPU benchmarks (called by `make bench-gpu`), each beside its peer in the
# same run:
#  - peer bandwidth through symmetric memory: SM copy kernel vs copy engine
#  - alloc + rendezvous: symmem vs PyTorch symm_mem (bench/compare_rendezvous.py)
#  - bf16 all-reduce, eager and CUDA graph: symmem-bench vs PyTorch's symm_mem
#    one-shot / two-shot and dist.all_reduce (NCCL) (bench/compare_allreduce.py)
#  - each all-reduce algorithm forced (ll, ll128, one_shot, two_shot) in a CUDA
#    graph, with NCCL's column: the crossovers that set `auto`
#  - all-gather and reduce-scatter against NCCL
#  - the crossovers of the forced sweeps and the thresholds `auto` should
#    use, per rank count (bench/crossovers.py)
#  - per backend (native, cuda, nccl, nvshmem, those symmem-info reports
#    available): alloc + rendezvous, bf16 all-reduce from 4 KiB to 64 MiB in
#    a CUDA graph beside NCCL's column, and peer bandwidth, on 2 ranks
# The rendezvous, all-reduce and per-algorithm sections run for every rank
# count of SYMM_BENCH_RANKS (default: those of 2, 4, 8 that the GPUs allow,
# one GPU per rank), so that an 8-GPU machine gives the crossovers at 4 and
# 8 ranks in the same command.
#   bench/run-gpu-bench.sh [BUILD_DIR]
set -u
BUILD=${1:-build}
# The GPU safety rule (docs/design.md), for every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "bench-gpu: needs 2 GPUs, found ${ngpu:-0}" >&2
  exit 1
fi
status=0
sweeps=$(mktemp /tmp/symm-bench-sweeps.XXXXXX) || exit 1
trap 'rm -f "$sweeps" "$sweeps.out"' EXIT
# A trap on INT/TERM alone would run and then let the script go on without
# its temporary files; exiting runs the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM
echo "## peer bandwidth: $BUILD/tools/symmem-run -n 2 -- $BUILD/bench/bench_peer_bw"
"$BUILD/tools/symmem-run" -n 2 -- "$BUILD/bench/bench_peer_bw" || status=1
echo
if [ -z "${SYMM_BENCH_RANKS:-}" ]; then
  SYMM_BENCH_RANKS=""
  for n in 2 4 8; do [ "$n" -le "$ngpu" ] && SYMM_BENCH_RANKS="$SYMM_BENCH_RANKS $n"; done
fi
for RANKS in $SYMM_BENCH_RANKS; do
  echo "## alloc + rendezvous, $RANKS ranks: python3 bench/compare_rendezvous.py --build $BUILD --ranks $RANKS"
  python3 "$(dirname "$0")/compare_rendezvous.py" --build "$BUILD" --ranks "$RANKS" || status=1
  echo
  # Medians of 3 interleaved runs: at a few µs runs differ by 0.1-0.2 µs.
  echo "## all-reduce, $RANKS ranks: python3 bench/compare_allreduce.py --build $BUILD --ranks $RANKS --repeat 3"
  python3 "$(dirname "$0")/compare_allreduce.py" --build "$BUILD" --ranks "$RANKS" --repeat 3 ||
    status=1
  echo
  for algo in ll ll128 one_shot two_shot; do
    echo "## all-reduce, algorithm $algo forced, CUDA graph, $RANKS ranks" | tee -a "$sweeps"
    "$BUILD/tools/symmem-run" -n "$RANKS" -- "$BUILD/tools/symmem-bench" --graph --dtype bf16 \
      --algo $algo -b 4K -e 64M -f 4 -n 20 >"$sweeps.out" || status=1
    cat "$sweeps.out"
    cat "$sweeps.out" >>"$sweeps"
    rm -f "$sweeps.out"
    echo
  done
  for coll in all_gather reduce_scatter; do
    echo "## $coll, bf16, CUDA graph, $RANKS ranks"
    "$BUILD/tools/symmem-run" -n "$RANKS" -- "$BUILD/tools/symmem-bench" --graph --dtype bf16 \
      --coll $coll -b 64K -e 256M -f 16 -n 20 || status=1
    echo
  done
done
for be in native cuda nccl nvshmem; do
  line=$("$BUILD/tools/symmem-info" | grep -E "^  $be +")
  case "$line" in
    *" available"*) ;;
    *) echo "## backend $be: skipped (${line#*$be })"; echo; continue ;;
  esac
  echo "## backend $be: alloc + rendezvous, 2 ranks"
  SYMM_BACKEND=$be "$BUILD/tools/symmem-run" -n 2 -- "$BUILD/bench/bench_rendezvous" \
    --sizes 1M,64M --iters 5 || status=1
  echo "## backend $be: bf16 all-reduce, CUDA graph, 2 ranks (NCCL beside)"
  SYMM_BACKEND=$be "$BUILD/tools/symmem-run" -n 2 -- "$BUILD/tools/symmem-bench" --graph \
    --dtype bf16 -b 4K -e 64M -f 4 -n 20 || status=1
  echo "## backend $be: peer bandwidth, 2 ranks"
  SYMM_BACKEND=$be "$BUILD/tools/symmem-run" -n 2 -- "$BUILD/bench/bench_peer_bw" || status=1
  echo
done
echo "## crossovers of the sweeps above: python3 bench/crossovers.py"
python3 "$(dirname "$0")/crossovers.py" "$sweeps" || status=1
exit $status
