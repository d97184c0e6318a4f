/*
 * Copy-engine collectives (SYMM_ALGO_CE): all-gather, broadcast,
 * all-to-all and all-to-all-v with host counts, moved by cuMemcpyAsync
 * on the caller's stream, so that no SM moves data and a kernel beside
 * them (a GEMM) keeps every SM.
 *
 * A call is, in stream order on every rank:
 *   1. a barrier (symm_signal_op, SYMM_SIGNAL_OP_CE, one block): every
 *      rank's earlier work on its stream is done, so every rank's scratch
 *      is free to be written (no late peer still reads what an earlier
 *      collective staged there);
 *   2. one copy per destination rank: this rank's piece for rank p into
 *      p's scratch staging, at a slot of its own (this rank's number
 *      times the slot size);
 *   3. a second barrier: every rank's copies into this rank's scratch
 *      are complete (a signal follows its stream's copies);
 *   4. local copies from this rank's scratch into recvbuf;
 *   5. a third barrier: every rank has copied its staging out.  Without
 *      it a peer past the second barrier could start an SM collective
 *      whose first act pushes into this rank's staging (one-shot,
 *      two-shot and all-to-all-v push into the half of their epoch's
 *      parity before any exchange, trusting that the kernel before them
 *      ended everywhere) while step 4 still reads it.
 * Staging in the scratch, never in the peers' recvbuf, keeps every write
 * of a call inside library memory and the caller's own buffers, whatever
 * a peer passes, and lets sendbuf and recvbuf overlap (every read of
 * sendbuf comes before the second barrier, every write of recvbuf after).
 *
 * Both barriers carry values: every rank puts, for peer p, a hash of its
 * call's signature (and, for all-to-all-v, of what it sends p) and checks
 * what p put against what it expects (the signature; all-to-all-v: of
 * what it receives from p), so ranks whose calls differ record
 * SYMM_ERR_MISMATCH (symm_comm_check_async_error).  The host cannot skip
 * the copies it has issued, so recvbuf is then undefined; writes still
 * stay inside the scratch, whose size every rank shares.  The slots of the
 * barriers are self-resetting signals in the scratch pad
 * (symm_coll_ce_off): a put waits until the previous one was consumed,
 * so no rank runs a barrier ahead of a peer.  No host counter reaches the
 * device and nothing allocates once the scratch is reserved: calls can be
 * captured in CUDA graphs.  The SM kernels' device epoch is not touched
 * (they keep their own order; a barrier waits for them to finish).
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

/* The call's value for the barriers: odd, so never 0 nor a refused
 * call's SYMM_SIGNAL_CE_REFUSED; `extra` mixes in a per-peer count. */
static uint32_t ce_value(uint64_t sig, uint64_t extra) {
  uint64_t f[2] = {sig, extra};
  uint64_t h = symm_hash64(f, sizeof f, 0x63655f62ull);
  return (uint32_t)(h ^ (h >> 32)) | 1u;
}

/* One barrier of a call on the scratch's copy-engine slots. */
static symm_result_t ce_barrier(symm_comm_t *comm, symm_gpu_t *g, const symm_coll_params_t *base,
                                const uint32_t *put, const uint32_t *want, void *stream) {
  symm_signal_params_t p;
  memset(&p, 0, sizeof p);
  for (int r = 0; r < g->size; r++) {
    p.pads[r] = base->peer_pad[r] + symm_coll_ce_off((unsigned)g->size);
    p.put_value[r] = put[r];
    p.want_value[r] = want[r];
  }
  p.err = g->err_dev;
  p.timeout_ns = (uint64_t)symm_comm_timeout_ms(comm) * 1000000ull;
  p.op = SYMM_SIGNAL_OP_CE;
  p.rank = g->rank;
  p.world = g->size;
  return gpu_signal_launch(g, &p, stream);
}

/* Rank r's staging, as mapped here. */
static char *ce_stage(const symm_coll_params_t *base, int r) {
  return (char *)(uintptr_t)(base->peer_data[r] + SYMM_COLL_STAGE_OFF);
}

/* What one call copies: to each rank p, send_len[p] bytes from send_at[p]
 * into slot (this rank) of p's staging; then, from each slot q of this
 * rank's staging, recv_len[q] bytes to recv_at[q].  Slots are slot bytes
 * apart.  recv_whole: the slots land in recvbuf as they lie (one copy). */
typedef struct ce_call {
  const char *send_at[SYMM_COLL_MAX_WORLD];
  uint64_t send_len[SYMM_COLL_MAX_WORLD];
  char *recv_at[SYMM_COLL_MAX_WORLD];
  uint64_t recv_len[SYMM_COLL_MAX_WORLD];
  uint64_t slot;
  bool recv_whole;
  uint32_t put[SYMM_COLL_MAX_WORLD], want[SYMM_COLL_MAX_WORLD];
} ce_call_t;

/* The fixed-size collectives' plan: slots of b bytes, recvbuf filled from
 * the staging in one copy (broadcast: the root's one slot). */
static void ce_plan_fixed(const symm_gpu_t *g, const symm_coll_args_t *a, ce_call_t *c) {
  const uint64_t b = a->count * symm_dtype_size(a->dtype), W = (uint64_t)g->size;
  const char *send = a->sendbuf;
  const bool bcast = a->kind == SYMM_COLL_BROADCAST, root = g->rank == a->root;
  c->slot = bcast ? 0 : b;
  c->recv_whole = true;
  c->recv_at[0] = a->recvbuf;
  c->recv_len[0] = bcast ? b : W * b;
  for (int p = 0; p < g->size; p++) {
    c->send_at[p] = a->kind == SYMM_COLL_ALL_TO_ALL ? send + (uint64_t)p * b : send;
    c->send_len[p] = !bcast || root ? b : 0;
  }
}

/* All-to-all-v's plan: slots of an equal share of the staging (the same
 * on every rank: the scratch is), chunks that do not fit refused here. */
static symm_result_t ce_plan_v(const symm_gpu_t *g, const symm_coll_args_t *a, uint64_t staging,
                               uint64_t sig, ce_call_t *c) {
  const symm_coll_v_t *v = a->v;
  const uint64_t es = symm_dtype_size(a->dtype);
  c->slot = staging / (uint64_t)g->size & ~(uint64_t)255;
  for (int p = 0; p < g->size; p++) {
    c->send_at[p] = (const char *)a->sendbuf + v->send_displs[p] * es;
    c->send_len[p] = v->send_counts[p] * es;
    c->recv_at[p] = (char *)a->recvbuf + v->recv_displs[p] * es;
    c->recv_len[p] = v->recv_counts[p] * es;
    c->put[p] = ce_value(sig, v->send_counts[p]);
    c->want[p] = ce_value(sig, v->recv_counts[p]);
    const bool out = c->send_len[p] > c->slot;
    if (out || c->recv_len[p] > c->slot)
      return symm_error(SYMM_ERR_STATE, "symm_all_to_all_v: rank %d %s %llu bytes %s rank %d; "
                        "with the copy engines each pair of ranks has a slot of %llu bytes "
                        "(the collective scratch's staging / %d ranks), and all-to-all-v "
                        "does not grow the scratch: reserve more with "
                        "symm_comm_reserve_scratch; every rank fails this call", g->rank,
                        out ? "sends" : "receives", (unsigned long long)(out ? c->send_len[p]
                                                                              : c->recv_len[p]),
                        out ? "to" : "from", p, (unsigned long long)c->slot, g->size);
  }
  if (v->send_counts[g->rank] != v->recv_counts[g->rank])
    return symm_error(SYMM_ERR_MISMATCH, "symm_all_to_all_v: rank %d sends itself %zu elements "
                      "and expects %zu", g->rank, v->send_counts[g->rank],
                      v->recv_counts[g->rank]);
  return SYMM_SUCCESS;
}

/* Issues the call's copies and barriers (steps 1 to 5 above). */
static symm_result_t ce_issue(symm_comm_t *comm, symm_gpu_t *g, const symm_coll_params_t *base,
                              const ce_call_t *c, void *stream) {
  const int W = g->size, me = g->rank;
  SYMM_CHECK(ce_barrier(comm, g, base, c->put, c->want, stream));
  for (int k = 1; k <= W; k++) { /* the next rank first: ranks spread over their peers */
    const int p = (me + k) % W;
    SYMM_CHECK(gpu_copy(comm, ce_stage(base, p) + (uint64_t)me * c->slot, c->send_at[p],
                        c->send_len[p], stream));
  }
  SYMM_CHECK(ce_barrier(comm, g, base, c->put, c->want, stream));
  if (c->recv_whole)
    SYMM_CHECK(gpu_copy(comm, c->recv_at[0], ce_stage(base, me), c->recv_len[0], stream));
  for (int q = 0; !c->recv_whole && q < W; q++)
    SYMM_CHECK(gpu_copy(comm, c->recv_at[q], ce_stage(base, me) + (uint64_t)q * c->slot,
                        c->recv_len[q], stream));
  return ce_barrier(comm, g, base, c->put, c->want, stream);
}

/* A call of this rank that cannot run (refused here, after the core's
 * checks or the plan's) meets its peers' barriers with a value no call
 * has, so that they record SYMM_ERR_MISMATCH instead of waiting, and
 * copies nothing; it expects 0, which nobody puts, so that it records the
 * mismatch too. */
static symm_result_t ce_refuse(symm_comm_t *comm, symm_gpu_t *g, const symm_coll_params_t *base,
                               void *stream) {
  uint32_t put[SYMM_COLL_MAX_WORLD], want[SYMM_COLL_MAX_WORLD] = {0};
  for (int r = 0; r < SYMM_COLL_MAX_WORLD; r++) put[r] = SYMM_SIGNAL_CE_REFUSED;
  for (int k = 0; k < 2; k++) /* the three barriers of a call */
    SYMM_CHECK(ce_barrier(comm, g, base, put, want, stream));
  return ce_barrier(comm, g, base, put, want, stream);
}

symm_result_t gpu_ce_abstain(symm_comm_t *comm, const symm_coll_args_t *args) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  symm_coll_params_t base;
  SYMM_CHECK(gpu_coll_base(comm, g, 0, &base));
  return ce_refuse(comm, g, &base, args->stream);
}

symm_result_t gpu_ce_collective(symm_comm_t *comm, const symm_coll_args_t *args) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  const bool v = args->kind == SYMM_COLL_ALL_TO_ALL_V;
  /* Fixed sizes stage what this rank receives (W slots, the broadcast's
   * one), every rank alike, so the scratch grows at the same call
   * everywhere; all-to-all-v's needs differ by rank: never grown. */
  const uint64_t need = v ? 0 : args->recv_bytes;
  symm_coll_params_t base;
  SYMM_CHECK(gpu_coll_base(comm, g, (need + 1) / 2, &base));
  const uint64_t sig = symm_coll_signature(args);
  ce_call_t c;
  memset(&c, 0, sizeof c);
  if (v) {
    symm_result_t res = ce_plan_v(g, args, 2 * base.stage_half, sig, &c);
    if (res != SYMM_SUCCESS) {
      char saved[1024];
      snprintf(saved, sizeof saved, "%s", symm_last_error());
      (void)ce_refuse(comm, g, &base, args->stream);
      symm_error_restore(saved);
      return res;
    }
  } else {
    ce_plan_fixed(g, args, &c);
    for (int r = 0; r < g->size; r++) c.put[r] = c.want[r] = ce_value(sig, 0);
  }
  SYMM_TRACE(COLL, "%s: copy-engine %s, slots of %llu bytes", g->name,
             v ? "all-to-all-v" : "collective", (unsigned long long)c.slot);
  return ce_issue(comm, g, &base, &c, args->stream);
}
