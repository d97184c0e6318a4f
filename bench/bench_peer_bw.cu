/* Peer bandwidth through symmetric memory on 2+ GPUs: rank 0 reads rank 1's
 * buffer and writes into it, with an SM copy kernel (16-byte vectors) and
 * with the copy engine (cudaMemcpyAsync on the peer pointer), 1 MiB - 1 GiB.
 * Run under symmem-run -n 2; rank 0 prints
 *   size_bytes sm_read sm_write ce_read ce_write   (GB/s, 1e9 bytes/s) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    symm_result_t r_ = (call);                                                       \
    if (r_ != SYMM_SUCCESS) {                                                        \
      fprintf(stderr, "%s: %s (%s)\n", #call, symm_strerror(r_), symm_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#define CUDA(call)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                    \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Each thread moves UNROLL 16-byte vectors per step: loads first, stores
 * after, so several remote loads are in flight per thread. */
#define UNROLL 4
__global__ void copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

static float time_ms(cudaStream_t s, int iters, void *dst, const void *src, size_t bytes,
                     bool engine, int blocks) {
  cudaEvent_t a, b;
  CUDA(cudaEventCreate(&a));
  CUDA(cudaEventCreate(&b));
  for (int w = 0; w < 3 + iters; w++) {
    if (w == 3) CUDA(cudaEventRecord(a, s));
    if (engine) CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    else copy16<<<blocks, 512, 0, s>>>((uint4 *)dst, (const uint4 *)src, bytes / 16);
  }
  CUDA(cudaEventRecord(b, s));
  CUDA(cudaEventSynchronize(b));
  float ms;
  CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

int main(int argc, char **argv) {
  size_t max_bytes = (size_t)1 << 30;
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  int rank = symm_comm_rank(comm);
  if (symm_comm_size(comm) < 2 || symm_comm_device(comm) < 0) {
    fprintf(stderr, "bench_peer_bw needs >= 2 ranks on a GPU backend\n");
    return 1;
  }
  CUDA(cudaSetDevice(symm_comm_device(comm)));
  int sms = 0;
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, symm_comm_device(comm)));
  int64_t n = (int64_t)max_bytes;
  symm_tensor_t *t;
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  CHECK(symm_tensor_rendezvous(t));
  void *const *peers;
  CHECK(symm_tensor_peer_ptrs(t, &peers));
  void *local;
  CUDA(cudaMalloc(&local, max_bytes));
  CUDA(cudaMemset(local, 1, max_bytes));
  CUDA(cudaMemset(symm_tensor_data(t), 2, max_bytes));
  CUDA(cudaDeviceSynchronize());
  CHECK(symm_comm_barrier(comm));
  if (rank == 0) {
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *peer = peers[1];
    printf("# peer bandwidth rank 0 <-> rank 1 (backend %s), GB/s = 1e9 B/s, %d SMs\n",
           symm_backend_name(symm_comm_backend(comm)), sms);
    printf("# %12s %9s %9s %9s %9s\n", "size_bytes", "sm_read", "sm_write", "ce_read", "ce_write");
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
      int iters = bytes >= (256u << 20) ? 10 : 50;
      /* Blocks: enough to cover the buffer, capped at a few waves. */
      int blocks = (int)((bytes / 16 + 511) / 512);
      if (blocks > sms * 8) blocks = sms * 8;
      float r = time_ms(s, iters, local, peer, bytes, false, blocks);
      float w = time_ms(s, iters, peer, local, bytes, false, blocks);
      float cr = time_ms(s, iters, local, peer, bytes, true, 0);
      float cw = time_ms(s, iters, peer, local, bytes, true, 0);
      printf("  %12zu %9.1f %9.1f %9.1f %9.1f\n", bytes, bytes / r / 1e6, bytes / w / 1e6,
             bytes / cr / 1e6, bytes / cw / 1e6);
    }
    cudaStreamDestroy(s);
  }
  CHECK(symm_comm_barrier(comm));
  cudaFree(local);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}
