/* The low-latency (LL) all-reduce: 16-byte packets of data and flags.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_LL_CUH
#define SYMM_COLL_LL_CUH

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
      for (int j = 0; j < E; j++) y.v[j] = coll_finish<T, Op>(acc[j], W);
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

#endif /* SYMM_COLL_LL_CUH */
