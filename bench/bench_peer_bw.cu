/* Peer bandwidth through symmetric memory on 2+ GPUs: rank 0 reads rank 1's
 * buffer and writes into it, with an SM copy kernel (16-byte vectors) and
 * with the copy engine (cudaMemcpyAsync on the peer pointer), 1 MiB - 1 GiB.
 * Run under symmem-run -n 2; rank 0 prints
 *   size_bytes sm_read sm_write ce_read ce_write   (GB/s, 1e9 bytes/s)
 * and then the write bandwidth of the copy engine and the SM copy sharing
 * one write (the copy engine's share from 0 to 100%), and the copy engine's
 * cost per operation when a write is cut into chunks, each followed by a
 * 4-byte flag write (cuStreamWriteValue32), as a copy-engine pipeline of a
 * collective would be. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_check.h"


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

/* The same copy through the Hopper bulk-copy engine (TMA): one thread per
 * block streams CHUNK-byte pieces peer -> shared memory (completion on an
 * mbarrier) -> destination, STAGES pieces in flight, so that few threads
 * keep many bytes in flight over NVLink. */
#define TMA_STAGES 4
static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void tma_load(void *smem, const void *gmem, uint32_t bytes,
                                                uint64_t *bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
static __device__ __forceinline__ void tma_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
static __device__ __forceinline__ void tma_store(void *gmem, const void *smem, uint32_t bytes) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem),
               "r"(smem_u32(smem)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__global__ void copy_tma(char *__restrict__ dst, const char *__restrict__ src, size_t bytes,
                         uint32_t chunk) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) uint64_t bars[TMA_STAGES];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < TMA_STAGES; i++)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[i])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  size_t nchunks = (bytes + chunk - 1) / chunk;
  /* This block's pieces: blockIdx.x, + gridDim.x, ... ; k counts them. */
  size_t mine = nchunks > blockIdx.x ? (nchunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto piece = [&](size_t k, size_t *off) {
    *off = (blockIdx.x + k * gridDim.x) * (size_t)chunk;
    size_t left = bytes - *off;
    return (uint32_t)(left < chunk ? left : chunk);
  };
  for (size_t k = 0; k < mine && k < TMA_STAGES; k++) {
    size_t off;
    uint32_t n = piece(k, &off);
    tma_load(buf + (k % TMA_STAGES) * chunk, src + off, n, &bars[k % TMA_STAGES]);
  }
  for (size_t k = 0; k < mine; k++) {
    int st = (int)(k % TMA_STAGES);
    size_t off;
    uint32_t n = piece(k, &off);
    tma_wait(&bars[st], (uint32_t)((k / TMA_STAGES) & 1));
    tma_store(dst + off, buf + st * chunk, n);
    /* The previous store has read its buffer: refill that one. */
    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    if (k >= 1 && k - 1 + TMA_STAGES < mine) {
      size_t kk = k - 1 + TMA_STAGES, off2;
      uint32_t n2 = piece(kk, &off2);
      tma_load(buf + (kk % TMA_STAGES) * chunk, src + off2, n2, &bars[kk % TMA_STAGES]);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* unroll 0 selects the TMA copy; threads is then the piece size in KiB. */
typedef struct {
  int unroll, threads, blocks_per_sm;
} copy_cfg_t;

static void launch_copy(const copy_cfg_t *c, int sms, cudaStream_t s, void *dst, const void *src,
                        size_t bytes) {
  if (c->unroll == 0) {
    uint32_t chunk = (uint32_t)c->threads << 10;
    size_t pieces = (bytes + chunk - 1) / chunk;
    int blocks = (int)(pieces < (size_t)sms * c->blocks_per_sm ? pieces : (size_t)sms * c->blocks_per_sm);
    size_t smem = (size_t)chunk * TMA_STAGES;
    static size_t smem_set;
    if (smem > smem_set) {
      CUDA(cudaFuncSetAttribute(copy_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      smem_set = smem;
    }
    copy_tma<<<blocks, 32, smem, s>>>((char *)dst, (const char *)src, bytes, chunk);
    return;
  }
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

__global__ void count_ne(const uint4 *p, size_t n, uint32_t word, unsigned long long *bad) {
  unsigned long long mine = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = p[i];
    mine += (v.x != word) + (v.y != word) + (v.z != word) + (v.w != word);
  }
  if (mine) atomicAdd(bad, mine);
}

/* Copies src -> dst with cfg after poisoning dst, and counts 4-byte words
 * of dst that differ from `word` (what src holds). */
static unsigned long long check_copy(cudaStream_t s, const copy_cfg_t *cfg, int sms, void *dst,
                                     const void *src, size_t bytes, uint32_t word) {
  unsigned long long *bad, host = 0;
  CUDA(cudaMalloc(&bad, sizeof *bad));
  CUDA(cudaMemsetAsync(bad, 0, sizeof *bad, s));
  CUDA(cudaMemsetAsync(dst, 0x5a, bytes, s));
  launch_copy(cfg, sms, s, dst, src, bytes);
  count_ne<<<sms * 4, 512, 0, s>>>((const uint4 *)dst, bytes / 16, word, bad);
  CUDA(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  cudaFree(bad);
  return host;
}

/* Records `b` on s after the timed work (started at event `a`), waits, and
 * returns ms per iteration; destroys both events. */
static float ms_per_iter(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, int iters) {
  CUDA(cudaEventRecord(b, s));
  CUDA(cudaEventSynchronize(b));
  float ms;
  CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
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
  return ms_per_iter(s, a, b, iters);
}

/* Writes `bytes` into the peer with the copy engine (the first `ce_share`
 * of it, on stream ce) and the SM copy (the rest, on stream s) at once;
 * returns ms per write, both streams done. */
static float time_split_ms(cudaStream_t s, cudaStream_t ce, int iters, void *dst, const void *src,
                           size_t bytes, double ce_share, const copy_cfg_t *cfg, int sms) {
  size_t ce_bytes = (size_t)(bytes * ce_share) & ~(size_t)4095;
  cudaEvent_t a, b, fork, joined;
  CUDA(cudaEventCreate(&a));
  CUDA(cudaEventCreate(&b));
  CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  for (int w = 0; w < 2 + iters; w++) {
    if (w == 2) CUDA(cudaEventRecord(a, s));
    CUDA(cudaEventRecord(fork, s));
    CUDA(cudaStreamWaitEvent(ce, fork, 0));
    if (ce_bytes) CUDA(cudaMemcpyAsync(dst, src, ce_bytes, cudaMemcpyDefault, ce));
    if (ce_bytes < bytes)
      launch_copy(cfg, sms, s, (char *)dst + ce_bytes, (const char *)src + ce_bytes,
                  bytes - ce_bytes);
    CUDA(cudaEventRecord(joined, ce));
    CUDA(cudaStreamWaitEvent(s, joined, 0));
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(joined);
  return ms_per_iter(s, a, b, iters);
}

/* cuStreamWriteValue32 through the runtime (no link against libcuda). */
typedef CUresult (*write_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static write_value_fn stream_write_value32(void) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return (write_value_fn)fn;
}

/* One CUDA graph that writes `bytes` to dst in `chunks` copy-engine copies
 * on stream ce, each followed by a flag write when `flag` is set; returns
 * us per replay (10 replays after one warm-up). */
static float time_chunked_us(cudaStream_t ce, void *dst, const void *src, size_t bytes,
                             int chunks, write_value_fn wv, unsigned *flag) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  size_t piece = bytes / chunks;
  CUDA(cudaStreamBeginCapture(ce, cudaStreamCaptureModeThreadLocal));
  for (int c = 0; c < chunks; c++) {
    CUDA(cudaMemcpyAsync((char *)dst + c * piece, (const char *)src + c * piece, piece,
                         cudaMemcpyDefault, ce));
    if (flag && wv((CUstream)ce, (CUdeviceptr)(uintptr_t)flag, (cuuint32_t)c, 0) != CUDA_SUCCESS) {
      fprintf(stderr, "cuStreamWriteValue32 failed\n");
      exit(1);
    }
  }
  CUDA(cudaStreamEndCapture(ce, &g));
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  CUDA(cudaGraphLaunch(ge, ce));
  cudaEvent_t a, b;
  CUDA(cudaEventCreate(&a));
  CUDA(cudaEventCreate(&b));
  CUDA(cudaEventRecord(a, ce));
  for (int i = 0; i < 10; i++) CUDA(cudaGraphLaunch(ge, ce));
  float ms = ms_per_iter(ce, a, b, 10);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms * 1000.0f;
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
  int status = 0;
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
    /* TMA shapes: piece KiB x blocks/SM within 227 KiB of shared memory. */
    static const copy_cfg_t tma[] = {{0, 8, 2}, {0, 16, 1}, {0, 16, 2}, {0, 32, 1}, {0, 8, 4}, {0, 48, 1}};
    for (int dir = 0; dir < 2; dir++)
      for (size_t i = 0; i < sizeof tma / sizeof tma[0]; i++) {
        float ms = dir == 0 ? time_ms(s, 5, local, peer, probe, &tma[i], sms)
                            : time_ms(s, 5, peer, local, probe, &tma[i], sms);
        printf("# sweep %s tma piece %2d KiB blocks/SM %d: %6.1f GB/s\n", dir ? "write" : "read",
               tma[i].threads, tma[i].blocks_per_sm, probe / ms / 1e6);
        if (ms < best_ms[dir]) {
          best_ms[dir] = ms;
          best[dir] = tma[i];
        }
      }
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
      if (best[dir].unroll)
        printf("# sm_%s uses unroll %d, %d threads, %d blocks/SM\n", dir ? "write" : "read",
               best[dir].unroll, best[dir].threads, best[dir].blocks_per_sm);
      else
        printf("# sm_%s uses the TMA copy, %d KiB pieces, %d blocks/SM\n", dir ? "write" : "read",
               best[dir].threads, best[dir].blocks_per_sm);
    /* The peer holds 0x02 bytes (set before the barrier). */
    for (int dir = 0; dir < 1; dir++) {
      size_t odd = max_bytes - 4096 - 16 * 7;
      unsigned long long wrong = check_copy(s, &best[0], sms, local, peer, odd, 0x02020202u);
      printf("# check: sm_read of %zu bytes from the peer: %llu wrong words\n", odd, wrong);
      if (wrong) status = 1;
    }
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
    /* Can the copy engine and the SMs together write faster than either?
     * (What a two-shot that hands part of its traffic to the copy engine
     * could reach.) */
    cudaStream_t ce;
    CUDA(cudaStreamCreateWithFlags(&ce, cudaStreamNonBlocking));
    printf("# write to the peer, copy engine and SM copy at once, GB/s by the copy engine's share\n");
    printf("# %12s", "size_bytes");
    static const double shares[] = {0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 1.0};
    for (size_t k = 0; k < sizeof shares / sizeof shares[0]; k++) printf("   ce %3.0f%%", shares[k] * 100);
    printf("\n");
    for (size_t bytes = 64u << 20; bytes <= max_bytes; bytes *= 4) {
      printf("  %12zu", bytes);
      for (size_t k = 0; k < sizeof shares / sizeof shares[0]; k++)
        printf(" %9.1f", bytes / time_split_ms(s, ce, 10, peer, local, bytes, shares[k], &best[1],
                                                sms) / 1e6);
      printf("\n");
    }
    /* What chunking costs the copy engine: the time of one 256 MiB write
     * in 1..64 copies, without and with a flag write into the peer after
     * each (what tells a peer's kernel that a chunk arrived). */
    write_value_fn wv = stream_write_value32();
    size_t cbytes = max_bytes < (256u << 20) ? max_bytes : (256u << 20);
    unsigned *flag = (unsigned *)((char *)peer + cbytes); /* past the data written */
    printf("# copy engine writing %zu bytes to the peer in chunks: us per write "
           "(copies only / each followed by a flag write%s)\n", cbytes,
           wv ? "" : "; cuStreamWriteValue32 not found");
    printf("# %6s %12s %12s %14s\n", "chunks", "copies_us", "flagged_us", "us_per_chunk");
    float one = 0;
    for (int chunks = 1; chunks <= 64; chunks *= 4) {
      float plain = time_chunked_us(ce, peer, local, cbytes, chunks, wv, NULL);
      float flagged = wv ? time_chunked_us(ce, peer, local, cbytes, chunks, wv, flag) : 0;
      if (chunks == 1) one = plain;
      printf("  %6d %12.1f %12.1f %14.2f\n", chunks, plain, flagged,
             chunks > 1 && wv ? (flagged - one) / (chunks - 1) : 0.0);
    }
    cudaStreamDestroy(ce);
    cudaStreamDestroy(s);
  }
  CHECK(symm_comm_barrier(comm));
  cudaFree(local);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return status;
}
