/* Stream-ordered signals (symm_signal_put / _wait / _barrier): argument
 * checks, then the engine of the communicator's memory. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include "internal.h"
#include "symm_fault.h"

int symm_signal_channels(const symm_tensor_t *tensor) {
  if (!tensor || !tensor->comm) return -1;
  return (int)(tensor->comm->pad_bytes / 4 / (size_t)tensor->comm->size);
}

static const char *const signal_fn[] = {NULL, "symm_signal_put", "symm_signal_wait",
                                        "symm_signal_barrier"};

/* A put to peer: the engine's where peer is mapped, else the provider's
 * signal into this rank's slot of the peer's pad (ops->one_sided, with the
 * engine's semantics). */
static symm_result_t put_any(symm_tensor_t *t, int peer, int channel, symm_stream_t stream) {
  symm_comm_t *comm = t->comm;
  if (symm_tensor_peer_data(t)[peer])
    return comm->engine->signal(comm, SYMM_SIGNAL_PUT, t, peer, channel, stream);
  const size_t slot = (size_t)channel * (size_t)comm->size + (size_t)comm->rank;
  const symm_tensor_t *h = symm_tensor_pad_holder(t);
  return comm->ops->one_sided(comm, SYMM_ONE_SIDED_SIGNAL, &h->peers[peer], peer,
                              (size_t)h->infos[peer].pad_offset + slot * 4, NULL, 4, stream);
}

/* Signals on a communicator with peers that only the provider reaches:
 * waits read this rank's own pad (the engine's), puts go as put_any says,
 * a barrier is every put, then every wait. */
static symm_result_t signal_mixed(symm_tensor_t *t, int op, int peer, int channel,
                                  symm_stream_t stream) {
  symm_comm_t *comm = t->comm;
  if (op == SYMM_SIGNAL_PUT) return put_any(t, peer, channel, stream);
  if (op == SYMM_SIGNAL_WAIT)
    return comm->engine->signal(comm, SYMM_SIGNAL_WAIT, t, peer, channel, stream);
  for (int k = 1; k < comm->size; k++)
    SYMM_CHECK(put_any(t, (comm->rank + k) % comm->size, channel, stream));
  for (int k = 1; k < comm->size; k++)
    SYMM_CHECK(comm->engine->signal(comm, SYMM_SIGNAL_WAIT, t, (comm->rank + k) % comm->size,
                                    channel, stream));
  return SYMM_SUCCESS;
}

static symm_result_t signal_run(symm_tensor_t *t, int op, int peer, int channel,
                                symm_stream_t stream) {
  const char *fn = signal_fn[op];
  SYMM_CHECK(symm_tensor_usable(t, fn));
  symm_comm_t *comm = t->comm;
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "%s: the tensor is not rendezvoused (call "
                      "symm_tensor_rendezvous first)", fn);
  if (op != SYMM_SIGNAL_BARRIER && (peer < 0 || peer >= comm->size || peer == comm->rank))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: peer %d is not another rank of [0, %d) (this "
                      "is rank %d)", fn, peer, comm->size, comm->rank);
  int channels = symm_signal_channels(t);
  if (channel < 0 || channel >= channels)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: channel %d outside [0, %d) (%d ranks share "
                      "a %d-byte pad)", fn, channel, channels, comm->size,
                      (int)comm->pad_bytes);
  /* A put and a barrier store into peers' pads: mapped now if mapped on
   * use.  A wait reads this rank's own pad only. */
  if (op == SYMM_SIGNAL_BARRIER) SYMM_CHECK(symm_tensor_map_peers(t));
  if (op == SYMM_SIGNAL_PUT) SYMM_CHECK(symm_tensor_map_peer(t, peer));
  const bool unmapped = op != SYMM_SIGNAL_BARRIER && !symm_tensor_peer_data(t)[peer] &&
                        !(op == SYMM_SIGNAL_WAIT && t->on_use);
  const bool provider = SYMM_OPS_HAS(comm->ops, 5, one_sided);
  if (!provider &&
      (op != SYMM_SIGNAL_BARRIER ? unmapped : comm->unreachable != 0)) {
    char who[256];
    if (op != SYMM_SIGNAL_BARRIER)
      snprintf(who, sizeof who, "rank %d", peer);
    else
      symm_comm_unreachable_list(comm, who, sizeof who);
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: %s not load/store reachable from rank %d with "
                      "the %s backend", fn, who, comm->rank, comm->ops->name);
  }
  if (!comm->caps.takes_stream && stream)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the %s backend takes no stream (pass NULL)", fn,
                      comm->ops->name);
  SYMM_TRACE(COLL, "%s: peer %d channel %d", fn, peer, channel);
  if (op == SYMM_SIGNAL_WAIT) symm_fault_point(SYMM_FAULT_SIGNAL_WAIT, comm->rank);
  /* One timeout for the call: a barrier's puts and waits, one per peer,
   * share it (the host engine's waits keep to it). */
  const uint64_t outer = symm_op_deadline_begin(comm->timeout_ms);
  symm_result_t res = comm->unreachable && provider ? signal_mixed(t, op, peer, channel, stream)
                                                    : comm->engine->signal(comm, op, t, peer,
                                                                           channel, stream);
  symm_op_deadline_end(outer);
  return res;
}

symm_result_t symm_signal_put(symm_tensor_t *tensor, int peer, int channel,
                              symm_stream_t stream) {
  return signal_run(tensor, SYMM_SIGNAL_PUT, peer, channel, stream);
}

symm_result_t symm_signal_wait(symm_tensor_t *tensor, int peer, int channel,
                               symm_stream_t stream) {
  return signal_run(tensor, SYMM_SIGNAL_WAIT, peer, channel, stream);
}

symm_result_t symm_signal_barrier(symm_tensor_t *tensor, int channel, symm_stream_t stream) {
  return signal_run(tensor, SYMM_SIGNAL_BARRIER, -1, channel, stream);
}

static symm_result_t write32(const char *fn, symm_comm_t *comm, void *ptr, uint32_t value,
                             size_t count, symm_stream_t stream) {
  if (!comm || !ptr)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn, comm ? "ptr" : "comm");
  if ((uintptr_t)ptr % 4)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %p is not 4-byte aligned", fn, ptr);
  if (count > SIZE_MAX / 4)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %zu words overflow a byte count", fn, count);
  if (!comm->caps.takes_stream && stream)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the %s backend takes no stream (pass NULL)", fn,
                      comm->ops->name);
  if (!count) return SYMM_SUCCESS;
  if (!SYMM_OPS_HAS(comm->engine, 3, write32))
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the %s engine has no stream-ordered writes", fn,
                      comm->engine->name);
  return comm->engine->write32(comm, ptr, value, count, stream);
}

symm_result_t symm_write_value32(symm_comm_t *comm, void *ptr, uint32_t value,
                                 symm_stream_t stream) {
  return write32("symm_write_value32", comm, ptr, value, 1, stream);
}

symm_result_t symm_memset32(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                            symm_stream_t stream) {
  return write32("symm_memset32", comm, ptr, value, count, stream);
}
