/* The LL128 all-reduce: 128-byte lines of 120 data bytes and a flag.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_LL128_CUH
#define SYMM_COLL_LL128_CUH

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
template <typename T, typename Op>
static __device__ __forceinline__ uint64_t ll128_pack(const typename dt<T>::acc_t *acc, int w) {
  union { uint64_t u; T v[8 / sizeof(T)]; } y;
#pragma unroll
  for (int j = 0; j < (int)(8 / sizeof(T)); j++) y.v[j] = coll_finish<T, Op>(acc[j], w);
  return y.u;
}

/*
 * Each 8-thread group handles LL128_BATCH lines per round, a grid stride
 * apart, and every step of a round is issued for all of them before any
 * wait.  Stores do not wait, so each round's lines are pushed into the
 * peers one round ahead: round r + 1 is loaded and pushed before round r's
 * lines are polled, combined and written out, and a round's input stays in
 * registers from its push to its reduction, so that the local half of the
 * work runs under the transfer rather than after it.  One line per round
 * by default, the fastest measured (docs/tuning.md).
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
        ll128_put_word(recv, base + w0i, n, ll128_pack<T, Op>(acc0[u], W), a8);
      if (ll128_word_valid(L[u], w1i, nwords))
        ll128_put_word(recv, base + w1i, n, ll128_pack<T, Op>(acc1[u], W), a8);
    }
  }
  coll_end(a, c);
}

#endif /* SYMM_COLL_LL128_CUH */
