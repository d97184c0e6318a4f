/* What bench/mpi_coll.c and bench/mpi_alltoallv.c share: the command line
 * of a sweep (symmem-bench's spelling) and the timing of one size, done the
 * way symmem-bench times its calls (-w untimed calls, a barrier, -n timed
 * calls back to back, the mean per call of the slowest rank, on rank 0).
 * Header-only: each program is one file for mpicc. */
#ifndef SYMM_BENCH_MPI_BENCH_H
#define SYMM_BENCH_MPI_BENCH_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  size_t min_bytes, max_bytes, factor;
  int iters, warmup;
  double skew;      /* -s, where the program takes it */
  const char *coll; /* -c, where the program takes it */
} mpi_sweep_t;

static size_t mpi_bench_size(const char *text) {
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

/* Parses -b -e -f -n -w, and -s / -c where `extra` names them ("s", "c");
 * returns 0, or 2 after printing `usage` on a bad line.  Sizes are of f32
 * and must fit MPI's int counts. */
static int mpi_bench_options(int argc, char **argv, const char *extra, const char *usage,
                             mpi_sweep_t *o) {
  int c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:s:c:")) != -1) {
    if ((c == 's' || c == 'c') && !strchr(extra, c)) c = '?';
    switch (c) {
    case 'b': o->min_bytes = mpi_bench_size(optarg); break;
    case 'e': o->max_bytes = mpi_bench_size(optarg); break;
    case 'f': o->factor = (size_t)atol(optarg); break;
    case 'n': o->iters = atoi(optarg); break;
    case 'w': o->warmup = atoi(optarg); break;
    case 's': o->skew = atof(optarg); break;
    case 'c': o->coll = optarg; break;
    default: fprintf(stderr, "usage: %s\n", usage); return 2;
    }
  }
  if (o->min_bytes < 4 || o->min_bytes > o->max_bytes || o->max_bytes / 4 > 0x7fffffff ||
      o->factor < 2 || o->iters < 1 || o->warmup < 0 || !(o->skew >= 1.0)) {
    fprintf(stderr, "bad sizes, counts or skew; usage: %s\n", usage);
    return 2;
  }
  return 0;
}

/* Times o->iters calls of call(ctx) after o->warmup untimed ones: the mean
 * per call of the slowest rank, in microseconds, on rank 0 (0 elsewhere). */
static double mpi_bench_time(const mpi_sweep_t *o, void (*call)(void *), void *ctx) {
  for (int i = 0; i < o->warmup; i++) call(ctx);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < o->iters; i++) call(ctx);
  double mine = (MPI_Wtime() - t0) * 1e6 / o->iters, slowest = 0;
  MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return slowest;
}

/* The sum over the ranks of this rank's wrong values, on rank 0. */
static long long mpi_bench_wrong(long long mine) {
  long long all = 0;
  MPI_Reduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  return all;
}

#endif
