/* MPI_Allreduce timed the way symmem-bench times symm_all_reduce, so that
 * bench/compare_mpi.sh can put the two side by side: the same sweep of
 * sizes (-b/-e/-f, bytes of f32), -w untimed calls then -n timed calls back
 * to back, mean per call of the slowest rank.  Buffers are ordinary malloc'd
 * memory, out of place (how MPI programs hold their data); one checked
 * call per size counts wrong values.  Rank 0 prints CSV:
 *   size_bytes,count,mpi_time_us,wrong
 * Build and run (compare_mpi.sh does both):
 *   mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce -b 8 -e 16M -f 2 -n 20 -w 5 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t parse_size(const char *text) {
  char *end;
  double v = strtod(text, &end);
  size_t mult = 1;
  switch (*end) {
  case 'k': case 'K': mult = (size_t)1 << 10; break;
  case 'm': case 'M': mult = (size_t)1 << 20; break;
  case 'g': case 'G': mult = (size_t)1 << 30; break;
  default: break;
  }
  return (size_t)(v * (double)mult);
}

/* The values symmem-bench uses for reductions: small integers, exact in
 * every order of summation. */
static float input_value(int rank, size_t i) {
  return (float)(((i % 17) * 7 + (size_t)rank * 13) % 17) - 8.0f;
}

int main(int argc, char **argv) {
  size_t min_bytes = 8, max_bytes = 16u << 20, factor = 2;
  int iters = 20, warmup = 5, c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
    switch (c) {
    case 'b': min_bytes = parse_size(optarg); break;
    case 'e': max_bytes = parse_size(optarg); break;
    case 'f': factor = (size_t)atol(optarg); break;
    case 'n': iters = atoi(optarg); break;
    case 'w': warmup = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: mpi_allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n");
      return 2;
    }
  }
  if (min_bytes < 4 || min_bytes > max_bytes || factor < 2 || iters < 1 || warmup < 0) {
    fprintf(stderr, "mpi_allreduce: bad sizes or counts\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t most = max_bytes / sizeof(float);
  float *send = malloc(most * sizeof(float)), *recv = malloc(most * sizeof(float));
  if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
  if (rank == 0) printf("size_bytes,count,mpi_time_us,wrong\n");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    for (int i = 0; i < warmup; i++)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = (MPI_Wtime() - t0) * 1e6 / iters, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    for (int i = 0; i < count; i++) send[i] = input_value(rank, (size_t)i);
    memset(recv, 0xA5, (size_t)count * sizeof(float));
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0, all_wrong = 0;
    for (int i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < size; r++) want += input_value(r, (size_t)i);
      wrong += recv[i] != want;
    }
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%zu,%d,%.3f,%lld\n", (size_t)count * sizeof(float), count, slowest,
                          all_wrong);
    if (bytes > max_bytes / factor) break;
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
