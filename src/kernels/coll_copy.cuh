/* The copy collectives (any dtype): all-gather, broadcast, all-to-all.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_COPY_CUH
#define SYMM_COLL_COPY_CUH

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

#endif /* SYMM_COLL_COPY_CUH */
