#include "gpu_harness.h"

#include <stdarg.h>

static gpu_rank_t the_rank;
static bool made;

bool gpu_usable(char *why, size_t why_len) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    snprintf(why, why_len, "no GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return false;
  }
  if (ndev < 1) {
    snprintf(why, why_len, "no GPU: the CUDA runtime sees no device");
    return false;
  }
#ifndef SYMM_HAVE_KERNELS
  if (!getenv("SYMM_COLL_KERNELS")) {
    snprintf(why, why_len,
             "no CUDA kernels in this build (configured without nvcc) and no SYMM_COLL_KERNELS");
    return false;
  }
#endif
  return true;
}

int gpu_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("SKIP: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  return TEST_SKIP;
}

bool gpu_rank_made(void) { return made; }

static void gpu_rank_destroy(void) {
  cudaStreamDestroy(the_rank.stream);
  symm_comm_destroy(the_rank.comm);
}

int gpu_rank_get(symm_backend_t backend, int min_ranks, gpu_rank_t **out) {
  if (!made) {
    char why[512];
    if (!gpu_usable(why, sizeof why)) return gpu_skip("%s", why);
    symm_config_t cfg = SYMM_CONFIG_INIT;
    const char *named = getenv("SYMM_BACKEND");
    cfg.backend = backend != SYMM_BACKEND_AUTO || !named || !*named ? SYMM_BACKEND_NATIVE
                                                                    : SYMM_BACKEND_AUTO;
    ASSERT_OK(symm_comm_init(&cfg, &the_rank.comm));
    made = true;
    the_rank.rank = symm_comm_rank(the_rank.comm);
    the_rank.size = symm_comm_size(the_rank.comm);
    the_rank.device = symm_comm_device(the_rank.comm);
    /* Applications select the communicator's GPU for their own runtime
     * calls; init already left its primary context current. */
    ASSERT_CUDA(cudaSetDevice(the_rank.device));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&the_rank.stream, cudaStreamNonBlocking));
    atexit(gpu_rank_destroy);
    if (the_rank.rank == 0)
      printf("# %d ranks, backend %s\n", the_rank.size,
             symm_backend_name(symm_comm_backend(the_rank.comm)));
  }
  if (the_rank.size < min_ranks)
    return gpu_skip("needs %d ranks or more (symmem-run -n %d), this job has %d", min_ranks,
                    min_ranks, the_rank.size);
  *out = &the_rank;
  return 0;
}

size_t gpu_pad_nonzero_bytes(symm_tensor_t *t, int rank) {
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  size_t n = symm_signal_pad_bytes(), nonzero = 0;
  unsigned char *h = malloc(n);
  ASSERT(h != NULL);
  ASSERT_CUDA(cudaMemcpy(h, pad, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) nonzero += h[i] != 0;
  free(h);
  return nonzero;
}

cudaError_t gpu_upload(void *dst, const void *src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}
