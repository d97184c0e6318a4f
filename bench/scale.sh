#!/bin/sh
# How a job's start grows with its ranks on the host backend: symmem-run
# starts bench_scale (bench/bench_scale.c) at each rank count, oversubscribed
# where the ranks outnumber the CPUs, and rank 0 prints one row:
#
#   bootstrap ranks spread_ms init_ms rendezvous_ms barrier_ms allreduce_ms
#             store_msgs/ag store_bytes/ag init_store_msgs
#
# spread: the last rank's start after the first's (the launch); init: the
# last rank's symm_comm_init done after the first rank's start; rendezvous:
# alloc + rendezvous of BYTES per rank and a write of the right neighbour's
# buffer through its view; barrier: one symm_comm_barrier; allreduce: the
# first symm_all_reduce of 8 doubles (the scratch's allocation and
# rendezvous included); each the slowest rank's.  The store columns are the
# store's own counters (symm_store_stats): requests and bytes (both ways)
# per bootstrap all-gather, averaged over ROUNDS barriers, and the requests
# of init.  Each rank count runs once per bootstrap of BOOTSTRAPS: shm (the
# default on one host: rounds in shared memory, none through the store)
# and store (SYMM_BOOTSTRAP_SHM=0: every round through the store, to count
# its traffic).
#
#   bench/scale.sh [BUILD_DIR]
#   environment: RANKS ("64 128 256"), BOOTSTRAPS ("shm store"),
#                BYTES (8388608), ROUNDS (10), MAP (on_use | at_rendezvous:
#                SYMM_MAP_PEERS), TIMEOUT_S (300, per run)
#
# Times on a shared machine move with its load: run it when the machine is
# quiet, and compare rows of one run.
set -u
BUILD=${1:-build}
RANKS=${RANKS:-64 128 256}
BOOTSTRAPS=${BOOTSTRAPS:-shm store}
BYTES=${BYTES:-8388608}
ROUNDS=${ROUNDS:-10}
MAP=${MAP:-on_use}
TIMEOUT_S=${TIMEOUT_S:-300}

run=$BUILD/tools/symmem-run
bench=$BUILD/bench/bench_scale
for f in "$run" "$bench"; do
  if [ ! -x "$f" ]; then
    echo "scale: $f not found; build first (cmake --build $BUILD --target symmem-run bench_scale)" >&2
    exit 2
  fi
done

echo "# symmem start-up by rank count: host backend, $(nproc) CPUs, $BYTES bytes per rank," \
  "SYMM_MAP_PEERS=$MAP, slowest rank"
printf '%-9s ' bootstrap
"$run" -n 1 -- "$bench" --header --bytes "$BYTES" --rounds 1 | head -1
status=0
for n in $RANKS; do
  for b in $BOOTSTRAPS; do
    case "$b" in
      shm) shm=1 ;;
      store) shm=0 ;;
      *) echo "scale: BOOTSTRAPS takes shm and store, not $b" >&2; exit 2 ;;
    esac
    row=$(SYMM_BACKEND=host SYMM_BOOTSTRAP_SHM=$shm SYMM_MAP_PEERS=$MAP \
      "$run" -n "$n" --timeout "$TIMEOUT_S" -- "$bench" --bytes "$BYTES" --rounds "$ROUNDS")
    rc=$?
    if [ $rc -ne 0 ] || [ -z "$row" ]; then
      echo "scale: $n ranks over $b failed (exit $rc)" >&2
      status=1
      continue
    fi
    printf '%-9s %s\n' "$b" "$row"
  done
done
exit $status
