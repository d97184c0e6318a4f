/* The MPI counterparts of symmem's collectives, timed the way symmem-bench
 * times them, so that bench/compare_mpi.sh can put the two side by side:
 *   -c all_reduce      MPI_Allreduce, f32 sum          (symm_all_reduce)
 *   -c all_gather      MPI_Allgather, f32              (symm_all_gather)
 *   -c reduce_scatter  MPI_Reduce_scatter_block, sum   (symm_reduce_scatter)
 *   -c broadcast       MPI_Bcast from rank 0, f32      (symm_broadcast)
 *   -c all_to_all      MPI_Alltoall, f32               (symm_all_to_all)
 * The same sweep of sizes (-b/-e/-f), and the same meaning of a size as
 * symmem-bench's (nccl-tests'): the bytes of the whole result, which the
 * gathers and scatters split over the ranks (at least one element each).
 * -w untimed calls then -n timed calls back to back, mean per call of the
 * slowest rank (bench/mpi_bench.h).  Buffers are ordinary malloc'd memory,
 * out of place (how MPI programs hold their data; MPI_Bcast works in
 * place).  One checked call per size counts wrong values.  Rank 0 prints
 * CSV, size_bytes being the whole result and count the elements per rank:
 *   size_bytes,count,mpi_time_us,wrong
 * Build and run (compare_mpi.sh does both):
 *   mpicc -O2 -o mpi_coll bench/mpi_coll.c
 *   mpirun -np 2 ./mpi_coll -c all_gather -b 8 -e 16M -f 2 -n 20 -w 5 */
#include <stdbool.h>
#include <string.h>

#include "mpi_bench.h"

/* symmem-bench's values: small integers for reductions (exact in every
 * order of summation), 97 values for data movement (a value in the wrong
 * place rarely matches). */
static float reduce_value(int rank, size_t i) {
  return (float)(((i % 17) * 7 + (size_t)rank * 13) % 17) - 8.0f;
}
static float data_value(int rank, size_t i) {
  return (float)(((i % 97) * 131 + (size_t)rank * 31 + 7) % 97) - 48.0f;
}

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALL_TO_ALL, COLLS } coll_t;
static const char *const names[COLLS] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "broadcast", "all_to_all"};

typedef struct {
  coll_t coll;
  int rank, size, per; /* per: elements per rank (the whole for all_reduce, broadcast) */
  float *send, *recv;
} call_t;

static void one_call(void *arg) {
  call_t *c = arg;
  switch (c->coll) {
  case ALL_REDUCE:
    MPI_Allreduce(c->send, c->recv, c->per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case ALL_GATHER:
    MPI_Allgather(c->send, c->per, MPI_FLOAT, c->recv, c->per, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case REDUCE_SCATTER:
    MPI_Reduce_scatter_block(c->send, c->recv, c->per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case BROADCAST: MPI_Bcast(c->recv, c->per, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
  case ALL_TO_ALL:
    MPI_Alltoall(c->send, c->per, MPI_FLOAT, c->recv, c->per, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  default: break;
  }
}

static float reduced(const call_t *c, size_t i) {
  float want = 0;
  for (int r = 0; r < c->size; r++) want += reduce_value(r, i);
  return want;
}

/* What recv[k] must hold after the call. */
static float expected(const call_t *c, size_t k) {
  size_t per = (size_t)c->per;
  switch (c->coll) {
  case ALL_REDUCE: return reduced(c, k);
  case REDUCE_SCATTER: return reduced(c, (size_t)c->rank * per + k);
  case ALL_GATHER: return data_value((int)(k / per), k % per);
  case BROADCAST: return data_value(0, k);
  default: return data_value((int)(k / per), (size_t)c->rank * per + k % per);
  }
}

/* Fills the inputs, runs one call and counts this rank's wrong values. */
static long long check_once(call_t *c) {
  size_t per = (size_t)c->per, world = (size_t)c->size;
  bool reduces = c->coll == ALL_REDUCE || c->coll == REDUCE_SCATTER;
  /* all_reduce and broadcast: per is the whole; the others: per rank. */
  bool whole = c->coll == ALL_REDUCE || c->coll == BROADCAST;
  size_t sent = whole || c->coll == ALL_GATHER ? per : per * world;
  size_t got = whole || c->coll == REDUCE_SCATTER ? per : per * world;
  for (size_t i = 0; i < sent; i++)
    c->send[i] = reduces ? reduce_value(c->rank, i) : data_value(c->rank, i);
  memset(c->recv, 0xA5, got * sizeof(float));
  if (c->coll == BROADCAST && c->rank == 0) memcpy(c->recv, c->send, per * sizeof(float));
  one_call(c);
  long long wrong = 0;
  for (size_t k = 0; k < got; k++) wrong += c->recv[k] != expected(c, k);
  return wrong;
}

int main(int argc, char **argv) {
  mpi_sweep_t o = {8, 16u << 20, 2, 20, 5, 1.0, "all_reduce"};
  if (mpi_bench_options(argc, argv, "c",
                        "mpi_coll [-c COLL] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]",
                        &o))
    return 2;
  call_t c = {.coll = COLLS};
  for (int i = 0; i < COLLS; i++)
    if (strcmp(o.coll, names[i]) == 0) c.coll = (coll_t)i;
  if (c.coll == COLLS) {
    fprintf(stderr, "mpi_coll: -c %s; it takes all_reduce, all_gather, reduce_scatter, "
                    "broadcast, all_to_all\n", o.coll);
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  size_t most = o.max_bytes / sizeof(float) + (size_t)c.size;
  c.send = malloc(most * sizeof(float));
  c.recv = malloc(most * sizeof(float));
  if (!c.send || !c.recv) MPI_Abort(MPI_COMM_WORLD, 1);
  if (c.rank == 0) printf("size_bytes,count,mpi_time_us,wrong\n");
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    size_t n = bytes / sizeof(float), world = (size_t)c.size;
    bool whole = c.coll == ALL_REDUCE || c.coll == BROADCAST;
    size_t per = whole ? n : (n / world ? n / world : 1);
    c.per = (int)per;
    double us = mpi_bench_time(&o, one_call, &c);
    long long wrong = mpi_bench_wrong(check_once(&c));
    if (c.rank == 0)
      printf("%zu,%zu,%.3f,%lld\n", (whole ? per : per * world) * sizeof(float), per, us, wrong);
    if (bytes > o.max_bytes / o.factor) break;
  }
  free(c.send);
  free(c.recv);
  MPI_Finalize();
  return 0;
}
