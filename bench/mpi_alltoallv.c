/* MPI_Alltoallv timed the way symmem-bench --coll all_to_all_v times
 * symm_all_to_all_v, so that bench/compare_mpi.sh can put the two side by
 * side: the same sweep of sizes (-b/-e/-f: the bytes of f32 each rank
 * sends), the same split (-s SKEW: tools/symmem_bench_split.h, included
 * here, gives both programs the same counts), -w untimed calls then -n
 * timed calls back to back, mean per call of the slowest rank.  Buffers
 * are ordinary malloc'd memory, out of place; one checked call per size
 * counts wrong values, with symmem-bench's values.  Rank 0 prints the
 * split as a comment, then CSV:
 *   # split: skew S; rank p gets: 20.0% 80.0%
 *   size_bytes,count,mpi_time_us,wrong
 * Build and run (compare_mpi.sh does both):
 *   mpicc -O2 -o mpi_alltoallv bench/mpi_alltoallv.c -lm
 *   mpirun -np 2 ./mpi_alltoallv -b 1K -e 16M -f 2 -n 20 -w 5 -s 4 */
#include <string.h>

#include "../tools/symmem_bench_split.h"
#include "mpi_bench.h"

/* symmem-bench's values for data movement (signed dtypes): 97 of them, so
 * that a value in the wrong place rarely matches. */
static float input_value(int rank, size_t i) {
  return (float)(((i % 97) * 131 + (size_t)rank * 31 + 7) % 97) - 48.0f;
}

typedef struct {
  int *send_counts, *send_displs, *recv_counts, *recv_displs;
  size_t *counts;
  double *shares;
} split_t;

/* This size's counts: every rank sends n elements split by the shares,
 * packed in rank order, and receives its own count from every rank. */
static void make_split(split_t *s, size_t n, int rank, int size, double skew) {
  bench_split_counts(n, size, skew, s->shares, s->counts);
  for (int p = 0; p < size; p++) {
    s->send_counts[p] = (int)s->counts[p];
    s->send_displs[p] = p ? s->send_displs[p - 1] + s->send_counts[p - 1] : 0;
    s->recv_counts[p] = (int)s->counts[rank];
    s->recv_displs[p] = p * (int)s->counts[rank];
  }
}

static long long check_once(const split_t *s, float *send, float *recv, int rank, int size,
                            size_t n) {
  for (size_t i = 0; i < n; i++) send[i] = input_value(rank, i);
  size_t mine = (size_t)s->recv_counts[0], got = mine * (size_t)size;
  memset(recv, 0xA5, got * sizeof(float));
  MPI_Alltoallv(send, s->send_counts, s->send_displs, MPI_FLOAT, recv, s->recv_counts,
                s->recv_displs, MPI_FLOAT, MPI_COMM_WORLD);
  long long wrong = 0;
  for (size_t k = 0; k < got; k++) /* rank k / mine's range for this rank */
    wrong += recv[k] != input_value((int)(k / mine), (size_t)s->send_displs[rank] + k % mine);
  return wrong;
}

typedef struct {
  split_t *s;
  float *send, *recv;
} call_t;

static void one_call(void *arg) {
  call_t *c = arg;
  MPI_Alltoallv(c->send, c->s->send_counts, c->s->send_displs, MPI_FLOAT, c->recv,
                c->s->recv_counts, c->s->recv_displs, MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  mpi_sweep_t o = {1024, 16u << 20, 2, 20, 5, 1.0, NULL};
  if (mpi_bench_options(argc, argv, "s",
                        "mpi_alltoallv [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] "
                        "[-s SKEW]",
                        &o))
    return 2;
  size_t max_bytes = o.max_bytes;
  double skew = o.skew;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  split_t s;
  s.send_counts = calloc((size_t)size, sizeof(int));
  s.send_displs = calloc((size_t)size, sizeof(int));
  s.recv_counts = calloc((size_t)size, sizeof(int));
  s.recv_displs = calloc((size_t)size, sizeof(int));
  s.counts = calloc((size_t)size, sizeof(size_t));
  s.shares = calloc((size_t)size, sizeof(double));
  /* The hottest rank receives up to size x its share of every sender's n. */
  size_t most = max_bytes / sizeof(float) * (size_t)size;
  float *send = malloc(most * sizeof(float)), *recv = malloc(most * sizeof(float));
  if (!send || !recv || !s.send_counts || !s.send_displs || !s.recv_counts || !s.recv_displs ||
      !s.counts || !s.shares)
    MPI_Abort(MPI_COMM_WORLD, 1);
  if (rank == 0) {
    double total = 0;
    bench_split_shares(size, skew, s.shares);
    for (int p = 0; p < size; p++) total += s.shares[p];
    printf("# split: skew %g; rank p gets:", skew);
    for (int p = 0; p < size; p++) printf(" %.1f%%", 100.0 * s.shares[p] / total);
    printf("\nsize_bytes,count,mpi_time_us,wrong\n");
  }
  for (size_t bytes = o.min_bytes; bytes <= max_bytes; bytes *= o.factor) {
    size_t n = bytes / sizeof(float);
    make_split(&s, n, rank, size, skew);
    call_t c = {&s, send, recv};
    double us = mpi_bench_time(&o, one_call, &c);
    long long wrong = mpi_bench_wrong(check_once(&s, send, recv, rank, size, n));
    if (rank == 0) printf("%zu,%zu,%.3f,%lld\n", n * sizeof(float), n, us, wrong);
    if (bytes > max_bytes / o.factor) break;
  }
  free(send);
  free(recv);
  free(s.send_counts);
  free(s.send_displs);
  free(s.recv_counts);
  free(s.recv_displs);
  free(s.counts);
  free(s.shares);
  MPI_Finalize();
  return 0;
}
