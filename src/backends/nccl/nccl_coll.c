/*
 * NCCL's own collectives, which the core runs instead of the GPU engine's
 * when some peer is not load/store reachable (an older NCCL without peer
 * pointers, or ranks NCCL reaches only over the network).  They run on the
 * caller's stream in the communicator's context; buffers inside a
 * registered window take NCCL's symmetric kernels.  Data movement goes as
 * bytes, so every dtype moves; reductions map to NCCL's types.  An NCCL
 * without ncclAlltoAll gets the all-to-all as sends and receives in one
 * group, which NCCL needs to progress them together.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <string.h>

#include "backends/nccl/nccl.h"

static int nccl_dtype(symm_dtype_t dt) {
  switch (dt) {
    case SYMM_DTYPE_F16: return SYMM_NCCL_FLOAT16;
    case SYMM_DTYPE_BF16: return SYMM_NCCL_BFLOAT16;
    case SYMM_DTYPE_F32: return SYMM_NCCL_FLOAT32;
    case SYMM_DTYPE_F64: return SYMM_NCCL_FLOAT64;
    case SYMM_DTYPE_I8: return SYMM_NCCL_INT8;
    case SYMM_DTYPE_I32: return SYMM_NCCL_INT32;
    case SYMM_DTYPE_I64: return SYMM_NCCL_INT64;
    case SYMM_DTYPE_U8: return SYMM_NCCL_UINT8;
    case SYMM_DTYPE_U32: return SYMM_NCCL_UINT32;
    case SYMM_DTYPE_U64: return SYMM_NCCL_UINT64;
    case SYMM_DTYPE_F8E4M3: return SYMM_NCCL_FLOAT8E4M3;
    case SYMM_DTYPE_F8E5M2: return SYMM_NCCL_FLOAT8E5M2;
    default: return -1; /* i16, u16: no NCCL type */
  }
}

static int nccl_redop(symm_redop_t op) {
  switch (op) {
    case SYMM_REDUCE_SUM: return SYMM_NCCL_SUM;
    case SYMM_REDUCE_MIN: return SYMM_NCCL_MIN;
    case SYMM_REDUCE_MAX: return SYMM_NCCL_MAX;
    case SYMM_REDUCE_PROD: return SYMM_NCCL_PROD;
    case SYMM_REDUCE_AVG: return SYMM_NCCL_AVG;
    default: return -1;
  }
}

/* The all-to-all of NCCLs before ncclAlltoAll: count bytes to and from
 * every rank, in one group. */
static int nccl_alltoall_p2p(const nccl_state_t *st, const symm_coll_args_t *a, size_t bytes,
                             void *stream) {
  int rc = st->lib->group_start();
  for (int r = 0; rc == SYMM_NCCL_SUCCESS && r < st->size; r++) {
    rc = st->lib->send((const char *)a->sendbuf + (size_t)r * bytes, bytes, SYMM_NCCL_UINT8, r,
                       st->comm, stream);
    if (rc == SYMM_NCCL_SUCCESS)
      rc = st->lib->recv((char *)a->recvbuf + (size_t)r * bytes, bytes, SYMM_NCCL_UINT8, r,
                         st->comm, stream);
  }
  int end = st->lib->group_end(); /* closes the group even after a failed call */
  return rc != SYMM_NCCL_SUCCESS ? rc : end;
}

static int nccl_enqueue(const nccl_state_t *st, const symm_coll_args_t *a, int dt, int op) {
  void *stream = a->stream;
  size_t esize = symm_dtype_size(a->dtype), bytes = a->count * esize;
  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
      return st->lib->all_reduce(a->sendbuf, a->recvbuf, a->count, dt, op, st->comm, stream);
    case SYMM_COLL_REDUCE_SCATTER:
      return st->lib->reduce_scatter(a->sendbuf, a->recvbuf, a->count, dt, op, st->comm, stream);
    case SYMM_COLL_ALL_GATHER:
      return st->lib->all_gather(a->sendbuf, a->recvbuf, bytes, SYMM_NCCL_UINT8, st->comm, stream);
    case SYMM_COLL_BROADCAST:
      return st->lib->broadcast(a->sendbuf, a->recvbuf, bytes, SYMM_NCCL_UINT8, a->root, st->comm,
                                stream);
    case SYMM_COLL_ALL_TO_ALL:
      if (st->lib->all_to_all)
        return st->lib->all_to_all(a->sendbuf, a->recvbuf, bytes, SYMM_NCCL_UINT8, st->comm,
                                   stream);
      return nccl_alltoall_p2p(st, a, bytes, stream);
    case SYMM_COLL_ALL_TO_ALL_V: break; /* the core never hands it to a provider */
  }
  return SYMM_NCCL_INVALID_ARGUMENT;
}

static const char *nccl_coll_name(symm_coll_kind_t kind, bool p2p) {
  switch (kind) {
    case SYMM_COLL_ALL_REDUCE: return "ncclAllReduce";
    case SYMM_COLL_ALL_GATHER: return "ncclAllGather";
    case SYMM_COLL_REDUCE_SCATTER: return "ncclReduceScatter";
    case SYMM_COLL_BROADCAST: return "ncclBroadcast";
    case SYMM_COLL_ALL_TO_ALL: return p2p ? "ncclSend/ncclRecv (all-to-all)" : "ncclAlltoAll";
    case SYMM_COLL_ALL_TO_ALL_V: break;
  }
  return "an NCCL collective";
}

symm_result_t nccl_collective(symm_comm_t *comm, const symm_coll_args_t *a) {
  nccl_state_t *st = symm_backend_state(comm);
  if (!st->comm)
    return symm_error(SYMM_ERR_STATE, "nccl: the NCCL communicator was aborted after an error; "
                      "create a new symmem communicator");
  int dt = -1, op = -1;
  if (symm_coll_reduces(a->kind)) {
    dt = nccl_dtype(a->dtype);
    op = nccl_redop(a->op);
    if (dt < 0 || op < 0)
      return symm_error(SYMM_ERR_UNSUPPORTED, "nccl: NCCL cannot reduce %s with %s",
                        symm_dtype_name(a->dtype), symm_redop_name(a->op));
  }
  if (a->count == 0) return SYMM_SUCCESS;
  const char *what = nccl_coll_name(a->kind, a->kind == SYMM_COLL_ALL_TO_ALL && !st->lib->all_to_all);
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  symm_result_t res = nccl_call(comm, st, nccl_enqueue(st, a, dt, op), what);
  symm_gpu_leave(st->gpu, saved);
  if (res != SYMM_SUCCESS)
    symm_comm_set_async_error(comm, res, "%s", symm_last_error());
  SYMM_TRACE(COLL, "nccl: %s of %zu x %s on stream %p: %s", what, a->count,
             symm_dtype_name(a->dtype), a->stream, symm_strerror(res));
  return res;
}
