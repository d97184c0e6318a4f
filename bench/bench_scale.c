/* How the start of a job grows with its ranks (bench/scale.sh runs it at
 * 64, 128, 256 ranks under symmem-run).  Each rank times, on the host's
 * monotonic clock (one clock for every process of a host):
 *   start      - main() entered (exec and the dynamic loader done)
 *   init       - symm_comm_init returned
 *   rendezvous - alloc + rendezvous of BYTES per rank (8 MiB by default),
 *                then a write of the right neighbour's buffer through its
 *                remote view (the peer the job uses)
 *   barrier    - one symm_comm_barrier
 *   allreduce  - the first symm_all_reduce of 8 doubles (the scratch's
 *                allocation and rendezvous included)
 * Rank 0 prints one line, the phases as the slowest rank saw them:
 *   ranks spread_ms init_ms rendezvous_ms barrier_ms allreduce_ms
 *         store_msgs/ag store_bytes/ag init_store_msgs
 * spread: the last rank's start after the first's; init: the last rank's
 * init done after the first rank's start (the launch included); the others
 * each from a barrier before them.  The store columns come from the
 * store's own counters (symm_store_stats): the requests and bytes that
 * reach it per bootstrap all-gather (ROUNDS barriers, averaged), and the
 * requests of the whole of init.
 * Usage: bench_scale [--bytes N] [--rounds N] [--header] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_check.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Bytes of a STATS request (a header) and of its reply (header, status,
 * lost rank, four counters), on the store's wire (store_proto.h). */
#define SCALE_STATS_REQUEST 16
#define SCALE_STATS_REPLY (16 + 8 + 4 * 8)

/* The phases' end times and lengths, reduced over the ranks. */
enum { T_START, T_INIT, T_RDV, T_BARRIER, T_ALLREDUCE, T_COUNT };

/* Writes the right neighbour's buffer through its remote view: a peer
 * this rank uses, as a program would. */
static void touch_right(symm_tensor_t *t, int rank, int size) {
  symm_view_t dst;
  CHECK(symm_tensor_remote_view(t, (rank + 1) % size, &dst));
  memset(dst.data, rank & 0xff, symm_tensor_nbytes(t));
}

int main(int argc, char **argv) {
  const double t_start = now_ms();
  long long bytes = 8ll << 20;
  int rounds = 10, header = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--header")) header = 1;
    else {
      fprintf(stderr, "usage: %s [--bytes N] [--rounds N] [--header]\n", argv[0]);
      return 2;
    }
  }
  if (bytes < 8 || rounds < 1) {
    fprintf(stderr, "bench_scale: --bytes >= 8 and --rounds >= 1\n");
    return 2;
  }
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  const double t_init = now_ms();
  symm_store_t *store = symm_comm_store(comm);
  symm_store_stats_t after_init, before, after;
  /* Rank 0 reads the counters once every rank is through init. */
  CHECK(symm_comm_barrier(comm));
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (rank == 0) CHECK(symm_store_stats(store, &after_init));

  double len[T_COUNT] = {0}, t0;
  int64_t n = bytes / 8;
  symm_tensor_t *t;
  CHECK(symm_comm_barrier(comm));
  t0 = now_ms();
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U64, &t));
  CHECK(symm_tensor_rendezvous(t));
  touch_right(t, rank, size);
  len[T_RDV] = now_ms() - t0;

  CHECK(symm_comm_barrier(comm));
  t0 = now_ms();
  CHECK(symm_comm_barrier(comm));
  len[T_BARRIER] = now_ms() - t0;

  double in[8] = {0}, out[8];
  CHECK(symm_comm_barrier(comm));
  t0 = now_ms();
  CHECK(symm_all_reduce(comm, in, out, 8, SYMM_DTYPE_F64, SYMM_REDUCE_SUM, NULL));
  len[T_ALLREDUCE] = now_ms() - t0;

  /* Store traffic of bootstrap rounds alone: barriers, nothing else. */
  CHECK(symm_comm_barrier(comm));
  if (rank == 0) CHECK(symm_store_stats(store, &before));
  for (int i = 0; i < rounds; i++) CHECK(symm_comm_barrier(comm));
  if (rank == 0) CHECK(symm_store_stats(store, &after));

  double maxes[T_COUNT], starts[2] = {-t_start, t_start}, firsts[2];
  len[T_START] = t_start;
  len[T_INIT] = t_init;
  CHECK(symm_all_reduce(comm, len, maxes, T_COUNT, SYMM_DTYPE_F64, SYMM_REDUCE_MAX, NULL));
  CHECK(symm_all_reduce(comm, starts, firsts, 2, SYMM_DTYPE_F64, SYMM_REDUCE_MAX, NULL));
  const double first_start = -firsts[0], last_start = firsts[1];
  if (rank == 0) {
    /* Each stats request counts itself, and the first one's reply goes
     * out after it was read: neither belongs to the rounds. */
    const double queries = SCALE_STATS_REQUEST + SCALE_STATS_REPLY;
    const double msgs = (double)(after.requests - before.requests - 1) / rounds;
    const double rbytes = ((double)(after.request_bytes + after.reply_bytes - before.request_bytes -
                                    before.reply_bytes) - queries) / rounds;
    if (header)
      printf("%5s %9s %9s %13s %10s %12s %13s %14s %15s\n", "ranks", "spread_ms", "init_ms",
             "rendezvous_ms", "barrier_ms", "allreduce_ms", "store_msgs/ag", "store_bytes/ag",
             "init_store_msgs");
    printf("%5d %9.1f %9.1f %13.1f %10.2f %12.2f %13.1f %14.0f %15llu\n", size,
           last_start - first_start, maxes[T_INIT] - first_start, maxes[T_RDV], maxes[T_BARRIER],
           maxes[T_ALLREDUCE], msgs, rbytes, (unsigned long long)after_init.requests);
    fflush(stdout);
  }
  CHECK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}
