/*
 * Collective kernels of the native backend.  Built into a fatbin that the
 * library embeds and loads through the driver API (no CUDA runtime in
 * libsymmem); every kernel is extern "C" so that native_coll.c finds it by
 * name with cuModuleGetFunction.
 *
 * Protocol (see coll_abi.h for the layouts)
 *
 *  Epoch.  The local words of this rank's scratch pad hold `epoch`, the
 *  number of collective kernels this rank ran on this scratch.  Every block
 *  reads it at start (e = epoch + 1) and the last block to finish stores e.
 *  Every rank runs the same sequence of collectives, so ranks agree on e
 *  without the host passing any counter: graphs replay correctly.  A fresh
 *  scratch has a zeroed pad, so every rank restarts at e = 1 together.
 *
 *  Headers.  Block b (= channel b) of every kernel writes an 8-byte header
 *  {sig, flag(e)} into slot [phase][b][rank][e & 1] of every peer's pad and
 *  waits for the peers' headers in its own pad with flag(e).  A different
 *  sig means the ranks enqueued different collectives (kind, count, dtype,
 *  op, root, algorithm, grid): the block records SYMM_ERR_MISMATCH and skips
 *  the data phase.  Block 0 also poisons the channels a peer with a larger
 *  grid would wait on, so no block is left waiting.  flag(e) mixes a
 *  per-scratch nonce with e, is never 0 and differs from flag(e - 2).
 *
 *  Parity.  Because every kernel waits for every peer's header of its
 *  epoch, a peer that writes something of epoch e + 2 into our memory has
 *  seen our epoch e + 1 header, which we write only after our epoch e
 *  kernel finished.  So anything indexed by e & 1 (header slots, staging
 *  halves, LL halves) is free again two epochs later; no "done" barrier is
 *  needed at the end of a kernel.
 *
 *  Staging.  Inputs are copied into this rank's staging half (e & 1) of the
 *  scratch before the header is written; peers read them from there after
 *  they saw the header (pull).  Outputs are written by each rank into its
 *  own recv buffer.
 *
 *  LL.  The low-latency all-reduce pushes its input into every peer's LL
 *  region as 8-byte packets {data: 4 bytes, flag(e): 4 bytes} written with
 *  one 8-byte store, so data and flag arrive together; the reader spins on
 *  the packet itself and zeroes it after use.  One kernel, no barrier: the
 *  header exchange runs concurrently with the packets.
 *
 *  Timeouts.  Every wait is bounded by timeout_ns against %globaltimer; on
 *  expiry the kernel records SYMM_ERR_TIMEOUT (first error wins) in the
 *  pinned error record and finishes.  Once a timeout is recorded, later
 *  kernels of the communicator skip every wait (fail fast) until the host
 *  clears the record.
 *
 *  Determinism.  Where every rank reduces the same element (one-shot, LL)
 *  the ranks' values are combined in the same order on every rank (the
 *  starting rank depends on the element's warp, not on the rank), so all
 *  ranks get bit-identical results while different warps start at
 *  different peers.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/coll_abi.h"
#include "symmem_device.cuh"

typedef symm_coll_params_t params_t;

/* ------------------------------------------------------------------ ctx */

enum { CTX_OK = 0, CTX_MISMATCH = 1, CTX_TIMEOUT = 2 };

struct coll_ctx {
  uint32_t e;        /* this kernel's epoch */
  uint32_t flag;     /* flag(e) */
  uint32_t parity;   /* e & 1 */
  uint64_t deadline; /* globaltimer bound of every wait */
  bool fail_fast;    /* a timeout is already recorded: do not wait */
};

static __device__ __forceinline__ uint32_t coll_flag(uint32_t nonce, uint32_t e) {
  return (nonce + e * 0x9E3779B9u) | 1u;
}

static __device__ __forceinline__ uint32_t *coll_local_words(const params_t &a) {
  return (uint32_t *)(uintptr_t)(a.peer_pad[a.rank] + SYMM_COLL_PAD_LOCAL);
}

static __device__ __forceinline__ uint64_t *coll_header(const params_t &a, uint64_t pad,
                                                        unsigned phase, unsigned ch,
                                                        unsigned from, unsigned parity) {
  size_t idx = (((size_t)phase * (unsigned)a.channels + ch) * (unsigned)a.world + from) * 2u +
               parity;
  return (uint64_t *)(uintptr_t)pad + idx;
}

static __device__ void coll_record(const params_t &a, const coll_ctx &c, uint32_t code,
                                   uint32_t peer) {
  /* The record is pinned host memory, where GPUs without host-native
   * atomics (PCIe hosts) may not use atomics: plain stores, the code last.
   * Two blocks failing at once may both write; either error is reported. */
  volatile symm_coll_error_t *err = (volatile symm_coll_error_t *)(uintptr_t)a.err;
  /* A timeout also sets the sticky flag in this rank's own pad (device
   * memory), which later kernels read at start instead of the host record:
   * a read of pinned host memory crosses PCIe and the GPU serves those one
   * at a time, about 1 us each, so one per warp cost 1 ms at 64 blocks. */
  if (code == (uint32_t)SYMM_DEV_ERR_TIMEOUT)
    ((volatile uint32_t *)coll_local_words(a))[SYMM_COLL_WORD_TIMED_OUT] = 1u;
  if (err->code == 0u) {
    err->peer = peer;
    err->kind = (uint32_t)a.kind;
    err->epoch = c.e;
    __threadfence_system();
    err->code = code;
    __threadfence_system();
  }
}

static __device__ coll_ctx coll_begin(const params_t &a) {
  coll_ctx c;
  volatile uint32_t *words = coll_local_words(a);
  c.e = words[0] + 1u;
  c.flag = coll_flag(a.nonce, c.e);
  c.parity = c.e & 1u;
  c.deadline = symm_dev_deadline(a.timeout_ns);
  /* After a timeout the communicator's collectives are unusable (ranks are
   * out of step): fail at once, and say so again in the host record in case
   * the earlier error has been read already. */
  c.fail_fast = words[SYMM_COLL_WORD_TIMED_OUT] != 0u;
  if (c.fail_fast && blockIdx.x == 0 && threadIdx.x == 0)
    coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, 0xffffffffu);
  return c;
}

/* Advances the epoch once every block is done with it. */
static __device__ void coll_end(const params_t &a, const coll_ctx &c) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t *words = coll_local_words(a);
    __threadfence();
    if (atomicAdd(&words[1], 1u) == gridDim.x - 1) {
      words[1] = 0;
      ((volatile uint32_t *)words)[0] = c.e;
      __threadfence();
    }
  }
}

/*
 * Header exchange of this block on channel blockIdx.x, `phase`: releases
 * everything the block wrote before it.  Thread t < world handles peer t.
 * Returns CTX_* (same value in every thread).
 */
static __device__ int coll_exchange(const params_t &a, const coll_ctx &c, unsigned phase) {
  __shared__ int s_status;
  if (threadIdx.x == 0) s_status = CTX_OK;
  __syncthreads();
  if (c.fail_fast) return CTX_TIMEOUT;
  const unsigned ch = blockIdx.x;
  const int p = (int)threadIdx.x;
  const uint64_t mine = ((uint64_t)a.sig << 32) | c.flag;
  if (p < a.world && p != a.rank) {
    __threadfence_system();
    symm_dev_st_release_u64(coll_header(a, a.peer_pad[p], phase, ch, a.rank, c.parity), mine);
    const uint64_t *slot = coll_header(a, a.peer_pad[a.rank], phase, ch, p, c.parity);
    uint64_t v;
    unsigned spins = 0;
    bool expired = false;
    while ((uint32_t)(v = symm_dev_ld_acquire_u64(slot)) != c.flag) {
      if ((++spins & 255u) == 0 && symm_dev_expired(c.deadline)) {
        expired = true;
        break;
      }
    }
    if (expired) {
      coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)p);
      atomicOr(&s_status, CTX_TIMEOUT);
    } else if ((uint32_t)(v >> 32) != a.sig) {
      coll_record(a, c, SYMM_DEV_ERR_MISMATCH, (uint32_t)p);
      atomicOr(&s_status, CTX_MISMATCH);
      /* A peer running a larger grid waits on channels this kernel does
       * not have: answer them with a header that cannot match theirs. */
      if (phase == 0 && ch == 0) {
        uint64_t poison = ((uint64_t)(~(uint32_t)(v >> 32)) << 32) | c.flag;
        for (unsigned k = gridDim.x; k < (unsigned)a.channels; k++)
          symm_dev_st_release_u64(coll_header(a, a.peer_pad[p], 0, k, a.rank, c.parity),
                                  poison);
      }
    }
  }
  __syncthreads();
  const int status = s_status;
  __syncthreads(); /* s_status is reset by the next exchange of this kernel */
  return status;
}

/* ------------------------------------------------------------ partition */

/* Block blockIdx.x's part [lo, hi) of n elements, in pieces that are
 * multiples of `unit` elements (the 16-byte vector). */
static __device__ __forceinline__ void coll_block_range(uint64_t n, uint64_t unit, uint64_t *lo,
                                                        uint64_t *hi) {
  uint64_t per = (n + gridDim.x - 1) / gridDim.x;
  per = (per + unit - 1) / unit * unit;
  uint64_t l = (uint64_t)blockIdx.x * per;
  *lo = l < n ? l : n;
  *hi = l + per < n ? l + per : n;
}

static __device__ __forceinline__ char *coll_stage(const params_t &a, int rank, uint32_t parity) {
  return (char *)(uintptr_t)(a.peer_data[rank] + a.stage_off + parity * a.stage_half);
}

/* dst[0, bytes) = src[0, bytes); 16-byte vectors when vec (both 16-byte
 * aligned), bytes otherwise.  All threads of the block share the work. */
static __device__ __forceinline__ void coll_copy(char *dst, const char *src, uint64_t bytes,
                                                 bool vec) {
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = bytes / 16;
    for (uint64_t i = threadIdx.x; i < nv; i += blockDim.x)
      ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
    done = nv * 16;
  }
  for (uint64_t i = done + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

/* ----------------------------------------------------- dtypes and ops */

template <typename T> struct dt;
template <> struct dt<float> {
  typedef float acc_t;
  static __device__ __forceinline__ acc_t load(float x) { return x; }
  static __device__ __forceinline__ float store(acc_t x) { return x; }
};
template <> struct dt<__nv_bfloat16> {
  typedef float acc_t;
  static __device__ __forceinline__ acc_t load(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 store(acc_t x) { return __float2bfloat16_rn(x); }
};
template <> struct dt<__half> {
  typedef float acc_t;
  static __device__ __forceinline__ acc_t load(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half store(acc_t x) { return __float2half_rn(x); }
};
template <> struct dt<int32_t> {
  typedef int32_t acc_t;
  static __device__ __forceinline__ acc_t load(int32_t x) { return x; }
  static __device__ __forceinline__ int32_t store(acc_t x) { return x; }
};

struct op_sum {
  static __device__ __forceinline__ float apply(float x, float y) { return x + y; }
  static __device__ __forceinline__ int32_t apply(int32_t x, int32_t y) {
    return (int32_t)((uint32_t)x + (uint32_t)y); /* wraps like the host reference */
  }
};
struct op_min {
  static __device__ __forceinline__ float apply(float x, float y) { return fminf(x, y); }
  static __device__ __forceinline__ int32_t apply(int32_t x, int32_t y) { return x < y ? x : y; }
};
struct op_max {
  static __device__ __forceinline__ float apply(float x, float y) { return fmaxf(x, y); }
  static __device__ __forceinline__ int32_t apply(int32_t x, int32_t y) { return x > y ? x : y; }
};

/* One 16-byte vector of T. */
template <typename T> union vec16 {
  uint4 u;
  T v[16 / sizeof(T)];
};

/*
 * out[i] = op over ranks r of src(r)[i] for i in [lo, hi), where src(r) is
 * `own` for r == a.rank and a.peer_data[r] + src_off otherwise (read from
 * the parameter space: no per-thread pointer array).
 * `start(i)` picks the rank the combination starts at; ranks are combined
 * in the order start, start + 1, ... (mod world).
 */
template <typename T, typename Op, bool Det>
static __device__ void coll_reduce(const params_t &a, T *out, const T *own, uint64_t src_off,
                                   uint64_t lo, uint64_t hi, bool vec) {
  typedef typename dt<T>::acc_t acc_t;
  const int W = a.world;
  const int V = 16 / sizeof(T);
  uint64_t i0 = lo;
  if (vec) {
    const uint64_t v_lo = lo / V, v_hi = hi / V;
    for (uint64_t vi = v_lo + threadIdx.x; vi < v_hi; vi += blockDim.x) {
      /* Deterministic: the start depends on the warp's position only. */
      int s = Det ? (int)((vi >> 5) % (uint64_t)W) : (a.rank + 1) % W;
      acc_t acc[16 / sizeof(T)];
      for (int k = 0; k < W; k++) {
        int r = s + k < W ? s + k : s + k - W;
        vec16<T> x;
        x.u = r == a.rank ? ((const uint4 *)own)[vi]
                          : ((const uint4 *)(uintptr_t)(a.peer_data[r] + src_off))[vi];
#pragma unroll
        for (int j = 0; j < V; j++)
          acc[j] = k == 0 ? dt<T>::load(x.v[j]) : Op::apply(acc[j], dt<T>::load(x.v[j]));
      }
      vec16<T> y;
#pragma unroll
      for (int j = 0; j < V; j++) y.v[j] = dt<T>::store(acc[j]);
      ((uint4 *)out)[vi] = y.u;
    }
    i0 = v_hi * V > lo ? v_hi * V : lo;
  }
  for (uint64_t i = i0 + threadIdx.x; i < hi; i += blockDim.x) {
    int s = Det ? (int)((i / V >> 5) % (uint64_t)W) : (a.rank + 1) % W;
    acc_t acc = 0;
    for (int k = 0; k < W; k++) {
      int r = s + k < W ? s + k : s + k - W;
      T x = r == a.rank ? own[i] : ((const T *)(uintptr_t)(a.peer_data[r] + src_off))[i];
      acc = k == 0 ? dt<T>::load(x) : Op::apply(acc, dt<T>::load(x));
    }
    out[i] = dt<T>::store(acc);
  }
}

/* ------------------------------------------------------------ all-reduce */

/* One-shot: stage, exchange, every rank reduces everything from every
 * rank's staging half. */
template <typename T, typename Op>
static __device__ void all_reduce_one_shot(const params_t &a) {
  coll_ctx c = coll_begin(a);
  const int V = 16 / sizeof(T);
  uint64_t lo, hi;
  coll_block_range(a.count, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  if (!c.fail_fast)
    coll_copy(coll_stage(a, a.rank, c.parity) + lo * sizeof(T), (const char *)(send + lo),
              (hi - lo) * sizeof(T), vec);
  if (coll_exchange(a, c, 0) == CTX_OK) {
    coll_reduce<T, Op, true>(a, recv, send, a.stage_off + c.parity * a.stage_half, lo, hi, vec);
  }
  coll_end(a, c);
}

/* Two-shot: reduce-scatter into the staging half (segment `rank` is
 * reduced in place), exchange again, gather the reduced segments. */
template <typename T, typename Op>
static __device__ void all_reduce_two_shot(const params_t &a) {
  coll_ctx c = coll_begin(a);
  const int V = 16 / sizeof(T);
  const uint64_t n = a.count, seg = a.seg;
  uint64_t lo, hi;
  coll_block_range(seg, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  char *mine = coll_stage(a, a.rank, c.parity);
  if (!c.fail_fast)
    for (int q = 0; q < a.world; q++) {
      uint64_t l = q * seg + lo, h = q * seg + hi;
      if (h > n) h = n;
      if (l < h) coll_copy(mine + l * sizeof(T), (const char *)(send + l), (h - l) * sizeof(T), vec);
    }
  int st = coll_exchange(a, c, 0);
  if (st == CTX_OK) {
    uint64_t l = a.rank * seg + lo, h = a.rank * seg + hi;
    if (h > n) h = n;
    if (l < h) {
      coll_reduce<T, Op, false>(a, recv, send, a.stage_off + c.parity * a.stage_half, l, h,
                                vec);
      __syncthreads();
      coll_copy(mine + l * sizeof(T), (const char *)(recv + l), (h - l) * sizeof(T), vec);
    }
    st = coll_exchange(a, c, 1);
  }
  if (st == CTX_OK) {
    for (int k = 1; k < a.world; k++) {
      int p = (a.rank + k) % a.world;
      uint64_t l = p * seg + lo, h = p * seg + hi;
      if (h > n) h = n;
      if (l < h)
        coll_copy((char *)(recv + l), coll_stage(a, p, c.parity) + l * sizeof(T),
                  (h - l) * sizeof(T), vec);
    }
  }
  coll_end(a, c);
}

/* Element j of a 4-byte LL word of T: 1 (4-byte T) or 2 (2-byte T). */
template <typename T> union ll_word {
  uint32_t u;
  T v[4 / sizeof(T)];
};

/* LL: push 8-byte packets {data, flag} into every peer's LL region, then
 * reduce from the own LL regions as packets arrive. */
template <typename T, typename Op>
static __device__ void all_reduce_ll(const params_t &a) {
  typedef typename dt<T>::acc_t acc_t;
  coll_ctx c = coll_begin(a);
  const int W = a.world;
  const int E = 4 / sizeof(T); /* elements per word */
  const uint64_t n = a.count, nw = (n + E - 1) / E;
  uint64_t lo, hi;
  coll_block_range(nw, 1, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const uint64_t half = a.ll_region * (uint64_t)W;
  const uint64_t ll_mine = a.peer_data[a.rank] + a.ll_off + c.parity * half;
  if (!c.fail_fast) {
    for (uint64_t w = lo + threadIdx.x; w < hi; w += blockDim.x) {
      ll_word<T> x;
      x.u = 0;
      for (int j = 0; j < E; j++)
        if (w * E + j < n) x.v[j] = send[w * E + j];
      const uint64_t pkt = ((uint64_t)c.flag << 32) | x.u;
      for (int k = 1; k < W; k++) {
        int p = (a.rank + k) % W;
        uint64_t *dst = (uint64_t *)(uintptr_t)(a.peer_data[p] + a.ll_off + c.parity * half +
                                                a.rank * a.ll_region) + w;
        symm_dev_st_relaxed_u64(dst, pkt);
      }
    }
  }
  int st = coll_exchange(a, c, 0);
  if (st == CTX_OK) {
    bool expired = false;
    for (uint64_t w = lo + threadIdx.x; w < hi && !expired; w += blockDim.x) {
      int s = (int)((w >> 5) % (uint64_t)W);
      acc_t acc[4 / sizeof(T)];
      for (int k = 0; k < W && !expired; k++) {
        int r = s + k < W ? s + k : s + k - W;
        ll_word<T> x;
        x.u = 0;
        if (r == a.rank) {
          for (int j = 0; j < E; j++)
            if (w * E + j < n) x.v[j] = send[w * E + j];
        } else {
          uint64_t *slot = (uint64_t *)(uintptr_t)(ll_mine + r * a.ll_region) + w;
          uint64_t v;
          unsigned spins = 0;
          while ((uint32_t)((v = symm_dev_ld_relaxed_u64(slot)) >> 32) != c.flag) {
            if ((++spins & 255u) == 0 && symm_dev_expired(c.deadline)) {
              coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)r);
              expired = true;
              break;
            }
          }
          if (expired) break;
          symm_dev_st_relaxed_u64(slot, 0); /* consumed: never mistaken for a later packet */
          x.u = (uint32_t)v;
        }
        for (int j = 0; j < E; j++)
          acc[j] = k == 0 ? dt<T>::load(x.v[j]) : Op::apply(acc[j], dt<T>::load(x.v[j]));
      }
      if (expired) break;
      for (int j = 0; j < E; j++)
        if (w * E + j < n) recv[w * E + j] = dt<T>::store(acc[j]);
    }
  }
  coll_end(a, c);
}

/* ------------------------------------------------------ reduce-scatter */

/* Stage all world segments, exchange, reduce segment `rank` over every
 * rank's staging half into recv. */
template <typename T, typename Op>
static __device__ void reduce_scatter(const params_t &a) {
  coll_ctx c = coll_begin(a);
  const int V = 16 / sizeof(T);
  uint64_t lo, hi;
  coll_block_range(a.count, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  char *mine = coll_stage(a, a.rank, c.parity);
  if (!c.fail_fast && lo < hi)
    for (int q = 0; q < a.world; q++)
      coll_copy(mine + (q * a.count + lo) * sizeof(T), (const char *)(send + q * a.send_seg + lo),
                (hi - lo) * sizeof(T), vec);
  if (coll_exchange(a, c, 0) == CTX_OK && lo < hi) {
    const uint64_t off = a.stage_off + c.parity * a.stage_half + a.rank * a.count * sizeof(T);
    coll_reduce<T, Op, false>(a, recv, send + a.rank * a.send_seg, off, lo, hi, vec);
  }
  coll_end(a, c);
}

/* ------------------------------------------------ copies (any dtype) */

extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_all_gather(const params_t a) {
  coll_ctx c = coll_begin(a);
  const uint64_t es = (uint64_t)a.esize;
  uint64_t lo, hi;
  coll_block_range(a.count, 16 / es ? 16 / es : 1, &lo, &hi);
  const char *send = (const char *)(uintptr_t)a.send;
  char *recv = (char *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t bytes = (hi - lo) * es;
  if (!c.fail_fast && bytes)
    coll_copy(coll_stage(a, a.rank, c.parity) + lo * es, send + lo * es, bytes, vec);
  if (coll_exchange(a, c, 0) == CTX_OK && bytes)
    for (int k = 0; k < a.world; k++) {
      int p = (a.rank + k) % a.world;
      const char *src = p == a.rank ? send : coll_stage(a, p, c.parity);
      char *dst = recv + p * a.recv_seg * es;
      if (dst + lo * es != src + lo * es) coll_copy(dst + lo * es, src + lo * es, bytes, vec);
    }
  coll_end(a, c);
}

extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_broadcast(const params_t a) {
  coll_ctx c = coll_begin(a);
  const uint64_t es = (uint64_t)a.esize;
  uint64_t lo, hi;
  coll_block_range(a.count, 16 / es ? 16 / es : 1, &lo, &hi);
  const char *send = (const char *)(uintptr_t)a.send;
  char *recv = (char *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t bytes = (hi - lo) * es;
  const bool root = a.rank == a.root;
  if (root && !c.fail_fast && bytes)
    coll_copy(coll_stage(a, a.rank, c.parity) + lo * es, send + lo * es, bytes, vec);
  if (coll_exchange(a, c, 0) == CTX_OK && bytes) {
    const char *src = root ? send : coll_stage(a, a.root, c.parity);
    if (recv != send || !root) coll_copy(recv + lo * es, src + lo * es, bytes, vec);
  }
  coll_end(a, c);
}

extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_all_to_all(const params_t a) {
  coll_ctx c = coll_begin(a);
  const uint64_t es = (uint64_t)a.esize;
  uint64_t lo, hi;
  coll_block_range(a.count, 16 / es ? 16 / es : 1, &lo, &hi);
  const char *send = (const char *)(uintptr_t)a.send;
  char *recv = (char *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t bytes = (hi - lo) * es;
  char *mine = coll_stage(a, a.rank, c.parity);
  if (!c.fail_fast && bytes)
    for (int q = 0; q < a.world; q++)
      coll_copy(mine + (q * a.count + lo) * es, send + (q * a.send_seg + lo) * es, bytes, vec);
  if (coll_exchange(a, c, 0) == CTX_OK && bytes)
    for (int k = 0; k < a.world; k++) {
      int p = (a.rank + k) % a.world;
      /* Our own segment comes from the staged copy: recv may alias send. */
      const char *src = coll_stage(a, p, c.parity) + (a.rank * a.count + lo) * es;
      coll_copy(recv + (p * a.recv_seg + lo) * es, src, bytes, vec);
    }
  coll_end(a, c);
}

/* --------------------------------------------- reduction entry points */

#define SYMM_COLL_REDUCING(name, fn, tname, T, oname, Op)                      \
  extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)              \
      symm_coll_##name##_##tname##_##oname(const params_t a) {                 \
    fn<T, Op>(a);                                                              \
  }
#define SYMM_COLL_FOR_OPS(name, fn, tname, T)                                  \
  SYMM_COLL_REDUCING(name, fn, tname, T, sum, op_sum)                          \
  SYMM_COLL_REDUCING(name, fn, tname, T, min, op_min)                          \
  SYMM_COLL_REDUCING(name, fn, tname, T, max, op_max)
#define SYMM_COLL_FOR_TYPES(name, fn)                                          \
  SYMM_COLL_FOR_OPS(name, fn, f32, float)                                      \
  SYMM_COLL_FOR_OPS(name, fn, bf16, __nv_bfloat16)                             \
  SYMM_COLL_FOR_OPS(name, fn, f16, __half)                                     \
  SYMM_COLL_FOR_OPS(name, fn, i32, int32_t)

SYMM_COLL_FOR_TYPES(ar_one_shot, all_reduce_one_shot)
SYMM_COLL_FOR_TYPES(ar_two_shot, all_reduce_two_shot)
SYMM_COLL_FOR_TYPES(ar_ll, all_reduce_ll)
SYMM_COLL_FOR_TYPES(reduce_scatter, reduce_scatter)
