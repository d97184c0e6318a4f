/*
 * Copy-engine collectives (SYMM_ALGO_CE): all-gather, broadcast,
 * all-to-all and all-to-all-v with host counts, moved by cuMemcpyAsync
 * on the caller's stream, so that no SM moves data and a kernel beside
 * them (a GEMM) keeps every SM.
 *
 * Direct path.  Where the buffer that holds every rank's pieces lies in a
 * rendezvoused tensor at the same offset on every rank (all-gather and
 * broadcast: recvbuf, else for all-gather sendbuf; all-to-all: sendbuf),
 * a call is, in stream order on every rank:
 *   0. the copy of this rank's own piece into its recvbuf, where the
 *      peers will read it (all-gather out of place, broadcast's root out
 *      of place; nothing in place);
 *   1. a barrier (symm_signal_op, SYMM_SIGNAL_OP_CE, one block): every
 *      rank reached the call, so its piece is in place and its earlier
 *      stream work on the buffers is done;
 *   2. one copy per source rank, straight from that rank's buffer (its
 *      mapping here) into this rank's recvbuf: no staging, no size cap;
 *   3. a second barrier: no peer reads this rank's buffers any more, so
 *      the caller may reuse them once the call is done;
 *   4. the staged path's third barrier (below), so that every call meets
 *      three, whatever path each rank took.
 * Every rank pulls: it writes its own recvbuf and nothing else, so ranks
 * that disagree (one passes the symmetric buffer, another ordinary memory
 * or another offset) can only spoil their own recvbuf, never memory a peer
 * did not hand to the call; the barriers report the disagreement.
 * All-to-all-v stays staged (a receiver does not know where in the
 * sender's buffer its rows lie), and so do buffers that overlap in a way
 * that a pull would read what this rank overwrites.
 *
 * Staged path, for every other call:
 *   1. the barrier above: every rank's scratch is free to be written (no
 *      late peer still reads what an earlier collective staged there);
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
 * Staging in the scratch keeps every write of a call inside library memory
 * and the caller's own buffers, whatever a peer passes, and lets sendbuf
 * and recvbuf overlap (every read of sendbuf comes before the second
 * barrier, every write of recvbuf after).
 *
 * The barriers carry values: every rank puts, for peer p, a hash of its
 * call's signature and of its path (staged, or direct and where: the
 * tensor and offset), and for all-to-all-v of what it sends p, and checks
 * what p put against what it expects (the signature and path; all-to-all-v:
 * of what it receives from p), so ranks whose calls or paths differ record
 * SYMM_ERR_MISMATCH (symm_comm_check_async_error).  The host cannot skip
 * the copies it has issued, so recvbuf is then undefined; writes still
 * stay inside the scratch and each rank's own recvbuf.  The slots of the
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

/* One cuMemcpyAsync of a call (none when len is 0). */
typedef struct ce_copy {
  char *dst;
  const char *src;
  uint64_t len;
} ce_copy_t;

/* What one call copies: `pre` before the first barrier, mid[p] (the copy
 * to or from rank p) between the barriers, post[0 .. nposts) after the
 * second; slot: the staged slot size; put / want: the barriers' values. */
typedef struct ce_call {
  ce_copy_t pre;
  ce_copy_t mid[SYMM_COLL_MAX_WORLD];
  ce_copy_t post[SYMM_COLL_MAX_WORLD];
  int nposts;
  uint64_t slot;
  uint32_t put[SYMM_COLL_MAX_WORLD], want[SYMM_COLL_MAX_WORLD];
} ce_call_t;

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static bool ce_overlap(const void *a, uint64_t an, const void *b, uint64_t bn) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}

/* The direct paths' tags, mixed into the key so that ranks that read
 * the same tensor and offset for different reasons do not agree. */
enum { CE_FROM_RECV = 1, CE_FROM_SEND = 2 };

static uint64_t ce_key(uint64_t range_key, uint64_t from) {
  uint64_t f[2] = {range_key, from};
  return symm_hash64(f, sizeof f, 0x63655f64ull) | 1u; /* 0 is the staged path's */
}

/* All-gather's direct plan: every piece read from its owner's recvbuf
 * slot (its own piece copied there first unless in place), or, where
 * only sendbuf is symmetric, from the owner's sendbuf. */
static uint64_t ce_direct_gather(symm_comm_t *comm, const symm_gpu_t *g,
                                 const symm_coll_args_t *a, uint64_t b, ce_call_t *c) {
  const int W = g->size, me = g->rank;
  const char *send = a->sendbuf;
  char *recv = a->recvbuf;
  uint64_t peer[SYMM_COLL_MAX_WORLD], key;
  const bool in_place = send == recv + (uint64_t)me * b;
  if (!in_place && ce_overlap(send, b, recv, W * b)) return 0;
  const bool from_recv = gpu_coll_symm_range(comm, g, recv, W * b, peer, &key);
  if (!from_recv && !gpu_coll_symm_range(comm, g, send, b, peer, &key)) return 0;
  for (int p = 0; p < W; p++) {
    const char *src = (const char *)(uintptr_t)peer[p] + (from_recv ? (uint64_t)p * b : 0);
    c->mid[p] = (ce_copy_t){recv + (uint64_t)p * b, p == me ? send : src, b};
  }
  if (from_recv) { /* the own piece goes where the peers read it, first */
    c->pre = c->mid[me];
    c->mid[me].len = 0;
    if (in_place) c->pre.len = 0;
  }
  return ce_key(key, from_recv ? CE_FROM_RECV : CE_FROM_SEND);
}

/* Broadcast's direct plan: the root's piece in its recvbuf (copied there
 * first unless in place), which every other rank reads. */
static uint64_t ce_direct_bcast(symm_comm_t *comm, const symm_gpu_t *g,
                                const symm_coll_args_t *a, uint64_t b, ce_call_t *c) {
  const bool root = g->rank == a->root;
  uint64_t peer[SYMM_COLL_MAX_WORLD], key;
  if (root && a->sendbuf != a->recvbuf && ce_overlap(a->sendbuf, b, a->recvbuf, b)) return 0;
  if (!gpu_coll_symm_range(comm, g, a->recvbuf, b, peer, &key)) return 0;
  if (root) c->pre = (ce_copy_t){a->recvbuf, a->sendbuf, a->sendbuf == a->recvbuf ? 0 : b};
  else c->mid[a->root] = (ce_copy_t){a->recvbuf, (const char *)(uintptr_t)peer[a->root], b};
  return ce_key(key, CE_FROM_RECV);
}

/* All-to-all's direct plan: piece p read from rank p's sendbuf, where it
 * lies at this rank's number; recvbuf apart from sendbuf, which the
 * peers read while this rank writes recvbuf. */
static uint64_t ce_direct_a2a(symm_comm_t *comm, const symm_gpu_t *g, const symm_coll_args_t *a,
                              uint64_t b, ce_call_t *c) {
  const int W = g->size, me = g->rank;
  uint64_t peer[SYMM_COLL_MAX_WORLD], key;
  if (ce_overlap(a->sendbuf, W * b, a->recvbuf, W * b) ||
      !gpu_coll_symm_range(comm, g, a->sendbuf, W * b, peer, &key))
    return 0;
  for (int p = 0; p < W; p++)
    c->mid[p] = (ce_copy_t){(char *)a->recvbuf + (uint64_t)p * b,
                            (const char *)(uintptr_t)peer[p] + (uint64_t)me * b, b};
  return ce_key(key, CE_FROM_SEND);
}

/* The direct plan of a fixed-size call, if its buffers allow one: its
 * key (never 0), else 0 and nothing planned. */
static uint64_t ce_plan_direct(symm_comm_t *comm, const symm_gpu_t *g, const symm_coll_args_t *a,
                               ce_call_t *c) {
  const uint64_t b = a->count * symm_dtype_size(a->dtype);
  uint64_t key = 0;
  if (!b) return 0;
  switch (a->kind) {
    case SYMM_COLL_ALL_GATHER: key = ce_direct_gather(comm, g, a, b, c); break;
    case SYMM_COLL_BROADCAST: key = ce_direct_bcast(comm, g, a, b, c); break;
    case SYMM_COLL_ALL_TO_ALL: key = ce_direct_a2a(comm, g, a, b, c); break;
    default: break;
  }
  if (!key) memset(c, 0, sizeof *c);
  return key;
}

/* The fixed-size collectives' staged plan: slots of b bytes, recvbuf
 * filled from the staging in one copy (broadcast: the root's one slot). */
static void ce_plan_staged(const symm_gpu_t *g, const symm_coll_args_t *a,
                           const symm_coll_params_t *base, ce_call_t *c) {
  const uint64_t b = a->count * symm_dtype_size(a->dtype), W = (uint64_t)g->size;
  const char *send = a->sendbuf;
  const bool bcast = a->kind == SYMM_COLL_BROADCAST, root = g->rank == a->root;
  c->slot = bcast ? 0 : b;
  c->nposts = 1;
  c->post[0] = (ce_copy_t){a->recvbuf, ce_stage(base, g->rank), bcast ? b : W * b};
  for (int p = 0; p < g->size; p++)
    c->mid[p] = (ce_copy_t){ce_stage(base, p) + (uint64_t)g->rank * c->slot,
                            a->kind == SYMM_COLL_ALL_TO_ALL ? send + (uint64_t)p * b : send,
                            !bcast || root ? b : 0};
}

/* All-to-all-v's plan: slots of an equal share of the staging (the same
 * on every rank: the scratch is), chunks that do not fit refused here. */
static symm_result_t ce_plan_v(const symm_gpu_t *g, const symm_coll_args_t *a,
                               const symm_coll_params_t *base, uint64_t sig, ce_call_t *c) {
  const symm_coll_v_t *v = a->v;
  const uint64_t es = symm_dtype_size(a->dtype);
  c->slot = 2 * base->stage_half / (uint64_t)g->size & ~(uint64_t)255;
  c->nposts = g->size;
  for (int p = 0; p < g->size; p++) {
    c->mid[p] = (ce_copy_t){ce_stage(base, p) + (uint64_t)g->rank * c->slot,
                            (const char *)a->sendbuf + v->send_displs[p] * es,
                            v->send_counts[p] * es};
    c->post[p] = (ce_copy_t){(char *)a->recvbuf + v->recv_displs[p] * es,
                             ce_stage(base, g->rank) + (uint64_t)p * c->slot,
                             v->recv_counts[p] * es};
    c->put[p] = ce_value(sig, v->send_counts[p]);
    c->want[p] = ce_value(sig, v->recv_counts[p]);
    const bool out = c->mid[p].len > c->slot;
    if (out || c->post[p].len > c->slot)
      return symm_error(SYMM_ERR_STATE, "symm_all_to_all_v: rank %d %s %llu bytes %s rank %d; "
                        "with the copy engines each pair of ranks has a slot of %llu bytes "
                        "(the collective scratch's staging / %d ranks), and all-to-all-v "
                        "does not grow the scratch: reserve more with "
                        "symm_comm_reserve_scratch; every rank fails this call", g->rank,
                        out ? "sends" : "receives",
                        (unsigned long long)(out ? c->mid[p].len : c->post[p].len),
                        out ? "to" : "from", p, (unsigned long long)c->slot, g->size);
  }
  if (v->send_counts[g->rank] != v->recv_counts[g->rank])
    return symm_error(SYMM_ERR_MISMATCH, "symm_all_to_all_v: rank %d sends itself %zu elements "
                      "and expects %zu", g->rank, v->send_counts[g->rank],
                      v->recv_counts[g->rank]);
  return SYMM_SUCCESS;
}

/* Issues the call's copies and barriers (the steps above).  Every call
 * meets three barriers, whatever its path, so that ranks whose paths
 * differ (a mismatch) stay in step for the next call; the direct path's
 * third has nothing to wait for but costs one signal block. */
static symm_result_t ce_issue(symm_comm_t *comm, symm_gpu_t *g, const symm_coll_params_t *base,
                              const ce_call_t *c, void *stream) {
  const int W = g->size, me = g->rank;
  SYMM_CHECK(gpu_copy(comm, c->pre.dst, c->pre.src, c->pre.len, stream));
  SYMM_CHECK(ce_barrier(comm, g, base, c->put, c->want, stream));
  for (int k = 1; k <= W; k++) { /* the next rank first: ranks spread over their peers */
    const ce_copy_t *m = &c->mid[(me + k) % W];
    SYMM_CHECK(gpu_copy(comm, m->dst, m->src, m->len, stream));
  }
  SYMM_CHECK(ce_barrier(comm, g, base, c->put, c->want, stream));
  for (int q = 0; q < c->nposts; q++)
    SYMM_CHECK(gpu_copy(comm, c->post[q].dst, c->post[q].src, c->post[q].len, stream));
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

/* A call refused on this rank with res (its message kept), after meeting
 * its peers' barriers as refused. */
static symm_result_t ce_refused(symm_comm_t *comm, symm_gpu_t *g, const symm_coll_params_t *base,
                                void *stream, symm_result_t res) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  (void)ce_refuse(comm, g, base, stream);
  symm_error_restore(saved);
  return res;
}

symm_result_t gpu_ce_collective(symm_comm_t *comm, const symm_coll_args_t *args) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  const bool v = args->kind == SYMM_COLL_ALL_TO_ALL_V;
  const uint64_t sig = symm_coll_signature(args);
  ce_call_t c;
  memset(&c, 0, sizeof c);
  const uint64_t direct = v ? 0 : ce_plan_direct(comm, g, args, &c);
  /* Staged fixed sizes stage what this rank receives (W slots, the
   * broadcast's one), every rank alike, so the scratch grows at the same
   * call everywhere; the direct path and all-to-all-v (whose needs differ
   * by rank) never grow it. */
  const uint64_t need = v || direct ? 0 : args->recv_bytes;
  symm_coll_params_t base;
  SYMM_CHECK(gpu_coll_base(comm, g, (need + 1) / 2, &base));
  if (v) {
    symm_result_t res = ce_plan_v(g, args, &base, sig, &c);
    if (res != SYMM_SUCCESS) return ce_refused(comm, g, &base, args->stream, res);
  } else {
    if (!direct) ce_plan_staged(g, args, &base, &c);
    for (int r = 0; r < g->size; r++) c.put[r] = c.want[r] = ce_value(sig, direct);
  }
  SYMM_TRACE(COLL, "%s: copy-engine %s, %s", g->name, v ? "all-to-all-v" : "collective",
             direct ? "direct from the peers' buffers" : "staged in the scratch");
  return ce_issue(comm, g, &base, &c, args->stream);
}
