/* Kernels of the GPU tests, callable from C.  Each launcher runs on the
 * legacy default stream and returns the cudaError_t of the launch. */
#ifndef SYMM_GPU_KERNELS_H
#define SYMM_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Value written at index i by a rank tagged `tag`: exact in float. */
#define GPU_PATTERN(tag, i) ((float)((tag) * 1000 + (int)((i) % 1000)))

/* dst[i] = GPU_PATTERN(tag, i) for i < n (dst may be a peer's memory). */
int gpu_write_pattern(float *dst, size_t n, int tag);
/* dst[i] = value. */
int gpu_fill(float *dst, size_t n, float value);
/* *bad += number of i with src[i] != GPU_PATTERN(tag, i); *bad is device
 * memory the caller zeroed. */
int gpu_count_pattern_mismatch(const float *src, size_t n, int tag, unsigned long long *bad);
/* out[i] = sum over r < nptrs of ptrs[r][i]; ptrs is a device array. */
int gpu_sum_peers(float *const *ptrs, int nptrs, size_t n, float *out);
/* For a contiguous view: counts elements (r, i) with
 * base[r * stride + i] != r + 1, r < world, i < n. */
int gpu_check_contiguous(const float *base, int world, int64_t stride, size_t n,
                         unsigned long long *bad);

/* The public device-side barriers of symmem_device.cuh in a user kernel:
 * one block runs `rounds` rounds of: write rank * 1000 + round into the
 * right neighbour's buffer, barrier, count elements of our own buffer that
 * are not left * 1000 + round into *bad, barrier.  mode 0:
 * symm_dev_barrier_block on channels 0 and 1; mode 1: thread 0 calls
 * symm_dev_barrier between __syncthreads; mode 2: as mode 0 in a 2-D
 * block of 2 threads (fewer threads than peers from 3 ranks on).  pads[r]: rank r's signal pad as
 * mapped here (world <= GPU_MAX_RANKS).  *err (device memory, zeroed by the
 * caller) is the symm_dev_error_t the barriers report to; *bad is device
 * memory the caller zeroed. */
#define GPU_MAX_RANKS 8
typedef struct gpu_ring {
  float *right_data, *my_data;
  uint32_t *pads[GPU_MAX_RANKS];
  int rank, world, left, rounds, mode;
  size_t n;
  uint64_t timeout_ns;
} gpu_ring_t;
int gpu_barrier_ring(const gpu_ring_t *ring, void *err, unsigned long long *bad);

#ifdef __cplusplus
}
#endif
#endif
