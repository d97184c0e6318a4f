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
 *  reads it at start (e = epoch + 1) and is counted once all its threads
 *  have issued that load; the block that completes the count stores e when
 *  it finishes.
 *  Every rank runs the same sequence of collectives, so ranks agree on e
 *  without the host passing any counter: graphs replay correctly.  A fresh
 *  scratch has a zeroed pad, so every rank restarts at e = 1 together.
 *
 *  Headers.  Block 0 of every kernel first *announces* {e, sig} into slot
 *  [rank][e & 1] of every peer's pad.  Block b (= channel b) writes the
 *  epoch e (top bit set: never 0) into header slot [phase][b][rank][e & 1]
 *  of every peer's pad, waits for it in the peers' slots in its own pad,
 *  zeroes them, then waits for the peers' announces.  A different sig means the ranks enqueued different
 *  collectives (kind, count, dtype, op, root, algorithm, grid): the block
 *  records SYMM_ERR_MISMATCH and skips the data phase.  A block whose
 *  header never comes (the peer runs a smaller grid, or the LL kernel)
 *  looks at the announce while it waits, so no block is left waiting.
 *  Headers are 4 bytes so that the 4 KiB pad holds 122 channels for 2
 *  ranks: the bandwidth kernels need about one block per SM.
 *
 *  Parity.  Every kernel waits for something every peer wrote at the start
 *  of the same epoch (headers, or LL packets).  So a peer that writes
 *  something of epoch e + 2 into our memory has seen our epoch e + 1 data,
 *  which we write only after our epoch e kernel finished, and anything
 *  indexed by e & 1 (header slots, staging halves, LL halves) is free again
 *  two epochs later; no "done" barrier is needed at the end of a kernel.
 *
 *  Staging.  The reductions push: each rank writes its input into its
 *  region of every peer's staging half (e & 1) before the header, so no
 *  read has to cross NVLink and come back.  The copy collectives (all-
 *  gather, broadcast, all-to-all) stage into their own half and peers pull
 *  after the header.  Outputs are written by each rank into its own recv
 *  buffer.
 *
 *  LL.  The low-latency all-reduce pushes its input into every peer's LL
 *  region as 16-byte packets of two {data, flag} halves, each written in
 *  one piece, so data and flag arrive together; the reader spins on the
 *  packet itself and zeroes it after use.  One kernel and no header
 *  exchange between ranks: the flag carries the call's signature, and a reader whose packets do not
 *  come looks at the peer's announce to tell a mismatch from a late peer.
 *  LL128 does the same with 128-byte lines of 120 data bytes and a flag.
 *
 *  Timeouts.  Every wait is bounded by timeout_ns against %globaltimer,
 *  counted from the first time a thread's wait looks at the clock (after
 *  its first 64 polls, coll_expired), not from kernel start; on expiry the
 *  kernel records SYMM_ERR_TIMEOUT (an unread earlier error keeps its
 *  fields, the later code goes to `more`) in the
 *  pinned error record, sets a sticky word in this rank's scratch pad, and
 *  finishes.  While that word is set, later kernels on this scratch skip
 *  every wait (fail fast) and report again; it is never cleared (the
 *  ranks are out of step), only a new scratch starts without it.
 *
 *  Launch.  native_coll_launch sets programmatic stream serialization on
 *  sm_90+ code: a kernel may start while the one before it on the stream
 *  still runs.  Every kernel first waits for that kernel (griddepcontrol
 *  .wait, coll_after_prior_kernel) before it reads anything, epoch and
 *  inputs included, so the protocol above sees kernels in stream order;
 *  only the launch latency between them is hidden.
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

/* The parameter blocks and the ABI version these kernels were built with,
 * as the sizes of three arrays: native_coll.c compares them with its own
 * (cuModuleGetGlobal) before it uses the kernels. */
extern "C" {
__device__ unsigned char symm_coll_abi_params[sizeof(symm_coll_params_t)];
__device__ unsigned char symm_coll_abi_signal[sizeof(symm_signal_params_t)];
__device__ unsigned char symm_coll_abi_version[SYMM_COLL_ABI_VERSION];
}

/* ------------------------------------------------------------------ ctx */

enum { CTX_OK = 0, CTX_MISMATCH = 1, CTX_TIMEOUT = 2 };

struct coll_ctx {
  uint32_t e;        /* this kernel's epoch */
  uint32_t parity;   /* e & 1 */
  uint64_t deadline; /* globaltimer bound of every wait; 0: not read yet */
  bool fail_fast;    /* a timeout is already recorded: do not wait */
  uint32_t ticket;   /* thread 0: blocks counted before this one; others ~0u */
};

/* LL packet flag: mixes the scratch's nonce (the LL area is not zeroed
 * when the scratch is made), the epoch and the call's signature. */
static __device__ __forceinline__ uint32_t coll_flag(uint32_t nonce, uint32_t e) {
  return (nonce + e * 0x9E3779B9u) | 1u;
}

static __device__ __forceinline__ uint32_t *coll_local_words(const params_t &a) {
  return (uint32_t *)(uintptr_t)(a.peer_pad[a.rank] + SYMM_COLL_PAD_LOCAL);
}

/* What a header slot holds for epoch e: never 0, the value of a consumed
 * (or never written) slot, so that no stale header can be taken for a
 * fresh one, not even when the epoch counter wraps. */
static __device__ __forceinline__ uint32_t coll_header_value(uint32_t e) {
  return e | 0x80000000u;
}

/* Header slot [phase][channel][from][parity] of the pad at `pad`. */
static __device__ __forceinline__ uint32_t *coll_header(const params_t &a, uint64_t pad,
                                                        unsigned phase, unsigned ch,
                                                        unsigned from, unsigned parity) {
  size_t idx = (((size_t)phase * (unsigned)a.channels + ch) * (unsigned)a.world + from) * 2u +
               parity;
  return (uint32_t *)(uintptr_t)pad + idx;
}

/* Announce slot [from][parity]: SYMM_COLL_ANNOUNCE_BYTES, first 16 bytes
 * {epoch, signature, epoch, zc} stored at once (then the key, below); each
 * 8-byte half carries the epoch, so a reader that sees it twice has them. */
static __device__ __forceinline__ uint64_t coll_announce_slot(const params_t &a, uint64_t pad,
                                                              unsigned from, unsigned parity) {
  return pad + symm_coll_announce_off((unsigned)a.world) +
         (from * 2u + parity) * SYMM_COLL_ANNOUNCE_BYTES;
}
/* The announce's second 16 bytes: {epoch | top bit (coll_header_value),
 * key low, epoch, key high}, the whole zero-copy key, written when zero
 * copy is offered. */
static __device__ __forceinline__ uint64_t coll_key_slot(const params_t &a, uint64_t pad,
                                                         unsigned from, unsigned parity) {
  return coll_announce_slot(a, pad, from, parity) + 16u;
}
static __device__ __forceinline__ void coll_st_v4(uint64_t addr, uint32_t x, uint32_t y,
                                                  uint32_t z, uint32_t w) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "r"(x), "r"(y),
               "r"(z), "r"(w)
               : "memory");
}
static __device__ __forceinline__ uint4 coll_ld_v4(uint64_t addr) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(addr)
               : "memory");
  return v;
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
  } else {
    err->more = code; /* the host has not read the earlier one yet */
  }
  __threadfence_system();
}

/* Programmatic dependent launch (native_coll_launch): a kernel of ours may
 * start while the kernel before it on the stream still runs.  Wait for
 * that kernel's completion and memory before touching anything (a no-op
 * when launched without the attribute), then let the next kernel start:
 * only after the wait, so that at most two kernels hold SM slots. */
static __device__ __forceinline__ void coll_after_prior_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Starts a kernel's protocol; the kernel has waited for the kernel before
 * it (coll_after_prior_kernel) first.  `uniform`: every thread of the block
 * must see the same fail_fast (kernels that call coll_exchange, whose
 * barriers a thread that returned early would miss).  In LL and LL128 only
 * warp 0 waits here, on named barrier 1, for the other warps to arrive: a
 * full block barrier this early cost them 0.1-0.5 us from 64 KiB to 4 MiB
 * (2 x H200, bench/tune-native.sh, side by side: LL128 1 MiB 7.48 with it,
 * 7.13 without).  Those kernels use no other block barrier, and no thread
 * may leave them before this point (bar.sync 1 would wait for it). */
static __device__ coll_ctx coll_begin(const params_t &a, bool uniform) {
  coll_ctx c;
  volatile uint32_t *words = coll_local_words(a);
  c.e = words[0] + 1u;
  c.parity = c.e & 1u;
  c.deadline = 0;
  c.ticket = ~0u;
  /* After a timeout the communicator's collectives are unusable (ranks are
   * out of step): fail at once, and say so again in the host record in case
   * the earlier error has been read already.  Another block may set the
   * word while this one's warps read it: with `uniform` they agree. */
  c.fail_fast = words[SYMM_COLL_WORD_TIMED_OUT] != 0u;
  /* Count the block once all its threads have issued the epoch's load,
   * before any remote store, and use the count only in coll_end.  Measured
   * side by side (2 x H200, LL, graph), against a barrier and the count in
   * coll_end: 4 KiB 2.74 vs 2.81 us, 64 KiB 3.02 vs 3.14, 1 MiB 6.02 vs
   * 6.24; when every thread first waited for its epoch's value (a branch
   * on it) before the barrier, 1 MiB took 7.05.
   * Ordering: the PTX memory model does not order another block's epoch
   * load before the last block's store of e (barriers order within the
   * block, the ticket is relaxed); the hardware does: each block's loads
   * leave its SM before its ticket, to the 32-byte sector the ticket goes
   * to, and the last block can store only after its own ticket returned.
   * (The count at the end of the kernel before relied on the same relaxed
   * ticket.)  An empty body (one rank, or fail-fast) leaves the least
   * margin.  A release ticket and an acquire fence in the last block
   * make the model guarantee it: built with -DSYMM_COLL_RELEASE_TICKET (a
   * variant for bench/tune-native.sh TUNE_VARIANTS); their cost is not
   * measured yet. */
  if (uniform) {
    c.fail_fast = __syncthreads_or(c.fail_fast) != 0;
  } else if (threadIdx.x < 32) {
    asm volatile("bar.sync 1, %0;" ::"r"(blockDim.x) : "memory");
  } else {
    asm volatile("bar.arrive 1, %0;" ::"r"(blockDim.x) : "memory");
  }
  if (threadIdx.x == 0) {
#ifdef SYMM_COLL_RELEASE_TICKET
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(c.ticket)
                 : "l"((uint32_t *)words + 1)
                 : "memory");
#else
    c.ticket = atomicAdd((uint32_t *)words + 1, 1u);
#endif
  }
  if (c.fail_fast && blockIdx.x == 0 && threadIdx.x == 0)
    coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, 0xffffffffu);
  /* Tell every peer which collective this rank runs at this epoch; a peer
   * looks at it before it trusts our headers or packets. */
  if (!c.fail_fast && blockIdx.x == 0 && (int)threadIdx.x < a.world &&
      (int)threadIdx.x != a.rank) {
    /* Zero copy: peers may write our recv as soon as they see this.  No
     * fence: the kernels before this one on our stream have completed
     * (coll_after_prior_kernel, or stream order), their writes are in our
     * memory already.  The whole key is no older than the announce once its
     * halves carry this epoch (the pad is zeroed when the scratch is made),
     * so the reader needs no order between the two stores either; a fence
     * each side cost 1-2 us from 1 to 16 MiB (two-shot, 2 x H200). */
    if (a.zc)
      coll_st_v4(coll_key_slot(a, a.peer_pad[threadIdx.x], a.rank, c.parity),
                 coll_header_value(c.e), (uint32_t)a.zc_key, c.e, (uint32_t)(a.zc_key >> 32));
    coll_st_v4(coll_announce_slot(a, a.peer_pad[threadIdx.x], a.rank, c.parity), c.e, a.sig,
               c.e, a.zc);
  }
  return c;
}

/* Whether this thread's waits have run past the timeout.  The clock is
 * read first when a wait has spun a while, not at kernel start: the wait
 * is bounded all the same, and the read of %globaltimer stays off the
 * path of a kernel whose data is already there (LL at a few KiB). */
static __device__ __forceinline__ bool coll_expired(const params_t &a, coll_ctx &c) {
  if (!a.timeout_ns) return false;
  const uint64_t now = symm_dev_globaltimer();
  if (!c.deadline) c.deadline = now + a.timeout_ns;
  return now > c.deadline;
}

/* Advances the epoch in the block that completed the count (coll_begin),
 * and resets the count.  No barrier and no fence: the next kernel on the
 * stream reads both only after this one completed. */
static __device__ __forceinline__ void coll_end(const params_t &a, const coll_ctx &c) {
  if (c.ticket == gridDim.x - 1) {
#ifdef SYMM_COLL_RELEASE_TICKET
    asm volatile("fence.acq_rel.gpu;" ::: "memory"); /* acquire: every block's ticket */
#endif
    volatile uint32_t *words = coll_local_words(a);
    words[1] = 0;
    words[0] = c.e;
  }
}

/* What rank `from` announced for epoch e: CTX_OK (same collective),
 * CTX_MISMATCH (recorded), or -1 (not arrived yet). */
static __device__ __forceinline__ int coll_check_announce(const params_t &a, const coll_ctx &c,
                                                          unsigned from) {
  const uint4 v = coll_ld_v4(coll_announce_slot(a, a.peer_pad[a.rank], from, c.parity));
  if (v.x != c.e || v.z != c.e) return -1;
  if (v.y == a.sig) return CTX_OK;
  coll_record(a, c, SYMM_DEV_ERR_MISMATCH, from);
  return CTX_MISMATCH;
}

/* Whether rank `from`, whose announce carries our 32-bit a.zc, announced
 * the same whole key at this epoch (read until both halves of the key
 * carry this epoch: it may land after the announce).  false on timeout,
 * which is recorded. */
static __device__ bool coll_zc_key_matches(const params_t &a, coll_ctx &c, unsigned from) {
  const uint64_t slot = coll_key_slot(a, a.peer_pad[a.rank], from, c.parity);
  unsigned spins = 0;
  for (;;) {
    const uint4 v = coll_ld_v4(slot);
    /* The first half's tag has its top bit set: a never-written (zeroed)
     * slot does not match even when the epoch wraps to 0. */
    if (v.x == coll_header_value(c.e) && v.z == c.e)
      return (((uint64_t)v.w << 32) | v.y) == a.zc_key;
    if ((++spins & 63u) == 0 && coll_expired(a, c)) {
      coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, from);
      return false;
    }
  }
}

/* Whether every rank announced this rank's zero-copy key a.zc (non-zero):
 * then all of them write straight into each other's recv.  Waits for the
 * announces (same verdict on every rank and in every thread); false on a
 * mismatch or timeout, which are recorded. */
static __device__ bool coll_agree_zero_copy(const params_t &a, coll_ctx &c) {
  __shared__ int s_agree;
  if (threadIdx.x == 0) s_agree = 1;
  __syncthreads();
  const int p = (int)threadIdx.x;
  if (a.zc != 0 && !c.fail_fast && p < a.world && p != a.rank) {
    const uint64_t slot = coll_announce_slot(a, a.peer_pad[a.rank], (unsigned)p, c.parity);
    unsigned spins = 0;
    for (;;) {
      int st = coll_check_announce(a, c, (unsigned)p);
      if (st == CTX_OK) {
        if (coll_ld_v4(slot).w != a.zc || !coll_zc_key_matches(a, c, (unsigned)p))
          atomicExch(&s_agree, 0);
        break;
      }
      if (st == CTX_MISMATCH) {
        atomicExch(&s_agree, 0);
        break;
      }
      if ((++spins & 63u) == 0 && coll_expired(a, c)) {
        coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)p);
        atomicExch(&s_agree, 0);
        break;
      }
    }
    __threadfence_system(); /* acquire: the peer's earlier work before our writes */
  }
  __syncthreads();
  const bool agree = a.zc != 0 && !c.fail_fast && s_agree != 0;
  __syncthreads(); /* s_agree is set again by the next call */
  return agree;
}

/*
 * Header exchange of this block on channel blockIdx.x, `phase`: releases
 * everything the block wrote before it (the release store is cumulative
 * over the block's writes, ordered by the barrier before it).  Thread
 * t < world handles peer t: it stores the epoch into the peer's header
 * slot, waits for the peer's, and then for the peer's announce, whose
 * signature must equal ours.  A peer that runs another collective may
 * never write this channel; its announce says so while we wait.
 * Returns CTX_* (same value in every thread).
 */
static __device__ int coll_exchange(const params_t &a, coll_ctx &c, unsigned phase) {
  __shared__ int s_status;
  if (threadIdx.x == 0) s_status = CTX_OK;
  __syncthreads();
  if (c.fail_fast) return CTX_TIMEOUT;
  const unsigned ch = blockIdx.x;
  const int p = (int)threadIdx.x;
  if (p < a.world && p != a.rank) {
    const uint32_t hv = coll_header_value(c.e);
    symm_dev_st_release_u32(coll_header(a, a.peer_pad[p], phase, ch, a.rank, c.parity), hv);
    uint32_t *slot = coll_header(a, a.peer_pad[a.rank], phase, ch, p, c.parity);
    unsigned spins = 0;
    int st = -1;
    bool seen = false;
    for (;;) {
      if (!seen && (seen = symm_dev_ld_acquire_u32(slot) == hv))
        symm_dev_st_relaxed_u32(slot, 0u); /* consumed */
      /* Once the header is here only the announce is missing: look at it
       * every pass; before, every 64th (a mismatched peer never writes). */
      const bool look = (++spins & 63u) == 0;
      if (seen || look) {
        st = coll_check_announce(a, c, (unsigned)p);
        if (st == CTX_MISMATCH || (seen && st == CTX_OK)) break;
      }
      if (look && coll_expired(a, c)) {
        coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)p);
        st = CTX_TIMEOUT;
        break;
      }
    }
    if (st != CTX_OK) atomicOr(&s_status, st);
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
  return (char *)(uintptr_t)(a.peer_data[rank] + SYMM_COLL_STAGE_OFF + parity * a.stage_half);
}

/* dst[0, bytes) = src[0, bytes); 16-byte vectors when vec (both 16-byte
 * aligned), bytes otherwise.  All threads of the block share the work; each
 * thread keeps COLL_UNROLL loads in flight, which is what it takes to fill
 * NVLink with the few dozen blocks a collective runs. */
#ifndef SYMM_COLL_UNROLL /* a tuning knob (bench/tune-native.sh, SYMM_KERNEL_FLAGS) */
#define SYMM_COLL_UNROLL 4
#endif
enum { COLL_UNROLL = SYMM_COLL_UNROLL };
static __device__ __forceinline__ void coll_copy(char *dst, const char *src, uint64_t bytes,
                                                 bool vec) {
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = bytes / 16, bd = blockDim.x;
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    uint64_t i = threadIdx.x;
    for (; i + (COLL_UNROLL - 1) * bd < nv; i += COLL_UNROLL * bd) {
      uint4 x[COLL_UNROLL];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) x[u] = s[i + u * bd];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) d[i + u * bd] = x[u];
    }
    for (; i < nv; i += bd) d[i] = s[i];
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

/* Rank a deterministic combination starts at for work item x (a warp's
 * vector, packet group or lines): any function of x alone keeps every rank
 * combining in the same order; 32-bit, since a 64-bit modulo by a run-time
 * value is a long software sequence. */
static __device__ __forceinline__ int coll_start_rank(uint64_t x, int world) {
  return (int)((uint32_t)x % (uint32_t)world);
}

/* Rank combined at step k when the combination starts at rank s. */
static __device__ __forceinline__ int coll_rank_at(int s, int k, int world) {
  return s + k < world ? s + k : s + k - world;
}

/*
 * out[i] = op over ranks r of src(r)[i] for i in [lo, hi), where src(r) is
 * `own` for r == a.rank and the T array at src_base + r * src_stride (this
 * rank's staging, where the peers pushed their data) otherwise.  With
 * push_off != 0 the result also goes to every peer, from the same
 * registers: element i to its scratch at push_off + i * sizeof(T), or with
 * push_off == COLL_PUSH_RECV to its recv (a.peer_recv).
 * `start(i)` picks the rank the combination starts at; ranks are combined
 * in the order start, start + 1, ... (mod world).  lo is a multiple of the
 * vector when vec.
 */
#define COLL_PUSH_RECV (~(uint64_t)0)
static __device__ __forceinline__ uint64_t coll_push_base(const params_t &a, int p,
                                                          uint64_t push_off) {
  return push_off == COLL_PUSH_RECV ? a.peer_recv[p] : a.peer_data[p] + push_off;
}

template <typename T, typename Op, bool Det>
static __device__ void coll_reduce(const params_t &a, T *out, const T *own, uint64_t src_base,
                                   uint64_t src_stride, uint64_t push_off, uint64_t lo,
                                   uint64_t hi, bool vec) {
  typedef typename dt<T>::acc_t acc_t;
  const int W = a.world;
  const int V = 16 / sizeof(T);
  const uint64_t bd = blockDim.x;
  uint64_t i0 = lo;
  if (vec) {
    const uint64_t v_lo = lo / V, v_hi = hi / V;
    for (uint64_t v0 = v_lo + threadIdx.x; v0 < v_hi; v0 += COLL_UNROLL * bd) {
      acc_t acc[COLL_UNROLL][16 / sizeof(T)];
      int s[COLL_UNROLL];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++)
        /* Deterministic: the start depends on the warp's position only. */
        s[u] = Det ? coll_start_rank((v0 + u * bd) >> 5, W) : (a.rank + 1) % W;
      for (int k = 0; k < W; k++) {
        vec16<T> x[COLL_UNROLL];
#pragma unroll
        for (int u = 0; u < COLL_UNROLL; u++) { /* every load first: they overlap */
          const uint64_t vi = v0 + u * bd;
          const int r = coll_rank_at(s[u], k, W);
          const uint4 *src = r == a.rank ? (const uint4 *)own
                                         : (const uint4 *)(uintptr_t)(src_base + r * src_stride);
          x[u].u = vi < v_hi ? src[vi] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < COLL_UNROLL; u++)
#pragma unroll
          for (int j = 0; j < V; j++)
            acc[u][j] = k == 0 ? dt<T>::load(x[u].v[j])
                               : Op::apply(acc[u][j], dt<T>::load(x[u].v[j]));
      }
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) {
        const uint64_t vi = v0 + u * bd;
        if (vi >= v_hi) break;
        vec16<T> y;
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = dt<T>::store(acc[u][j]);
        ((uint4 *)out)[vi] = y.u;
        if (push_off)
          for (int k = 1; k < W; k++)
            ((uint4 *)(uintptr_t)coll_push_base(a, coll_rank_at(a.rank, k, W), push_off))[vi] = y.u;
      }
    }
    i0 = v_hi * V > lo ? v_hi * V : lo;
  }
  for (uint64_t i = i0 + threadIdx.x; i < hi; i += bd) {
    int s = Det ? coll_start_rank(i / V >> 5, W) : (a.rank + 1) % W;
    acc_t acc = 0;
    for (int k = 0; k < W; k++) {
      int r = coll_rank_at(s, k, W);
      T x = r == a.rank ? own[i] : ((const T *)(uintptr_t)(src_base + r * src_stride))[i];
      acc = k == 0 ? dt<T>::load(x) : Op::apply(acc, dt<T>::load(x));
    }
    const T y = dt<T>::store(acc);
    out[i] = y;
    if (push_off)
      for (int k = 1; k < W; k++)
        ((T *)(uintptr_t)coll_push_base(a, coll_rank_at(a.rank, k, W), push_off))[i] = y;
  }
}

/* Writes elements [l, h) of src into every peer's scratch at dst_off +
 * l * es: remote stores, so no read has to cross NVLink and back. */
static __device__ __forceinline__ void coll_push(const params_t &a, const char *src,
                                                 uint64_t dst_off, uint64_t l, uint64_t h,
                                                 uint64_t es, bool vec) {
  for (int k = 1; k < a.world; k++) {
    const int p = coll_rank_at(a.rank, k, a.world);
    coll_copy((char *)(uintptr_t)(a.peer_data[p] + dst_off) + l * es, src + l * es, (h - l) * es,
              vec);
  }
}

/* Scatter push: elements [lo, hi) of every peer q's segment of send
 * (segment q is [q * seg, (q + 1) * seg), cut at n) go to region `rank` of
 * q's scratch at dst_off, where element q * seg + i lands at
 * dst_off + (rank * seg + i) * sizeof(T). */
template <typename T>
static __device__ __forceinline__ void coll_push_segments(const params_t &a, const T *send,
                                                          uint64_t dst_off, uint64_t seg,
                                                          uint64_t n, uint64_t lo, uint64_t hi,
                                                          bool vec) {
  for (int k = 1; k < a.world; k++) {
    const int q = coll_rank_at(a.rank, k, a.world);
    const uint64_t l = q * seg + lo, h = q * seg + hi < n ? q * seg + hi : n;
    if (l < h)
      coll_copy((char *)(uintptr_t)(a.peer_data[q] + dst_off) + (a.rank * seg + lo) * sizeof(T),
                (const char *)(send + l), (h - l) * sizeof(T), vec);
  }
}

/* Byte offset of this epoch's staging half in every rank's scratch data. */
static __device__ __forceinline__ uint64_t coll_stage_off(const params_t &a, const coll_ctx &c) {
  return SYMM_COLL_STAGE_OFF + c.parity * a.stage_half;
}

/* ------------------------------------------------------------ all-reduce */

/* One-shot (push): every rank writes its input into region `rank` of every
 * peer's staging half, exchanges headers, and reduces all regions locally.
 * Regions are a.seg elements apart. */
template <typename T, typename Op>
static __device__ void all_reduce_one_shot(const params_t &a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const int V = 16 / sizeof(T);
  uint64_t lo, hi;
  coll_block_range(a.count, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t region = a.seg * sizeof(T), stage = coll_stage_off(a, c);
  if (!c.fail_fast && lo < hi)
    coll_push(a, (const char *)send, stage + a.rank * region, lo, hi, sizeof(T), vec);
  if (coll_exchange(a, c, 0) == CTX_OK)
    coll_reduce<T, Op, true>(a, recv, send, a.peer_data[a.rank] + stage, region, 0, lo, hi, vec);
  coll_end(a, c);
}

/* Two-shot (push): rank r owns segment r (a.seg elements).  Phase 1: every
 * rank writes segment q of its input into area A, region `rank`, of rank
 * q.  Phase 2: every rank reduces its segment from A and writes the result
 * to recv and into area B of every peer.  Phase 3: every rank copies the
 * peers' reduced segments from its own area B into recv.  Area A holds
 * world x seg elements, B follows it; a region's element i sits where the
 * segment's element i would.
 * Zero copy: when every rank announced the same key (recv lies in the same
 * symmetric tensor at the same offset everywhere), phase 2 writes straight
 * into the peers' recv and phase 3 goes.  Safe in place: a peer's segment
 * r of recv is written only after its input for segment r reached us in
 * phase 1, and its kernel ends only after our phase-2 header. */
template <typename T, typename Op>
static __device__ void all_reduce_two_shot(const params_t &a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const int V = 16 / sizeof(T);
  const int W = a.world;
  const uint64_t n = a.count, seg = a.seg, es = sizeof(T);
  uint64_t lo, hi;
  coll_block_range(seg, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t A = coll_stage_off(a, c), B = A + (uint64_t)W * seg * es;
  if (!c.fail_fast) coll_push_segments(a, send, A, seg, n, lo, hi, vec);
  int st = coll_exchange(a, c, 0);
  __shared__ int s_zc;
  if (threadIdx.x == 0) s_zc = a.zc != 0;
  __syncthreads();
  if (st == CTX_OK && a.zc && (int)threadIdx.x < W && (int)threadIdx.x != a.rank &&
      (coll_ld_v4(coll_announce_slot(a, a.peer_pad[a.rank], threadIdx.x, c.parity)).w != a.zc ||
       !coll_zc_key_matches(a, c, threadIdx.x)))
    atomicExch(&s_zc, 0); /* the exchange saw this announce already */
  __syncthreads();
  const bool zero_copy = s_zc != 0;
  if (st == CTX_OK) {
    const uint64_t l = a.rank * seg + lo, h = a.rank * seg + hi < n ? a.rank * seg + hi : n;
    /* Element i (global index) of rank r's contribution: A + r*seg + i - rank*seg. */
    const uint64_t base = a.peer_data[a.rank] + A - a.rank * seg * es;
    if (l < h)
      coll_reduce<T, Op, false>(a, recv, send, base, seg * es, zero_copy ? COLL_PUSH_RECV : B, l,
                                h, vec);
    st = coll_exchange(a, c, 1);
  }
  if (st == CTX_OK && !zero_copy) {
    const char *mine_b = (const char *)(uintptr_t)(a.peer_data[a.rank] + B);
    for (int k = 1; k < W; k++) {
      const int p = coll_rank_at(a.rank, k, W);
      const uint64_t l = p * seg + lo, h = p * seg + hi < n ? p * seg + hi : n;
      if (l < h) coll_copy((char *)(recv + l), mine_b + l * es, (h - l) * es, vec);
    }
  }
  coll_end(a, c);
}

/* ------------------------------------------------------------------ LL */
/*
 * A packet is 16 bytes, two 8-byte halves {data word, flag}; each half is
 * written in one piece, so a reader that sees the flag in both halves has
 * both data words.  The flag mixes the epoch with the call's signature: a
 * peer that enqueued a different collective never produces our flag, and
 * the reader, while it waits, looks at that peer's announce to say
 * SYMM_ERR_MISMATCH instead of waiting out the timeout.  Consumed packets
 * are zeroed, so that the region holds nothing stale when its parity comes
 * round again.
 */
static __device__ __forceinline__ void ll_store(uint64_t addr, uint32_t d0, uint32_t d1,
                                                uint32_t flag) {
  coll_st_v4(addr, d0, flag, d1, flag);
}

static __device__ __forceinline__ uint32_t ll_flag(const params_t &a, const coll_ctx &c) {
  return coll_flag(a.nonce ^ (a.sig * 0x85EBCA6Bu), c.e);
}

/* Packet i of n elements of src (8 bytes; zeros past the end). */
template <typename T> union ll_data {
  uint2 u;
  T v[8 / sizeof(T)];
};
template <typename T>
static __device__ __forceinline__ uint2 ll_pack(const T *src, uint64_t i, uint64_t n, bool vec) {
  const int E = 8 / sizeof(T);
  if (vec && (i + 1) * E <= n) return ((const uint2 *)src)[i];
  ll_data<T> x;
  x.u = make_uint2(0, 0);
  for (int j = 0; j < E; j++)
    if (i * E + j < n) x.v[j] = src[i * E + j];
  return x.u;
}

/* Waits for the packet at addr from rank `from`; false (error recorded)
 * on timeout or when `from` announced a different collective. */
static __device__ bool ll_wait(const params_t &a, coll_ctx &c, uint32_t flag,
                               uint64_t addr, int from, uint2 *out) {
  uint4 v;
  unsigned spins = 0;
  while ((v = coll_ld_v4(addr)).y != flag || v.w != flag) {
    if ((++spins & 63u) == 0) {
      if (coll_check_announce(a, c, (unsigned)from) == CTX_MISMATCH) return false;
      if (coll_expired(a, c)) {
        coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)from);
        return false;
      }
    }
  }
  ll_store(addr, 0, 0, 0); /* consumed */
  *out = make_uint2(v.x, v.z);
  return true;
}

/* LL all-reduce: one kernel, no header exchange.  Every thread pushes its packets
 * into every peer's LL region, then reduces them from its own regions as
 * they arrive (ranks combined in the same order everywhere). */
template <typename T, typename Op>
static __device__ void all_reduce_ll(const params_t &a) {
  typedef typename dt<T>::acc_t acc_t;
  const int W = a.world;
  const int E = 8 / sizeof(T); /* elements per packet */
  const uint64_t n = a.count, np = (n + E - 1) / E;
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  /* The first packet's load overlaps the epoch's. */
  coll_after_prior_kernel();
  const uint2 d0 = first < np ? ll_pack(send, first, n, vec) : make_uint2(0, 0);
  coll_ctx c = coll_begin(a, false);
  const uint32_t flag = ll_flag(a, c);
  const uint64_t area = c.parity * a.ll_region * (uint64_t)W; /* the LL area is at 0 */
  const uint64_t mine = a.peer_data[a.rank] + area;
  if (!c.fail_fast) {
    for (uint64_t i = first; i < np; i += stride) {
      const uint2 d = i == first ? d0 : ll_pack(send, i, n, vec);
      for (int k = 1; k < W; k++) {
        const int p = coll_rank_at(a.rank, k, W);
        ll_store(a.peer_data[p] + area + a.rank * a.ll_region + i * 16, d.x, d.y, flag);
      }
    }
    bool ok = true;
    for (uint64_t i = first; i < np && ok; i += stride) {
      const int s = coll_start_rank(i >> 5, W);
      acc_t acc[8 / sizeof(T)];
      for (int k = 0; k < W && ok; k++) {
        const int r = coll_rank_at(s, k, W);
        ll_data<T> x;
        if (r == a.rank)
          x.u = i == first ? d0 : ll_pack(send, i, n, vec);
        else
          ok = ll_wait(a, c, flag, mine + r * a.ll_region + i * 16, r, &x.u);
#pragma unroll
        for (int j = 0; j < E; j++)
          acc[j] = k == 0 ? dt<T>::load(x.v[j]) : Op::apply(acc[j], dt<T>::load(x.v[j]));
      }
      if (!ok) break;
      ll_data<T> y;
#pragma unroll
      for (int j = 0; j < E; j++) y.v[j] = dt<T>::store(acc[j]);
      if (vec && (i + 1) * E <= n) {
        ((uint2 *)recv)[i] = y.u;
      } else {
        for (int j = 0; j < E; j++)
          if (i * E + j < n) recv[i * E + j] = y.v[j];
      }
    }
  }
  coll_end(a, c);
}

/* --------------------------------------------------------------- LL128 */
/*
 * LL128: like LL, but a 128-byte line carries 120 bytes of data and one
 * 8-byte flag.  Eight threads write a line with one 16-byte store each; the
 * warp's stores to a line leave as one 128-byte NVLink write, which arrives
 * whole, and the eight threads' loads of a line are one 128-byte read of
 * the L2 line, so a reader that sees the flag (in the line's last 8 bytes,
 * held by the group's eighth thread) has the whole line.  That is the
 * property NCCL's LL128 protocol relies on over NVLink.  Readers retry as a
 * warp until all four lines of the warp carry the flag; the flag word is
 * zeroed after use.
 */
enum { LL128_WORDS = 15 }; /* 8-byte data words per line */

static __device__ __forceinline__ void ll128_store(uint64_t addr, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(addr), "l"(w0), "l"(w1)
               : "memory");
}
static __device__ __forceinline__ void ll128_load(uint64_t addr, uint64_t *w0, uint64_t *w1) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(*w0), "=l"(*w1)
               : "l"(addr)
               : "memory");
}

/* Data word i (8 bytes) of n elements of src, zeros past the end; whole
 * 8-byte loads when `a8` (src and dst 8-byte aligned: each rank decides for
 * its own buffers, so the kernel is the same on every rank). */
template <typename T>
static __device__ __forceinline__ uint64_t ll128_word(const T *src, uint64_t i, uint64_t n,
                                                      bool a8) {
  const uint64_t E = 8 / sizeof(T);
  if (a8 && (i + 1) * E <= n) return ((const uint64_t *)src)[i];
  union { uint64_t u; T v[8 / sizeof(T)]; } x;
  x.u = 0;
  for (uint64_t j = 0; j < E; j++)
    if (i * E + j < n) x.v[j] = src[i * E + j];
  return x.u;
}
template <typename T>
static __device__ __forceinline__ void ll128_put_word(T *dst, uint64_t i, uint64_t n, uint64_t w,
                                                      bool a8) {
  const uint64_t E = 8 / sizeof(T);
  if (a8 && (i + 1) * E <= n) {
    ((uint64_t *)dst)[i] = w;
    return;
  }
  union { uint64_t u; T v[8 / sizeof(T)]; } x;
  x.u = w;
  for (uint64_t j = 0; j < E; j++)
    if (i * E + j < n) dst[i * E + j] = x.v[j];
}
/* acc (8 bytes of T, as acc_t) op= x. */
template <typename T, typename Op>
static __device__ __forceinline__ void ll128_combine(typename dt<T>::acc_t *acc, uint64_t x,
                                                     bool first) {
  union { uint64_t u; T v[8 / sizeof(T)]; } y;
  y.u = x;
#pragma unroll
  for (int j = 0; j < (int)(8 / sizeof(T)); j++)
    acc[j] = first ? dt<T>::load(y.v[j]) : Op::apply(acc[j], dt<T>::load(y.v[j]));
}
template <typename T>
static __device__ __forceinline__ uint64_t ll128_pack(const typename dt<T>::acc_t *acc) {
  union { uint64_t u; T v[8 / sizeof(T)]; } y;
#pragma unroll
  for (int j = 0; j < (int)(8 / sizeof(T)); j++) y.v[j] = dt<T>::store(acc[j]);
  return y.u;
}

/*
 * Each 8-thread group handles LL128_BATCH lines per round, a grid stride
 * apart, and every step of a round is issued for all of them before any
 * wait.  Stores do not wait, so each round's lines are pushed into the
 * peers one round ahead: round r + 1 is loaded and pushed before round r's
 * lines are polled, combined and written out, and a round's input stays in
 * registers from its push to its reduction.  (Pushing every round first
 * and reducing after cost 2 us at 4 MiB: the local half of the work then
 * ran after the transfer instead of under it.)
 * One line per round by default: measured on 2 x H200 (bench/tune-native.sh,
 * graph), two lines per round cost 0.4 us more from 4 KiB to 512 KiB.
 */
#ifndef SYMM_LL128_BATCH /* a tuning knob, like SYMM_COLL_UNROLL */
#define SYMM_LL128_BATCH 1
#endif
enum { LL128_BATCH = SYMM_LL128_BATCH };

/* The lines of the round starting at Lb of this thread's group (line u at
 * Lb + u * groups), and this thread's two input words of each (0 where the
 * word is past the data); the flag word (the group's eighth thread's
 * second) is left 0 for the caller.  Which lines and words exist follows
 * from L (ll128_line_valid, ll128_word_valid). */
struct ll128_round {
  uint64_t L[LL128_BATCH], x0[LL128_BATCH], x1[LL128_BATCH];
};
static __device__ __forceinline__ bool ll128_line_valid(uint64_t L, uint64_t nlines) {
  return L < nlines;
}
/* Data word w (0..14) of line L: false past the data, and for the flag word
 * (w == 15); a word past the data implies a line past the last. */
static __device__ __forceinline__ bool ll128_word_valid(uint64_t L, uint64_t w, uint64_t nwords) {
  return w < LL128_WORDS && L * LL128_WORDS + w < nwords;
}
template <typename T>
static __device__ __forceinline__ void ll128_round_input(ll128_round &rd, const T *send,
                                                         uint64_t n, uint64_t nwords,
                                                         uint64_t Lb, uint64_t groups,
                                                         unsigned lane, bool a8) {
  const unsigned sub = lane & 7u;
  const uint64_t w0i = 2u * sub, w1i = 2u * sub + 1u;
#pragma unroll
  for (int u = 0; u < LL128_BATCH; u++) {
    rd.L[u] = Lb + u * groups + (lane >> 3);
    const uint64_t base = rd.L[u] * LL128_WORDS;
    rd.x0[u] = ll128_word_valid(rd.L[u], w0i, nwords) ? ll128_word(send, base + w0i, n, a8) : 0;
    rd.x1[u] = ll128_word_valid(rd.L[u], w1i, nwords) ? ll128_word(send, base + w1i, n, a8) : 0;
  }
}

/* Stores the lines of round `rd` into every peer's region `rank` of the
 * LL128 area at `area`; the group's eighth thread puts the flag in its
 * second word.  Warp-uniform, converged at the stores: a line's eight
 * stores must leave as one instruction to travel as one 128-byte write. */
static __device__ __forceinline__ void ll128_push(const params_t &a, const ll128_round &rd,
                                                  uint64_t nlines, uint64_t area, unsigned sub,
                                                  uint64_t flag) {
  for (int k = 1; k < a.world; k++) {
    const uint64_t to =
        a.peer_data[coll_rank_at(a.rank, k, a.world)] + area + a.rank * a.ll128_region;
    __syncwarp();
#pragma unroll
    for (int u = 0; u < LL128_BATCH; u++)
      if (ll128_line_valid(rd.L[u], nlines))
        ll128_store(to + rd.L[u] * 128u + sub * 16u, rd.x0[u], sub != 7u ? rd.x1[u] : flag);
  }
}

template <typename T, typename Op>
static __device__ void all_reduce_ll128(const params_t &a) {
  typedef typename dt<T>::acc_t acc_t;
  enum { B = LL128_BATCH, E = 8 / sizeof(T) };
  const int W = a.world;
  const uint64_t n = a.count;
  const uint64_t nwords = (n + E - 1) / E, nlines = (nwords + LL128_WORDS - 1) / LL128_WORDS;
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const unsigned lane = threadIdx.x & 31u, sub = lane & 7u;
  /* Line groups (8 threads each), numbered across the grid. */
  const uint64_t group = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
  const uint64_t groups = ((uint64_t)gridDim.x * blockDim.x) >> 3;
  const uint64_t w0i = 2u * sub, w1i = 2u * sub + 1u; /* this thread's words in a line */
  const bool has_w1 = sub != 7u;                      /* the eighth holds the flag */
  const bool a8 = (((uintptr_t)send | (uintptr_t)recv) & 7u) == 0;
  /* The first round's input loads overlap the epoch's. */
  const uint64_t Lb0 = group & ~(uint64_t)3;
  ll128_round rd;
  coll_after_prior_kernel();
  ll128_round_input(rd, send, n, nwords, Lb0, groups, lane, a8);
  coll_ctx c = coll_begin(a, false);
  const uint32_t f = ll_flag(a, c);
  const uint64_t flag = ((uint64_t)f << 32) | f;
  const uint64_t area = SYMM_COLL_LL128_OFF + c.parity * a.ll128_region * (uint64_t)W;
  const uint64_t mine = a.peer_data[a.rank] + area;
  bool ok = !c.fail_fast;
  /* Round r + 1 is pushed before round r is reduced, from registers that
   * hold its input until its own reduction: the peers' lines of the next
   * round are in flight while this one is combined. */
  if (ok) ll128_push(a, rd, nlines, area, sub, flag);
  for (uint64_t Lb = Lb0; Lb < nlines && ok; Lb += B * groups) {
    const ll128_round cur = rd;
    if (Lb + B * groups < nlines) {
      ll128_round_input(rd, send, n, nwords, Lb + B * groups, groups, lane, a8);
      ll128_push(a, rd, nlines, area, sub, flag);
    }
    const uint64_t *const L = cur.L, *const x0 = cur.x0, *const x1 = cur.x1;
    bool valid[B];
#pragma unroll
    for (int u = 0; u < B; u++) valid[u] = ll128_line_valid(L[u], nlines);
    acc_t acc0[B][E], acc1[B][E];
    for (int k = 0; k < W && ok; k++) {
      /* Source of line u at step k: ranks are combined from a start that
       * depends on the line only, the same order on every rank. */
      int r[B];
      uint64_t addr[B], y0[B], y1[B];
      bool got[B];
#pragma unroll
      for (int u = 0; u < B; u++) {
        r[u] = coll_rank_at(coll_start_rank((Lb + u * groups) >> 2, W), k, W);
        addr[u] = mine + r[u] * a.ll128_region + L[u] * 128u + sub * 16u;
        got[u] = r[u] == a.rank || !__any_sync(0xffffffffu, valid[u]);
        y0[u] = x0[u];
        y1[u] = x1[u]; /* 0 in the flag word */
      }
      unsigned spins = 0;
      for (;;) {
#pragma unroll
        for (int u = 0; u < B; u++) /* every poll first: they overlap */
          if (!got[u] && valid[u]) ll128_load(addr[u], &y0[u], &y1[u]);
        bool all = true;
#pragma unroll
        for (int u = 0; u < B; u++)
          if (!got[u]) {
            const uint64_t fl = __shfl_sync(0xffffffffu, y1[u], (int)((lane & ~7u) | 7u));
            got[u] = __all_sync(0xffffffffu, !valid[u] || fl == flag);
            all = all && got[u];
          }
        if (all) break;
        if ((++spins & 63u) == 0) {
          int bad = 0;
          if (lane == 0)
            for (int u = 0; u < B && !bad; u++) {
              if (got[u]) continue;
              if (coll_check_announce(a, c, (unsigned)r[u]) == CTX_MISMATCH) bad = 1;
              else if (coll_expired(a, c)) {
                coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)r[u]);
                bad = 1;
              }
            }
          if (__any_sync(0xffffffffu, bad)) {
            ok = false;
            break;
          }
        }
      }
      if (!ok) break;
#pragma unroll
      for (int u = 0; u < B; u++) {
        if (r[u] != a.rank && valid[u] && !has_w1)
          ll128_store(addr[u], y0[u], 0); /* consumed: flag word zeroed */
        ll128_combine<T, Op>(acc0[u], y0[u], k == 0);
        ll128_combine<T, Op>(acc1[u], y1[u], k == 0);
      }
    }
    if (!ok) break;
#pragma unroll
    for (int u = 0; u < B; u++) {
      const uint64_t base = L[u] * LL128_WORDS;
      if (ll128_word_valid(L[u], w0i, nwords))
        ll128_put_word(recv, base + w0i, n, ll128_pack<T>(acc0[u]), a8);
      if (ll128_word_valid(L[u], w1i, nwords))
        ll128_put_word(recv, base + w1i, n, ll128_pack<T>(acc1[u]), a8);
    }
  }
  coll_end(a, c);
}

/* ------------------------------------------------------ reduce-scatter */

/* Push: every rank writes segment q of its input into region `rank` of
 * rank q's staging half, exchanges headers, and reduces its own segment
 * from the regions locally. */
template <typename T, typename Op>
static __device__ void reduce_scatter(const params_t &a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const int V = 16 / sizeof(T);
  uint64_t lo, hi;
  coll_block_range(a.count, V, &lo, &hi);
  const T *send = (const T *)(uintptr_t)a.send;
  T *recv = (T *)(uintptr_t)a.recv;
  const bool vec = a.vec != 0;
  const uint64_t es = sizeof(T), stage = coll_stage_off(a, c);
  if (!c.fail_fast) coll_push_segments(a, send, stage, a.count, a.world * a.count, lo, hi, vec);
  if (coll_exchange(a, c, 0) == CTX_OK && lo < hi)
    coll_reduce<T, Op, false>(a, recv, send + a.rank * a.count, a.peer_data[a.rank] + stage,
                              a.count * es, 0, lo, hi, vec);
  coll_end(a, c);
}

/* ------------------------------------------------ copies (any dtype) */

/* This block's part of a copy collective: elements [lo, hi) of each
 * segment, `bytes` = (hi - lo) * esize. */
struct copy_part {
  uint64_t es, lo, hi, bytes;
  const char *send;
  char *recv;
  bool vec;
};
static __device__ copy_part coll_copy_part(const params_t &a) {
  copy_part cp;
  cp.es = (uint64_t)a.esize;
  coll_block_range(a.count, 16 / cp.es ? 16 / cp.es : 1, &cp.lo, &cp.hi);
  cp.send = (const char *)(uintptr_t)a.send;
  cp.recv = (char *)(uintptr_t)a.recv;
  cp.vec = a.vec != 0;
  cp.bytes = (cp.hi - cp.lo) * cp.es;
  return cp;
}

/* All-gather.  Zero copy (every rank's recv is the same symmetric tensor
 * at the same offset, agreed through the announces): each rank writes its
 * piece straight into region `rank` of every peer's recv, then exchanges
 * headers.  Otherwise each rank stages its piece and peers pull it. */
extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_all_gather(const params_t a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const copy_part cp = coll_copy_part(a);
  const uint64_t off = cp.lo * cp.es, region = a.count * cp.es;
  if (a.zc && coll_agree_zero_copy(a, c)) {
    if (cp.bytes) {
      for (int k = 1; k < a.world; k++) {
        const int p = coll_rank_at(a.rank, k, a.world);
        coll_copy((char *)(uintptr_t)a.peer_recv[p] + a.rank * region + off, cp.send + off,
                  cp.bytes, cp.vec);
      }
      char *own = cp.recv + a.rank * region;
      if (own != cp.send) coll_copy(own + off, cp.send + off, cp.bytes, cp.vec);
    }
    coll_exchange(a, c, 0);
    coll_end(a, c);
    return;
  }
  if (!c.fail_fast && cp.bytes)
    coll_copy(coll_stage(a, a.rank, c.parity) + off, cp.send + off, cp.bytes, cp.vec);
  if (coll_exchange(a, c, 0) == CTX_OK && cp.bytes)
    for (int k = 0; k < a.world; k++) {
      const int p = coll_rank_at(a.rank, k, a.world);
      const char *src = p == a.rank ? cp.send : coll_stage(a, p, c.parity);
      char *dst = cp.recv + p * region;
      if (dst != src) coll_copy(dst + off, src + off, cp.bytes, cp.vec);
    }
  coll_end(a, c);
}

extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_broadcast(const params_t a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const copy_part cp = coll_copy_part(a);
  const uint64_t off = cp.lo * cp.es;
  const bool root = a.rank == a.root;
  if (root && !c.fail_fast && cp.bytes)
    coll_copy(coll_stage(a, a.rank, c.parity) + off, cp.send + off, cp.bytes, cp.vec);
  if (coll_exchange(a, c, 0) == CTX_OK && cp.bytes) {
    const char *src = root ? cp.send : coll_stage(a, a.root, c.parity);
    if (cp.recv != cp.send || !root) coll_copy(cp.recv + off, src + off, cp.bytes, cp.vec);
  }
  coll_end(a, c);
}

extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS)
    symm_coll_all_to_all(const params_t a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const copy_part cp = coll_copy_part(a);
  char *mine = coll_stage(a, a.rank, c.parity);
  if (!c.fail_fast && cp.bytes)
    for (int q = 0; q < a.world; q++)
      coll_copy(mine + (q * a.count + cp.lo) * cp.es, cp.send + (q * a.count + cp.lo) * cp.es,
                cp.bytes, cp.vec);
  if (coll_exchange(a, c, 0) == CTX_OK && cp.bytes)
    for (int k = 0; k < a.world; k++) {
      const int p = coll_rank_at(a.rank, k, a.world);
      /* Our own segment comes from the staged copy: recv may alias send. */
      const char *src = coll_stage(a, p, c.parity) + (a.rank * a.count + cp.lo) * cp.es;
      coll_copy(cp.recv + (p * a.count + cp.lo) * cp.es, src, cp.bytes, cp.vec);
    }
  coll_end(a, c);
}

/* ------------------------------------------------------------- signals */

/* symm_signal_put / _wait / _barrier on a stream: the symmem_device.cuh
 * functions, one peer per thread for the barrier. */
extern "C" __global__ void __launch_bounds__(SYMM_SIGNAL_THREADS)
    symm_signal_op(const symm_signal_params_t a) {
  symm_dev_error_t *err = (symm_dev_error_t *)(uintptr_t)a.err;
  const int t = (int)threadIdx.x;
  const unsigned ch = (unsigned)a.channel, W = (unsigned)a.world;
  uint32_t *mine = (uint32_t *)(uintptr_t)a.pads[a.rank];
  coll_after_prior_kernel();
  if (a.op == 1 || a.op == 2) {
    if (t != 0) return;
    if (a.op == 1)
      symm_dev_put_signal((uint32_t *)(uintptr_t)a.pads[a.peer],
                          symm_dev_signal_slot(ch, (unsigned)a.rank, W), 1u, (unsigned)a.peer,
                          a.timeout_ns, err);
    else
      symm_dev_wait_signal(mine, symm_dev_signal_slot(ch, (unsigned)a.peer, W),
                           (unsigned)a.peer, a.timeout_ns, err, NULL);
    return;
  }
  if (t < a.world && t != a.rank &&
      symm_dev_put_signal((uint32_t *)(uintptr_t)a.pads[t],
                          symm_dev_signal_slot(ch, (unsigned)a.rank, W), 1u, (unsigned)t,
                          a.timeout_ns, err) == SYMM_DEV_SUCCESS)
    symm_dev_wait_signal(mine, symm_dev_signal_slot(ch, (unsigned)t, W), (unsigned)t,
                         a.timeout_ns, err, NULL);
}

/* --------------------------------------------- reduction entry points */

/* One block per SM is what the header-exchanging kernels' grids need (at
 * most their channels); LL and LL128 run smaller blocks, several per SM.
 * Saying so changes ptxas's register choice: with nvcc 13.0 and
 * __launch_bounds__(512) alone it held the LL128 bf16 and f16 sum kernels
 * at 64 registers and spilled 20 bytes; with the minimum of one block per
 * SM they take 76 and do not spill (-Xptxas -v). */
#define SYMM_COLL_REDUCING(name, fn, tname, T, oname, Op)                      \
  extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS, 1)           \
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
SYMM_COLL_FOR_TYPES(ar_ll128, all_reduce_ll128)
SYMM_COLL_FOR_TYPES(reduce_scatter, reduce_scatter)
