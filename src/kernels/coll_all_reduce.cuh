/* One-shot and two-shot all-reduce.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_ALL_REDUCE_CUH
#define SYMM_COLL_ALL_REDUCE_CUH

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

#endif /* SYMM_COLL_ALL_REDUCE_CUH */
