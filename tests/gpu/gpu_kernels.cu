// Kernels of the GPU tests: plain grid-stride loops; loads and stores go
// through whatever pointer they are given, local or a peer's mapping.
#include <cuda_runtime.h>

#include "gpu_kernels.h"
#include "symmem_device.cuh"

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return b > 4096 ? 4096u : (b == 0 ? 1u : (unsigned)b);
}

__global__ void write_pattern(float *dst, size_t n, int tag) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = GPU_PATTERN(tag, i);
}

__global__ void fill(float *dst, size_t n, float value) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = value;
}

__global__ void count_mismatch(const float *src, size_t n, int tag, unsigned long long *bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    if (src[i] != GPU_PATTERN(tag, i)) local++;
  if (local) atomicAdd(bad, local);
}

__global__ void sum_peers(float *const *ptrs, int nptrs, size_t n, float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < nptrs; r++) s += ptrs[r][i];
    out[i] = s;
  }
}

__global__ void check_contiguous(const float *base, int world, int64_t stride, size_t n,
                                 unsigned long long *bad) {
  unsigned long long local = 0;
  for (int r = 0; r < world; r++)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
      if (base[(size_t)r * (size_t)stride + i] != (float)(r + 1)) local++;
  if (local) atomicAdd(bad, local);
}

/* Same result in every thread: symm_dev_barrier_block (modes 0 and 2) or
 * thread 0's symm_dev_barrier (mode 1). */
__device__ int ring_barrier(const gpu_ring_t &a, unsigned channel, symm_dev_error_t *err) {
  if (a.mode != 1)
    return symm_dev_barrier_block(a.pads, a.rank, a.world, channel, a.timeout_ns, err);
  __shared__ int res;
  __syncthreads();
  if (threadIdx.x == 0) res = symm_dev_barrier(a.pads, a.rank, a.world, channel, a.timeout_ns, err);
  __syncthreads();
  int r = res;
  __syncthreads();
  return r;
}

__global__ void barrier_ring(gpu_ring_t a, symm_dev_error_t *err, unsigned long long *bad) {
  unsigned long long local = 0;
  for (int round = 0; round < a.rounds; round++) {
    for (size_t i = threadIdx.x; i < a.n; i += blockDim.x)
      a.right_data[i] = (float)(a.rank * 1000 + round);
    if (ring_barrier(a, 0, err) != SYMM_DEV_SUCCESS) break;
    for (size_t i = threadIdx.x; i < a.n; i += blockDim.x)
      local += a.my_data[i] != (float)(a.left * 1000 + round);
    /* Our buffer is read before the left neighbour writes it again. */
    if (ring_barrier(a, 1, err) != SYMM_DEV_SUCCESS) break;
  }
  if (local) atomicAdd(bad, local);
}

}  // namespace

extern "C" int gpu_write_pattern(float *dst, size_t n, int tag) {
  write_pattern<<<blocks_for(n), kThreads>>>(dst, n, tag);
  return (int)cudaGetLastError();
}

extern "C" int gpu_fill(float *dst, size_t n, float value) {
  fill<<<blocks_for(n), kThreads>>>(dst, n, value);
  return (int)cudaGetLastError();
}

extern "C" int gpu_count_pattern_mismatch(const float *src, size_t n, int tag,
                                          unsigned long long *bad) {
  count_mismatch<<<blocks_for(n), kThreads>>>(src, n, tag, bad);
  return (int)cudaGetLastError();
}

extern "C" int gpu_sum_peers(float *const *ptrs, int nptrs, size_t n, float *out) {
  sum_peers<<<blocks_for(n), kThreads>>>(ptrs, nptrs, n, out);
  return (int)cudaGetLastError();
}

extern "C" int gpu_check_contiguous(const float *base, int world, int64_t stride, size_t n,
                                    unsigned long long *bad) {
  check_contiguous<<<blocks_for(n), kThreads>>>(base, world, stride, n, bad);
  return (int)cudaGetLastError();
}

extern "C" int gpu_barrier_ring(const gpu_ring_t *ring, void *err, unsigned long long *bad) {
  /* Mode 2: a 2-D block of 2 threads, fewer than the peers from 3 ranks. */
  if (ring->mode == 2)
    barrier_ring<<<1, dim3(1, 2)>>>(*ring, (symm_dev_error_t *)err, bad);
  else
    barrier_ring<<<1, 512>>>(*ring, (symm_dev_error_t *)err, bad);
  return (int)cudaGetLastError();
}
