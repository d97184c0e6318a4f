/* Times symmetric allocation on the chosen backend, for comparison with
 * PyTorch's symm_mem.empty + rendezvous (bench/torch_rendezvous.py):
 *   init   - symm_comm_init (driver and context set-up included)
 *   first  - the first alloc + rendezvous after init (1 MiB)
 *   cold   - alloc + rendezvous of a fresh tensor (pool emptied before)
 *   pool   - alloc + rendezvous served by the pool (mappings kept)
 * Every figure is the slowest rank's, median of --iters runs.  Run under
 * symmem-run; rank 0 prints one line per size:
 *   size_bytes init_ms first_ms cold_ms pool_us
 * Usage: bench_rendezvous [--sizes 1M,64M,1G] [--iters N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_check.h"


static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static long long parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return (long long)v;
}

/* Slowest rank's value, through the store. */
static double max_over_ranks(symm_comm_t *comm, const char *tag, int iter, double v) {
  static int round;
  char key[96];
  int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  symm_store_t *st = symm_comm_store(comm);
  round++;
  snprintf(key, sizeof key, "bench/%s/%d/%d/%d", tag, iter, round, rank);
  CHECK(symm_store_set(st, key, &v, sizeof v));
  double worst = v;
  for (int r = 0; r < size; r++) {
    double o;
    size_t len;
    snprintf(key, sizeof key, "bench/%s/%d/%d/%d", tag, iter, round, r);
    CHECK(symm_store_get(st, key, &o, sizeof o, &len, -1));
    if (o > worst) worst = o;
  }
  return worst;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double alloc_rendezvous_us(symm_comm_t *comm, long long bytes, symm_tensor_t **t) {
  int64_t n = bytes;
  CHECK(symm_comm_barrier(comm));
  double t0 = now_us();
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, t));
  CHECK(symm_tensor_rendezvous(*t));
  return now_us() - t0;
}

int main(int argc, char **argv) {
  const char *sizes = "1M,64M,1G";
  int iters = 10;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--sizes 1M,64M,1G] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1 || iters > 1000) iters = 10;

  double t0 = now_us();
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  double init_local = now_us() - t0;
  symm_tensor_t *t;
  double first_local = alloc_rendezvous_us(comm, 1 << 20, &t);
  symm_tensor_free(t);
  CHECK(symm_comm_pool_trim(comm, NULL));
  double init = max_over_ranks(comm, "init", 0, init_local);
  double first = max_over_ranks(comm, "first", 0, first_local);
  int rank = symm_comm_rank(comm);
  if (rank == 0) {
    printf("# symmem alloc+rendezvous: backend %s, %d ranks, %d iterations, slowest rank, median\n",
           symm_backend_name(symm_comm_backend(comm)), symm_comm_size(comm), iters);
    printf("# %12s %10s %10s %10s %10s\n", "size_bytes", "init_ms", "first_ms", "cold_ms",
           "pool_us");
  }

  char list[256];
  snprintf(list, sizeof list, "%s", sizes);
  double *cold = calloc((size_t)iters, sizeof *cold), *pool = calloc((size_t)iters, sizeof *pool);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    long long bytes = parse_size(tok);
    for (int i = 0; i < iters; i++) {
      double c = alloc_rendezvous_us(comm, bytes, &t);
      symm_tensor_free(t); /* to the pool */
      double p = alloc_rendezvous_us(comm, bytes, &t);
      symm_tensor_free(t);
      CHECK(symm_comm_pool_trim(comm, NULL));
      cold[i] = max_over_ranks(comm, "cold", i, c);
      pool[i] = max_over_ranks(comm, "pool", i, p);
    }
    if (rank == 0)
      printf("  %12lld %10.2f %10.2f %10.3f %10.1f\n", bytes, init / 1e3, first / 1e3,
             median(cold, iters) / 1e3, median(pool, iters));
  }
  free(cold);
  free(pool);
  CHECK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}
