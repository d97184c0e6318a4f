/* symmem-bench's ground floor: dying with one message, the benchmark's
 * buffers, CPU memory on the host backend and this rank's GPU otherwise,
 * and the store keys of a group.
 * The rest of the tool calls these; these call nothing of the rest. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "symmem_bench.h"

static int bench_rank = -1; /* for messages */

void bench_set_rank(int rank) { bench_rank = rank; }

void bench_die(const char *fmt, ...) {
  /* One write, so that the lines of ranks failing together do not mix. */
  char msg[2048];
  int n = snprintf(msg, sizeof msg, "symmem-bench: rank %d: ", bench_rank);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
  va_end(ap);
  strcat(msg, "\n");
  fflush(stdout);
  fputs(msg, stderr);
  exit(BENCH_EXIT_FAIL);
}

/* ---- memory: CPU for the host backend, this rank's GPU otherwise */

void *mem_alloc(const bench_t *b, size_t bytes) {
  void *p = NULL;
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
#endif
  p = malloc(bytes);
  if (!p) bench_die("out of memory allocating %zu bytes", bytes);
  return p;
}

void mem_free(const bench_t *b, void *p) {
  if (!p) return;
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    cudaFree(p);
    return;
  }
#endif
  free(p);
}

/* Waits for this rank's queued work and reports device-side errors. */
void bench_sync(bench_t *b) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) BENCH_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)b->stream));
#endif
  BENCH_CHECK(symm_comm_check_async_error(b->comm));
}

void mem_put(bench_t *b, void *dst, const void *host, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
                                     (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memcpy(dst, host, bytes);
}

void mem_get(bench_t *b, void *host, const void *src, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost,
                                     (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memcpy(host, src, bytes);
}

void mem_poison(bench_t *b, void *dst, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemsetAsync(dst, BENCH_POISON, bytes, (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memset(dst, BENCH_POISON, bytes);
}


/* ---- the store: keys of this rank's group (groups share the world's store) */

void bench_key(const bench_t *b, char *key, size_t len, const char *fmt, ...) {
  int n = snprintf(key, len, "bench/g%d/", b->group);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < len) vsnprintf(key + n, len - (size_t)n, fmt, ap);
  va_end(ap);
}
