/* Reduce-scatter.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_REDUCE_SCATTER_CUH
#define SYMM_COLL_REDUCE_SCATTER_CUH

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

#endif /* SYMM_COLL_REDUCE_SCATTER_CUH */
