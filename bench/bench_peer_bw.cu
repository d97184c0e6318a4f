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

/* Each thread moves U 16-byte vectors per step: all loads first, then the
 * stores, so that U remote loads are in flight per thread.  Streaming cache
 * hints keep the copied data from evicting anything (it is touched once). */
template <int U>
__global__ void copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; u++) __stcs(dst + i + u * stride, v[u]);
  }
  for (; i < n; i += stride) __stcs(dst + i, __ldcs(src + i));
}

typedef struct {
  int unroll, threads, blocks_per_sm;
} copy_cfg_t;

static void launch_copy(const copy_cfg_t *c, int sms, cudaStream_t s, void *dst, const void *src,
                        size_t bytes) {
  size_t n = bytes / 16;
  /* No more blocks than there is work for, at most blocks_per_sm waves. */
  size_t need = (n + (size_t)c->threads * c->unroll - 1) / ((size_t)c->threads * c->unroll);
  int blocks = (int)(need < (size_t)sms * c->blocks_per_sm ? need : (size_t)sms * c->blocks_per_sm);
  if (blocks < 1) blocks = 1;
  if (c->unroll == 8)
    copy16<8><<<blocks, c->threads, 0, s>>>((uint4 *)dst, (const uint4 *)src, n);
  else if (c->unroll == 2)
    copy16<2><<<blocks, c->threads, 0, s>>>((uint4 *)dst, (const uint4 *)src, n);
  else
    copy16<4><<<blocks, c->threads, 0, s>>>((uint4 *)dst, (const uint4 *)src, n);
}

static float time_ms(cudaStream_t s, int iters, void *dst, const void *src, size_t bytes,
                     const copy_cfg_t *cfg, int sms) {
  cudaEvent_t a, b;
  CUDA(cudaEventCreate(&a));
  CUDA(cudaEventCreate(&b));
  for (int w = 0; w < 3 + iters; w++) {
    if (w == 3) CUDA(cudaEventRecord(a, s));
    if (!cfg) CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    else launch_copy(cfg, sms, s, dst, src, bytes);
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
    /* Pick the SM copy's shape per direction on 256 MiB, then use it for
     * every size (the sweep is printed so the choice can be checked). */
    static const int unrolls[] = {2, 4, 8}, threads[] = {256, 512, 1024}, waves[] = {1, 2, 4, 8};
    copy_cfg_t best[2] = {{4, 512, 8}, {4, 512, 8}};
    float best_ms[2] = {1e30f, 1e30f};
    size_t probe = max_bytes < (256u << 20) ? max_bytes : (256u << 20);
    for (int dir = 0; dir < 2; dir++)
      for (int u = 0; u < 3; u++)
        for (int th = 0; th < 3; th++)
          for (int w = 0; w < 4; w++) {
            if (threads[th] * waves[w] > 2048) continue; /* one SM's thread limit */
            copy_cfg_t c = {unrolls[u], threads[th], waves[w]};
            float ms = dir == 0 ? time_ms(s, 5, local, peer, probe, &c, sms)
                                : time_ms(s, 5, peer, local, probe, &c, sms);
            printf("# sweep %s unroll %d threads %4d blocks/SM %d: %6.1f GB/s\n",
                   dir ? "write" : "read", c.unroll, c.threads, c.blocks_per_sm, probe / ms / 1e6);
            if (ms < best_ms[dir]) {
              best_ms[dir] = ms;
              best[dir] = c;
            }
          }
    for (int dir = 0; dir < 2; dir++)
      printf("# sm_%s uses unroll %d, %d threads, %d blocks/SM\n", dir ? "write" : "read",
             best[dir].unroll, best[dir].threads, best[dir].blocks_per_sm);
    printf("# %12s %9s %9s %9s %9s %11s\n", "size_bytes", "sm_read", "sm_write", "ce_read",
           "ce_write", "best_sm/ce");
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
      int iters = bytes >= (256u << 20) ? 10 : 50;
      float r = time_ms(s, iters, local, peer, bytes, &best[0], sms);
      float w = time_ms(s, iters, peer, local, bytes, &best[1], sms);
      float cr = time_ms(s, iters, local, peer, bytes, NULL, sms);
      float cw = time_ms(s, iters, peer, local, bytes, NULL, sms);
      float sm_best = r < w ? r : w, ce_best = cr < cw ? cr : cw;
      printf("  %12zu %9.1f %9.1f %9.1f %9.1f %11.3f\n", bytes, bytes / r / 1e6, bytes / w / 1e6,
             bytes / cr / 1e6, bytes / cw / 1e6, ce_best / sm_best);
    }
    cudaStreamDestroy(s);
  }
  CHECK(symm_comm_barrier(comm));
  cudaFree(local);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}
