/* The protocol context every collective kernel runs in: epoch, headers
 * and announces, the error record, timeouts, the zero-copy agreement and
 * the header exchange.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_CTX_CUH
#define SYMM_COLL_CTX_CUH

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

/* What an all-to-all-v found wrong with the counts: symm_coll_error_t's
 * `why` and its figures. */
struct coll_detail {
  uint32_t why, other;
  uint64_t got, limit;
};

static __device__ void coll_record(const params_t &a, const coll_ctx &c, uint32_t code,
                                   uint32_t peer, const coll_detail *d = NULL) {
  /* The record is pinned host memory, where GPUs without host-native
   * atomics (PCIe hosts) may not use atomics: plain stores, the code last.
   * Two blocks failing at once may both write; either error is reported. */
  volatile symm_coll_error_t *err = (volatile symm_coll_error_t *)(uintptr_t)a.err;
  /* A timeout also sets the sticky flag in this rank's own pad (device
   * memory), which later kernels read at start instead of the host record:
   * a read of pinned host memory crosses PCIe and the GPU serves those one
   * at a time (docs/tuning.md has the cost). */
  if (code == (uint32_t)SYMM_DEV_ERR_TIMEOUT)
    ((volatile uint32_t *)coll_local_words(a))[SYMM_COLL_WORD_TIMED_OUT] = 1u;
  if (err->code == 0u) {
    err->peer = peer;
    err->kind = (uint32_t)a.kind;
    err->epoch = c.e;
    err->why = d ? d->why : 0u;
    err->other = d ? d->other : 0u;
    err->mode = d ? (uint32_t)a.v.mode : 0u;
    err->got = d ? d->got : 0u;
    err->limit = d ? d->limit : 0u;
    __threadfence_system();
    err->code = code;
  } else {
    err->more = code; /* the host has not read the earlier one yet */
  }
  __threadfence_system();
}

/* Programmatic dependent launch (gpu_launch, src/gpu/): a kernel of ours may
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
 * full block barrier this early is measurably slower (docs/tuning.md).
 * Those kernels use no other block barrier, and no thread may leave them
 * before this point (bar.sync 1 would wait for it). */
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
   * before any remote store, and use the count only in coll_end: faster
   * than a barrier and the count in coll_end, or than every thread waiting
   * for its epoch's value first (docs/tuning.md).
   * Ordering: the PTX memory model does not order another block's epoch
   * load before the last block's store of e (barriers order within the
   * block, the ticket is relaxed); the hardware does: each block's loads
   * leave its SM before its ticket, to the 32-byte sector the ticket goes
   * to, and the last block can store only after its own ticket returned.
   * (The count at the end of the kernel before relied on the same relaxed
   * ticket.)  An empty body (one rank, or fail-fast) leaves the least
   * margin.  A release ticket and an acquire fence in the last block
   * make the model guarantee it: built with -DSYMM_COLL_RELEASE_TICKET (a
   * variant for bench/tune-native.sh TUNE_VARIANTS). */
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
     * so the reader needs no order between the two stores either, and a
     * fence each side would cost (docs/tuning.md). */
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

#endif /* SYMM_COLL_CTX_CUH */
