/* Collectives: argument checks, algorithm choice, dispatch to the engine
 * of the communicator's memory (the scratch they stage in: scratch.c). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "symm_fault.h"

symm_result_t symm_comm_set_allreduce_algo(symm_comm_t *comm, symm_algo_t algo) {
  if (!comm || (unsigned)algo >= SYMM_ALGO_COUNT_)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_set_allreduce_algo: %s",
                      comm ? "algorithm out of range" : "comm is NULL");
  if (algo == SYMM_ALGO_CE)
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_comm_set_allreduce_algo: the copy engines "
                      "(ce) only copy, and an all-reduce reduces: ce runs all-gather, "
                      "broadcast and all-to-all(-v) (symm_comm_set_copy_algo)");
  comm->allreduce_algo = algo;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_set_copy_algo(symm_comm_t *comm, symm_algo_t algo) {
  if (!comm || (algo != SYMM_ALGO_AUTO && algo != SYMM_ALGO_CE))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_set_copy_algo: %s",
                      comm ? "algorithm is neither auto nor ce" : "comm is NULL");
  comm->copy_algo = algo;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_copy_algo(const symm_comm_t *comm, symm_algo_t *algo) {
  if (!comm || !algo)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_copy_algo: %s is NULL",
                      comm ? "algo" : "comm");
  *algo = comm->copy_algo;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_allreduce_algo(const symm_comm_t *comm, symm_algo_t *algo) {
  if (!comm || !algo)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_allreduce_algo: %s is NULL",
                      comm ? "algo" : "comm");
  *algo = comm->allreduce_algo;
  return SYMM_SUCCESS;
}

void symm_comm_set_async_error(symm_comm_t *comm, symm_result_t err, const char *fmt, ...) {
  if (comm->async_error) return; /* keep the first */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->async_msg, sizeof comm->async_msg, fmt, ap);
  va_end(ap);
  comm->async_error = (int)err;
}

symm_result_t symm_comm_check_async_error(symm_comm_t *comm) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_check_async_error: comm is NULL");
  if (comm->engine->poll_async_error) comm->engine->poll_async_error(comm);
  symm_result_t err = (symm_result_t)comm->async_error;
  if (err == SYMM_SUCCESS) return SYMM_SUCCESS;
  comm->async_error = 0;
  return symm_error(err, "%s", comm->async_msg);
}

uint64_t symm_coll_signature(const symm_coll_args_t *a) {
  /* Ranks that run different all-reduce algorithms would pair up different
   * buffers and phases: the algorithm is part of the call. */
  uint64_t algo = a->kind == SYMM_COLL_ALL_REDUCE || a->algo == SYMM_ALGO_CE ? (uint64_t)a->algo
                                                                             : 0;
  const symm_coll_v_t *v = a->kind == SYMM_COLL_ALL_TO_ALL_V ? a->v : NULL;
  uint64_t fields[8] = {(uint64_t)a->kind, (uint64_t)a->count, (uint64_t)a->dtype,
                        (uint64_t)a->op, (uint64_t)(int64_t)a->root, algo,
                        v ? (uint64_t)v->n_experts : 0, v ? (uint64_t)v->major_align : 0};
  uint64_t h = symm_hash64(fields, sizeof fields, 0x73796d6dull);
  return h != SYMM_COLL_SIG_REFUSED && h != SYMM_COLL_SIG_HOST_CALL ? h : 1;
}

/* The algorithm an all-reduce of `bytes` runs: the communicator's choice
 * (AUTO unless set), then what the engine makes of it (AUTO: its choice by
 * size and ranks; what it cannot run: its closest relative).  What runs,
 * not what was asked, goes into the call's signature: ranks that ask
 * differently but run the same kernel agree, ranks that run differently do
 * not. */
static symm_algo_t resolve_allreduce(symm_comm_t *comm, size_t bytes) {
  return comm->engine->allreduce_algo(comm, comm->allreduce_algo, bytes);
}

symm_result_t symm_comm_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes) {
  static const char fn[] = "symm_comm_scratch_bytes";
  if (!comm || !bytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn, comm ? "bytes" : "comm");
  SYMM_CHECK(comm->engine->scratch_bytes(comm, max_bytes, bytes));
  if (*bytes > (size_t)INT64_MAX) /* what symm_comm_reserve_scratch can allocate */
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %zu-byte buffers need more scratch than a "
                      "tensor can hold", fn, max_bytes);
  return SYMM_SUCCESS;
}

/* Whether the communicator's engine reduces dtype with op (both in range). */
static symm_result_t check_reducible(const symm_comm_t *comm, const char *fn, symm_dtype_t dtype,
                                     symm_redop_t op) {
  if (SYMM_OPS_HAS(comm->engine, 4, reduces) && comm->engine->reduces((symm_comm_t *)comm, dtype,
                                                                     op))
    return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the %s engine (%s backend) does not reduce %s with "
                    "%s; the host backend reduces every dtype with every op", fn,
                    comm->engine->name, comm->ops->name, symm_dtype_name(dtype),
                    symm_redop_name(op));
}

/* count x esize in *bytes, refused when that, or world times it (what
 * all-gather and the staging of reduce-scatter and all-to-all hold), does
 * not fit a size_t. */
static symm_result_t count_bytes(const symm_comm_t *comm, const char *fn, size_t count,
                                 size_t esize, size_t *bytes) {
  if (__builtin_mul_overflow(count, esize, bytes) ||
      __builtin_mul_overflow(*bytes, (size_t)comm->size, &(size_t){0}))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  return SYMM_SUCCESS;
}

symm_result_t symm_all_reduce_algo(symm_comm_t *comm, size_t count, symm_dtype_t dtype,
                                   symm_algo_t *algo) {
  static const char fn[] = "symm_all_reduce_algo";
  if (!comm || !algo)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn, comm ? "algo" : "comm");
  size_t bytes;
  if (!symm_dtype_size(dtype))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: bad dtype %d", fn, (int)dtype);
  SYMM_CHECK(check_reducible(comm, fn, dtype, SYMM_REDUCE_SUM));
  SYMM_CHECK(count_bytes(comm, fn, count, symm_dtype_size(dtype), &bytes));
  *algo = resolve_allreduce(comm, bytes);
  return SYMM_SUCCESS;
}

/* The core's checks of one call's arguments on this rank; fills in the
 * byte counts and, for all-reduce, the algorithm that runs. */
static symm_result_t check_args(symm_comm_t *comm, symm_coll_args_t *a, const char *fn) {
  size_t esize = symm_dtype_size(a->dtype);
  if (!esize) return symm_error(SYMM_ERR_INVALID_ARG, "%s: bad dtype %d", fn, (int)a->dtype);
  const bool reduces = symm_coll_reduces(a->kind);
  if (reduces && (unsigned)a->op >= SYMM_REDUCE_COUNT_)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: bad reduction %d", fn, (int)a->op);
  if (reduces) SYMM_CHECK(check_reducible(comm, fn, a->dtype, a->op));
  if (a->kind == SYMM_COLL_BROADCAST && (a->root < 0 || a->root >= comm->size))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: root %d out of range [0, %d)", fn, a->root,
                      comm->size);
  if (a->kind == SYMM_COLL_ALL_TO_ALL_V) return symm_coll_v_check(comm, a, fn);
  if (a->count && (!a->recvbuf || (!a->sendbuf && !(a->kind == SYMM_COLL_BROADCAST &&
                                                     comm->rank != a->root))))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: NULL buffer", fn);
  size_t world = (size_t)comm->size, bytes;
  SYMM_CHECK(count_bytes(comm, fn, a->count, esize, &bytes));
  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
    case SYMM_COLL_BROADCAST: a->send_bytes = a->recv_bytes = bytes; break;
    case SYMM_COLL_ALL_GATHER: a->send_bytes = bytes; a->recv_bytes = bytes * world; break;
    case SYMM_COLL_REDUCE_SCATTER: a->send_bytes = bytes * world; a->recv_bytes = bytes; break;
    case SYMM_COLL_ALL_TO_ALL: a->send_bytes = a->recv_bytes = bytes * world; break;
    case SYMM_COLL_ALL_TO_ALL_V: break; /* symm_coll_v_check */
  }
  if (a->kind == SYMM_COLL_ALL_REDUCE) a->algo = resolve_allreduce(comm, bytes);
  if (!comm->caps.takes_stream && a->stream)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the %s backend takes no stream (pass NULL)", fn,
                      comm->ops->name);
  return SYMM_SUCCESS;
}

/* A call that failed check_args with `err` on this rank.  It still uses up
 * its sequence number, so that this rank's next call pairs with the peers'
 * next call, not with this one.  The rank also takes part in this call's
 * agreement (engine->abstain) with a descriptor no valid call has, and its peers fail with SYMM_ERR_MISMATCH.
 * Buffers are never touched; the result is `err` whatever the agreement
 * gave. */
static symm_result_t abstain(symm_comm_t *comm, symm_coll_args_t *a, symm_result_t err,
                             const char *fn) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  a->seq = comm->call.seq;
  a->send_bytes = a->recv_bytes = 0;
  SYMM_TRACE(COLL, "%s #%llu: refused here (%s)", fn, (unsigned long long)a->seq, saved);
  symm_result_t res = comm->engine->abstain(comm, a);
  if (res != SYMM_SUCCESS)
    SYMM_INFO(COLL, "%s #%llu: telling the peers failed: %s", fn, (unsigned long long)a->seq,
              symm_last_error());
  return symm_error(err, "%s", saved);
}

/* Whether collective `kind` only moves data (what SYMM_ALGO_CE runs). */
static bool moves_only(symm_coll_kind_t kind) {
  return kind == SYMM_COLL_ALL_GATHER || kind == SYMM_COLL_BROADCAST ||
         kind == SYMM_COLL_ALL_TO_ALL || kind == SYMM_COLL_ALL_TO_ALL_V;
}

/* The copy engines, where asked for a collective that moves data: in
 * a->algo (SYMM_ALGO_CE) when the engine has them; an engine without
 * them (the CPU's, whose copies are the thread's memcpy) runs its own. */
static void pick_copy_algo(const symm_comm_t *comm, symm_coll_args_t *a) {
  if (comm->copy_algo == SYMM_ALGO_CE && moves_only(a->kind) &&
      SYMM_OPS_HAS(comm->engine, 6, ce_collective))
    a->algo = SYMM_ALGO_CE;
}

/* Some peer is not load/store reachable: the provider's own collective, if
 * the backend has one. */
static symm_result_t run_provider(symm_comm_t *comm, symm_coll_args_t *a, const char *fn) {
  symm_result_t res = check_args(comm, a, fn);
  if (res != SYMM_SUCCESS) return res;
  char who[256];
  symm_comm_unreachable_list(comm, who, sizeof who);
  if (comm->copy_algo == SYMM_ALGO_CE && moves_only(a->kind)) /* never another algorithm */
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the copy engines (copy algorithm ce) write "
                      "the peers' memory, and %s not load/store reachable from rank %d with "
                      "the %s backend; symm_comm_set_copy_algo(comm, SYMM_ALGO_AUTO) runs the "
                      "backend's own collectives", fn, who, comm->rank, comm->ops->name);
  if (a->kind == SYMM_COLL_ALL_TO_ALL_V) /* providers take no device-side counts */
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: %s not load/store reachable from rank %d; "
                      "the %s backend's own collectives do not run all-to-all-v", fn, who,
                      comm->rank, comm->ops->name);
  if (SYMM_OPS_HAS(comm->ops, 2, collective)) return comm->ops->collective(comm, a);
  return symm_error(SYMM_ERR_UNSUPPORTED, "%s: %s not load/store reachable from rank %d with "
                    "the %s backend, which runs no collectives of its own", fn, who,
                    comm->rank, comm->ops->name);
}

/* What SYMM_ALGO_CE cannot run, refused with the reason (never another
 * algorithm in its place): the device-split all-to-all-v forms, whose
 * counts the host would have to read back (a synchronisation, which a
 * graph could not capture). */
static symm_result_t check_ce(const symm_comm_t *comm, const symm_coll_args_t *a,
                              const char *fn) {
  if (a->algo != SYMM_ALGO_CE || a->kind != SYMM_COLL_ALL_TO_ALL_V || a->v->mode == SYMM_V_HOST)
    return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the copy engines (copy algorithm ce) take their "
                    "sizes from the host, and this call's counts are in device memory that "
                    "the host would have to wait for; use symm_all_to_all_v, or "
                    "symm_comm_set_copy_algo(comm, SYMM_ALGO_AUTO) on the %s backend", fn,
                    comm->ops->name);
}

/* One rank: every fixed-size collective (any op of one value is that
 * value, avg included) is its input: nothing in place, one stream-ordered
 * copy out of place, no kernel, no scratch. */
static symm_result_t run_alone(symm_comm_t *comm, const symm_coll_args_t *a) {
  if (!a->recv_bytes || a->recvbuf == a->sendbuf) return SYMM_SUCCESS;
  return comm->engine->copy(comm, a->recvbuf, a->sendbuf, a->recv_bytes, a->stream);
}

/* A buffer inside this rank's data of a rendezvoused tensor whose peers
 * are mapped on use gets every peer mapped, so that the engine may read
 * the peers' copies where they lie (zero copy).  A mapping that fails
 * leaves the tensor's peer signature 0, and the call stages its data
 * instead: nothing fails here.  A buffer that needs nothing (any more) is
 * remembered until the next rendezvous, so that calls on the same buffers
 * skip the registry's lock and search (two a call). */
static void map_peers_of_buffer(symm_comm_t *comm, const void *buf, int slot) {
  const void *base;
  size_t len;
  symm_tensor_t *t;
  int r;
  if (!comm->map_on_use || !comm->caps.map_on_use) return; /* every tensor maps at rendezvous */
  if (!buf) return;
  if (comm->settled_seq != comm->rendezvous_seq) {
    comm->settled[0] = comm->settled[1] = NULL;
    comm->settled_seq = comm->rendezvous_seq;
  }
  if (buf == comm->settled[slot]) return;
  if (symm_registry_find(buf, &base, &len, &t, &r) && r == comm->rank && t->comm == comm &&
      t->rendezvoused && t->on_use && !t->all_mapped) {
    if (symm_tensor_map_peers(t) != SYMM_SUCCESS) symm_error_clear();
    if (!t->all_mapped) return; /* tried again at the next call */
  }
  comm->settled[slot] = buf;
}

static symm_result_t run_checked(symm_comm_t *comm, symm_coll_args_t *a, const char *fn) {
  if (comm->unreachable) return run_provider(comm, a, fn);
  pick_copy_algo(comm, a);
  symm_result_t res = check_args(comm, a, fn);
  if (res == SYMM_SUCCESS) res = check_ce(comm, a, fn);
  if (res != SYMM_SUCCESS && a->algo == SYMM_ALGO_CE && a->kind == SYMM_COLL_ALL_TO_ALL_V &&
      a->v->mode != SYMM_V_HOST)
    a->algo = SYMM_ALGO_AUTO; /* its peers run the kernel or refuse alike */
  if (res != SYMM_SUCCESS) return comm->size == 1 ? res : abstain(comm, a, res, fn);
  /* The engine sizes and grows the scratch itself (host: after the ranks
   * agreed on the call, so a mismatched rank never grows it alone). */
  symm_fault_point(SYMM_FAULT_COLLECTIVE, comm->rank);
  a->seq = comm->call.seq;
  if (comm->size == 1 && a->kind != SYMM_COLL_ALL_TO_ALL_V && SYMM_OPS_HAS(comm->engine, 5, copy))
    return run_alone(comm, a);
  map_peers_of_buffer(comm, a->sendbuf, 0);
  map_peers_of_buffer(comm, a->recvbuf, 1);
  SYMM_TRACE(COLL, "%s #%llu: %zu x %s %s algo %s", fn, (unsigned long long)a->seq, a->count,
             symm_dtype_name(a->dtype), symm_coll_reduces(a->kind) ? symm_redop_name(a->op) : "-",
             symm_algo_name(a->algo));
  if (a->algo == SYMM_ALGO_CE) return comm->engine->ce_collective(comm, a);
  return comm->engine->collective(comm, a);
}

symm_result_t symm_coll_run(symm_comm_t *comm, symm_coll_args_t *a, const char *fn) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  symm_call_begin_collective(comm, fn, a);
  symm_result_t res = run_checked(comm, a, fn);
  symm_call_end(comm);
  return res;
}

symm_result_t symm_all_reduce(symm_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              symm_dtype_t dtype, symm_redop_t op, symm_stream_t stream) {
  symm_coll_args_t a = {SYMM_COLL_ALL_REDUCE, sendbuf, recvbuf, count, 0, 0, dtype, op, 0,
                        SYMM_ALGO_AUTO, stream, 0};
  return symm_coll_run(comm, &a, "symm_all_reduce");
}

symm_result_t symm_all_gather(symm_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              symm_dtype_t dtype, symm_stream_t stream) {
  symm_coll_args_t a = {SYMM_COLL_ALL_GATHER, sendbuf, recvbuf, count, 0, 0, dtype,
                        SYMM_REDUCE_SUM, 0, SYMM_ALGO_AUTO, stream, 0};
  return symm_coll_run(comm, &a, "symm_all_gather");
}

symm_result_t symm_reduce_scatter(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, symm_dtype_t dtype, symm_redop_t op,
                                  symm_stream_t stream) {
  symm_coll_args_t a = {SYMM_COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, 0, 0, dtype, op, 0,
                        SYMM_ALGO_AUTO, stream, 0};
  return symm_coll_run(comm, &a, "symm_reduce_scatter");
}

symm_result_t symm_broadcast(symm_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             symm_dtype_t dtype, int root, symm_stream_t stream) {
  symm_coll_args_t a = {SYMM_COLL_BROADCAST, sendbuf, recvbuf, count, 0, 0, dtype,
                        SYMM_REDUCE_SUM, root, SYMM_ALGO_AUTO, stream, 0};
  return symm_coll_run(comm, &a, "symm_broadcast");
}

symm_result_t symm_all_to_all(symm_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              symm_dtype_t dtype, symm_stream_t stream) {
  symm_coll_args_t a = {SYMM_COLL_ALL_TO_ALL, sendbuf, recvbuf, count, 0, 0, dtype,
                        SYMM_REDUCE_SUM, 0, SYMM_ALGO_AUTO, stream, 0};
  return symm_coll_run(comm, &a, "symm_all_to_all");
}

/* ------------------------------------------------------- all-to-all-v */

#define STACK_RANKS 64

static symm_result_t run_v(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                           symm_dtype_t dtype, symm_coll_v_t *v, symm_stream_t stream,
                           const char *fn) {
  symm_coll_args_t a = {SYMM_COLL_ALL_TO_ALL_V, sendbuf, recvbuf, v->row_elems, 0, 0, dtype,
                        SYMM_REDUCE_SUM, (int)v->mode, SYMM_ALGO_AUTO, stream, 0, v};
  return symm_coll_run(comm, &a, fn);
}

/* Packed displacements of counts (exclusive prefix sums), or the
 * caller's; an overflowing sum is left for the extent check to find. */
static const size_t *displs_or_packed(const size_t *displs, const size_t *counts, int world,
                                      size_t *packed) {
  if (displs || !counts) return displs ? displs : packed;
  size_t at = 0;
  for (int p = 0; p < world; p++) {
    packed[p] = at;
    at += counts[p];
  }
  return packed;
}

symm_result_t symm_all_to_all_v(symm_comm_t *comm, const void *sendbuf,
                                const size_t *send_counts, const size_t *send_displs,
                                void *recvbuf, const size_t *recv_counts,
                                const size_t *recv_displs, symm_dtype_t dtype,
                                symm_stream_t stream) {
  static const char fn[] = "symm_all_to_all_v";
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  const int w = comm->size;
  size_t stack[2 * STACK_RANKS] = {0};
  size_t *packed = w <= STACK_RANKS ? stack : calloc(2 * (size_t)w, sizeof *packed);
  if (!packed) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", fn);
  symm_coll_v_t v = {.mode = SYMM_V_HOST, .send_counts = send_counts, .recv_counts = recv_counts,
                     .row_elems = 1, .n_experts = 1, .major_align = 1};
  v.send_displs = displs_or_packed(send_displs, send_counts, w, packed);
  v.recv_displs = displs_or_packed(recv_displs, recv_counts, w, packed + w);
  symm_result_t res = run_v(comm, sendbuf, recvbuf, dtype, &v, stream, fn);
  if (packed != stack) free(packed);
  return res;
}

symm_result_t symm_all_to_all_vdev(symm_comm_t *comm, const void *sendbuf, size_t send_rows,
                                   void *recvbuf, size_t recv_rows, size_t row_elems,
                                   symm_dtype_t dtype, const int64_t *in_splits,
                                   int64_t *out_splits_offsets, symm_stream_t stream) {
  symm_coll_v_t v = {.mode = SYMM_V_DEV, .in_splits = in_splits,
                     .out_splits_offsets = out_splits_offsets, .row_elems = row_elems,
                     .send_rows = send_rows, .recv_rows = recv_rows, .n_experts = 1,
                     .major_align = 1};
  return run_v(comm, sendbuf, recvbuf, dtype, &v, stream, "symm_all_to_all_vdev");
}

symm_result_t symm_all_to_all_vdev_2d(symm_comm_t *comm, const void *sendbuf, size_t send_rows,
                                      void *recvbuf, size_t recv_rows, size_t row_elems,
                                      symm_dtype_t dtype, const int64_t *in_splits,
                                      int64_t *out_splits_offsets, int n_experts,
                                      size_t major_align, symm_stream_t stream) {
  symm_coll_v_t v = {.mode = SYMM_V_DEV_2D, .in_splits = in_splits,
                     .out_splits_offsets = out_splits_offsets, .row_elems = row_elems,
                     .send_rows = send_rows, .recv_rows = recv_rows, .n_experts = n_experts,
                     .major_align = major_align};
  return run_v(comm, sendbuf, recvbuf, dtype, &v, stream, "symm_all_to_all_vdev_2d");
}

symm_result_t symm_all_to_all_vdev_2d_combine(symm_comm_t *comm, const void *sendbuf,
                                              size_t send_rows, void *recvbuf, size_t recv_rows,
                                              size_t row_elems, symm_dtype_t dtype,
                                              const int64_t *in_splits_offsets,
                                              int64_t *out_splits_offsets, int n_experts,
                                              symm_stream_t stream) {
  symm_coll_v_t v = {.mode = SYMM_V_DEV_2D_COMBINE, .in_splits = in_splits_offsets,
                     .out_splits_offsets = out_splits_offsets, .row_elems = row_elems,
                     .send_rows = send_rows, .recv_rows = recv_rows, .n_experts = n_experts,
                     .major_align = 1};
  return run_v(comm, sendbuf, recvbuf, dtype, &v, stream, "symm_all_to_all_vdev_2d_combine");
}
