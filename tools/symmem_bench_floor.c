/* symmem-bench on the host backend: the floor its times are read against
 * (bench/floor.c's loops), measured between its own ranks just before the
 * sweep: the round trip of a cache line between ranks 0 and 1 (through a
 * symmetric tensor, so on their CPUs as bound), and the copy bandwidth of
 * a core while every rank copies at once. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "floor.h"
#include "symmem_bench.h"

#define FLOOR_ROUNDS 20000
#define FLOOR_COPY_BYTES ((size_t)64 << 20) /* each way: well above a last-level cache */

/* Why the floor is not measured here, or NULL. */
static const char *why_not(const bench_t *b) {
  if (!b->opt.floor) return "--floor 0";
  if (on_gpu(b)) return "GPU ranks";
  if (b->world_size < 2) return "one rank";
  if (b->world_size > sysconf(_SC_NPROCESSORS_ONLN)) return "more ranks than CPUs";
  return NULL;
}

void measure_floor(bench_t *b) {
  const char *why = why_not(b);
  if (why) {
    snprintf(b->floor_why, sizeof b->floor_why, "%s", why);
    return;
  }
  int64_t len = sizeof(floor_line_t);
  symm_tensor_t *t;
  void *const *ptrs;
  BENCH_CHECK(symm_tensor_alloc(b->world, &len, 1, SYMM_DTYPE_U8, &t));
  BENCH_CHECK(symm_tensor_rendezvous(t));
  BENCH_CHECK(symm_tensor_peer_ptrs(t, &ptrs));
  floor_line_t *line = ptrs[0];
  if (b->world_rank == 0) memset(line, 0, sizeof *line);
  BENCH_CHECK(symm_comm_barrier(b->world));
  double floor[2] = {0, 0}; /* round trip (rank 0), copy GB/s */
  if (b->world_rank == 0) floor[0] = floor_ping(line, FLOOR_ROUNDS);
  if (b->world_rank == 1) floor_pong(line, FLOOR_ROUNDS);
  BENCH_CHECK(symm_comm_barrier(b->world));
  floor[1] = floor_copy_gbps(FLOOR_COPY_BYTES, 3);
  if (floor[1] < 0) bench_die("out of memory for the copy of the floor (--floor 0 skips it)");
  /* Rank 0's round trip, the slowest rank's copy. */
  double least[2] = {b->world_rank ? 1e300 : floor[0], floor[1]};
  BENCH_CHECK(symm_all_reduce(b->world, least, least, 2, SYMM_DTYPE_F64, SYMM_REDUCE_MIN, NULL));
  BENCH_CHECK(symm_tensor_free(t));
  b->floor_rt_ns = least[0];
  b->floor_copy_gbps = least[1];
}

/* Small sizes as a multiple of the round trip, larger ones as the bus
 * bandwidth's fraction of the copy bandwidth (busbw counts the bytes each
 * rank moves, as a copy does). */
bool floor_small(const size_result_t *r) { return r->bytes <= FLOOR_SMALL_BYTES; }

double floor_ratio(const bench_t *b, const size_result_t *r) {
  if (b->floor_rt_ns <= 0) return -1;
  return floor_small(r) ? r->time_us * 1e3 / b->floor_rt_ns : r->busbw / b->floor_copy_gbps;
}
