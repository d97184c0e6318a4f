/*
 * The provider's own collectives, which the core runs instead of the GPU
 * engine's when some peer is not load/store reachable: NVSHMEM's
 * on-stream team operations over NVSHMEM_TEAM_WORLD (PE = rank).
 *
 * NVSHMEM's collectives need symmetric buffers, and the caller's are any
 * memory of this rank's device, so every call is staged through the
 * communicator's scratch tensor (symmetric: every rank allocates it in the
 * same collective call): nvshmemx_putmem_on_stream to this PE copies the
 * input in, the collective runs from it into the output area, and
 * nvshmemx_getmem_on_stream copies that out, all on the caller's stream.
 * Consecutive calls alternate between two halves of the staging area, so
 * that a peer already in the next call never writes where this rank still
 * reads the last one's output.  The GPU engine runs no collective of this
 * communicator (every one comes here), so the whole scratch is ours.
 * The scratch grows collectively, with the core's mismatch check; a call
 * whose count differs between ranks within the reserved size is not caught
 * here (NVSHMEM's would wait on each other).
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdio.h>
#include <string.h>

#include "backends/nvshmem/nvshmem.h"

#define NVSH_STAGE_ALIGN ((size_t)256)

/* The index of a reducible dtype in nvsh_lib_t's reduction tables. */
static int nvsh_type_index(symm_dtype_t dt) {
  switch (dt) {
    case SYMM_DTYPE_F32: return 0;
    case SYMM_DTYPE_BF16: return 1;
    case SYMM_DTYPE_F16: return 2;
    case SYMM_DTYPE_I32: return 3;
    default: return -1;
  }
}

/* Writes "ranks 1, 3" (the peers this rank cannot load and store). */
static void nvsh_unreachable_list(const nvsh_state_t *st, char *out, size_t cap) {
  int n = 0;
  for (int r = 0; r < st->size; r++) n += !st->reachable[r];
  size_t used = (size_t)snprintf(out, cap, "rank%s", n > 1 ? "s" : "");
  for (int r = 0, k = 0; r < st->size && used < cap; r++)
    if (!st->reachable[r])
      used += (size_t)snprintf(out + used, cap - used, "%s %d", k++ ? "," : "", r);
}

/* The entry point kind `a` needs, NULL (name in *fn) where the library
 * lacks it. */
static void *nvsh_coll_entry(const nvsh_lib_t *lib, const symm_coll_args_t *a, char *fn,
                             size_t cap) {
  int t = nvsh_type_index(a->dtype), op = (int)a->op;
  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
    case SYMM_COLL_REDUCE_SCATTER: {
      const bool all = a->kind == SYMM_COLL_ALL_REDUCE;
      snprintf(fn, cap, "nvshmemx_%s_%s_%s_on_stream", nvsh_type_name(t), nvsh_op_name(op),
               all ? "reduce" : "reducescatter");
      if (t < 0 || op < 0 || op >= NVSH_RED_OPS) return NULL;
      return (void *)(all ? lib->reduce[op][t] : lib->reducescatter[op][t]);
    }
    case SYMM_COLL_ALL_GATHER:
      snprintf(fn, cap, "nvshmemx_fcollectmem_on_stream");
      return (void *)lib->fcollectmem_on_stream;
    case SYMM_COLL_BROADCAST:
      snprintf(fn, cap, "nvshmemx_broadcastmem_on_stream");
      return (void *)lib->broadcastmem_on_stream;
    case SYMM_COLL_ALL_TO_ALL:
      snprintf(fn, cap, "nvshmemx_alltoallmem_on_stream");
      return (void *)lib->alltoallmem_on_stream;
    case SYMM_COLL_ALL_TO_ALL_V: break; /* the core never hands it to a provider */
  }
  snprintf(fn, cap, "a collective of kind %d", (int)a->kind);
  return NULL;
}

/* The collective itself, from src into dst (symmetric), on stream. */
static int nvsh_coll_run(const nvsh_state_t *st, const symm_coll_args_t *a, void *entry,
                         void *dst, const void *src, void *stream) {
  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
    case SYMM_COLL_REDUCE_SCATTER:
      return ((nvsh_reduce_fn)entry)(NVSH_TEAM_WORLD, dst, src, a->count, stream);
    case SYMM_COLL_ALL_GATHER:
      return st->lib->fcollectmem_on_stream(NVSH_TEAM_WORLD, dst, src, a->send_bytes, stream);
    case SYMM_COLL_BROADCAST:
      return st->lib->broadcastmem_on_stream(NVSH_TEAM_WORLD, dst, src, a->send_bytes, a->root,
                                             stream);
    case SYMM_COLL_ALL_TO_ALL:
      return st->lib->alltoallmem_on_stream(NVSH_TEAM_WORLD, dst, src,
                                            a->send_bytes / (size_t)st->size, stream);
    case SYMM_COLL_ALL_TO_ALL_V: break;
  }
  return -1;
}

symm_result_t nvsh_collective(symm_comm_t *comm, const symm_coll_args_t *a) {
  nvsh_state_t *st = symm_backend_state(comm);
  char fn[96], who[256];
  void *entry = nvsh_coll_entry(st->lib, a, fn, sizeof fn);
  if (!entry || !st->lib->putmem_on_stream || !st->lib->getmem_on_stream) {
    nvsh_unreachable_list(st, who, sizeof who);
    return symm_error(SYMM_ERR_UNSUPPORTED, "nvshmem: %s not load/store reachable from rank %d, "
                      "and %s (NVSHMEM %d.%d.%d) has no %s to run the collective with", who,
                      st->rank, st->lib->path, st->lib->major, st->lib->minor, st->lib->patch,
                      !entry ? fn : !st->lib->putmem_on_stream ? "nvshmemx_putmem_on_stream"
                                                              : "nvshmemx_getmem_on_stream");
  }
  if (a->count == 0) return SYMM_SUCCESS;
  const size_t in = symm_round_up(a->send_bytes, NVSH_STAGE_ALIGN);
  const size_t out = symm_round_up(a->recv_bytes, NVSH_STAGE_ALIGN);
  symm_tensor_t *scratch;
  SYMM_CHECK(symm_comm_scratch(comm, 2 * (in + out), &scratch));
  char *half = (char *)symm_tensor_peer_data(scratch)[st->rank] + (st->coll_calls++ & 1) * (in + out);
  void *src = half, *dst = half + in;
  void *stream = (void *)a->stream;

  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  /* Broadcast reads the root's input only; the others may pass none. */
  if (a->sendbuf && (a->kind != SYMM_COLL_BROADCAST || st->rank == a->root))
    st->lib->putmem_on_stream(src, a->sendbuf, a->send_bytes, st->rank, stream);
  int rc = nvsh_coll_run(st, a, entry, dst, src, stream);
  if (rc == 0) st->lib->getmem_on_stream(a->recvbuf, dst, a->recv_bytes, st->rank, stream);
  symm_gpu_leave(st->gpu, saved);
  if (rc != 0)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: %s (%zu x %s) failed: %d", fn, a->count,
                      symm_dtype_name(a->dtype), rc);
  SYMM_TRACE(COLL, "nvshmem: %s, %zu x %s through NVSHMEM", fn, a->count,
             symm_dtype_name(a->dtype));
  return SYMM_SUCCESS;
}
