/* The GPU part of the test harness: what the real-GPU lists
 * (list-gpu.h, list-gpu-coll.h) share.  Their programs are rank programs
 * (runner.c's rank mode): symmem-run starts one process per rank, each runs
 * the same tests in order on one communicator, made by the first test. */
#ifndef SYMM_GPU_HARNESS_H
#define SYMM_GPU_HARNESS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#include "harness.h"

/* A CUDA runtime call, or a launcher of gpu_kernels.h (which return a
 * cudaError_t as int), that must return cudaSuccess. */
#define ASSERT_CUDA(call)                                                     \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    cudaError_t e_ = (cudaError_t)(call);                                     \
    if (e_ != cudaSuccess) TEST_FAIL_("%s -> %s", #call, cudaGetErrorString(e_)); \
  } while (0)

typedef struct gpu_rank {
  symm_comm_t *comm;
  int rank, size, device;
  cudaStream_t stream; /* non-blocking, on the communicator's device */
} gpu_rank_t;

/* Whether this process can run the GPU tests: false, with the reason in
 * why, where the CUDA runtime sees no GPU or the build has no CUDA kernels
 * (and SYMM_COLL_KERNELS names none). */
bool gpu_usable(char *why, size_t why_len);

/* Prints "SKIP: <reason>" and returns TEST_SKIP. */
int gpu_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The rank's communicator, its GPU current and a stream on it: made by the
 * first test that asks (symm_comm_init is collective: every rank's first
 * GPU test asks), kept for the tests after it and destroyed at exit.
 * backend: SYMM_BACKEND_NATIVE, or SYMM_BACKEND_AUTO for the backend that
 * SYMM_BACKEND names (native where it is unset).  Returns 0 with *out set,
 * or TEST_SKIP after printing the reason: no GPU (gpu_usable), or fewer
 * than min_ranks ranks (the same on every rank).  A failed init fails the
 * test. */
int gpu_rank_get(symm_backend_t backend, int min_ranks, gpu_rank_t **out);

/* The number of non-zero bytes in the signal pad of t's rank `rank`, as
 * mapped here (symm_tensor_signal_pad). */
size_t gpu_pad_nonzero_bytes(symm_tensor_t *t, int rank);

/* cudaMemcpy from host memory to the device, finished: from pageable
 * memory cudaMemcpy may return once the data is staged, before the DMA
 * lands ("API synchronization behavior"), and work on a non-blocking
 * stream (the rank's) or in another process is not ordered after it.
 * Every host-to-device copy of the GPU tests goes through this. */
cudaError_t gpu_upload(void *dst, const void *src, size_t bytes);

/* Whether a test of this process made the communicator already. */
bool gpu_rank_made(void);

#endif
