/* One-sided puts and gets from the host (symm_put, symm_get,
 * symm_put_signal, symm_put_batch): argument checks, then the engine's
 * stream-ordered copy between this process's memory and a peer's mapping
 * of a rendezvoused tensor; put_signal adds the signal after the copy on
 * the same stream. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdio.h>

#include "internal.h"

/* The tensor is usable for a one-sided call to `peer` over
 * [offset, offset + bytes) with `buf` on this side; error otherwise. */
static symm_result_t check_one_sided(symm_tensor_t *t, int peer, size_t offset, const void *buf,
                                     size_t bytes, symm_stream_t stream, const char *fn) {
  SYMM_CHECK(symm_tensor_usable(t, fn));
  symm_comm_t *comm = t->comm;
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "%s: the tensor is not rendezvoused (call "
                      "symm_tensor_rendezvous first)", fn);
  if (peer < 0 || peer >= comm->size)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: peer %d out of range [0, %d)", fn, peer,
                      comm->size);
  const size_t nbytes = symm_tensor_nbytes(t);
  if (offset > nbytes || bytes > nbytes - offset)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: bytes [%zu, %zu + %zu) are not inside the "
                      "tensor's %zu bytes", fn, offset, offset, bytes, nbytes);
  if (bytes && !buf)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: NULL buffer for %zu bytes", fn, bytes);
  if (!comm->caps.takes_stream && stream)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the %s backend takes no stream (pass NULL)", fn,
                      comm->ops->name);
  SYMM_CHECK(symm_tensor_map_peer(t, peer));
  if (!symm_tensor_peer_data(t)[peer] && !SYMM_OPS_HAS(comm->ops, 5, one_sided))
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: rank %d is not load/store reachable from rank "
                      "%d with the %s backend, which has no put of its own", fn, peer,
                      comm->rank, comm->ops->name);
  if (!SYMM_OPS_HAS(comm->engine, 5, copy))
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the %s engine cannot copy", fn,
                      comm->engine->name);
  return SYMM_SUCCESS;
}

static char *peer_at(const symm_tensor_t *t, int peer, size_t offset) {
  return (char *)symm_tensor_peer_data(t)[peer] + offset;
}

/* One copy with peer: the engine's on the peer's mapping, or the
 * provider's where the peer has none (backend ops->one_sided). */
static symm_result_t transfer(symm_tensor_t *t, int op, int peer, size_t offset, void *local,
                              size_t bytes, symm_stream_t stream) {
  symm_comm_t *comm = t->comm;
  if (!symm_tensor_peer_data(t)[peer])
    return comm->ops->one_sided(comm, op, &t->peers[peer], peer,
                                (size_t)t->infos[peer].data_offset + offset, local, bytes, stream);
  char *remote = peer_at(t, peer, offset);
  return op == SYMM_ONE_SIDED_PUT ? comm->engine->copy(comm, remote, local, bytes, stream)
                                  : comm->engine->copy(comm, local, remote, bytes, stream);
}

symm_result_t symm_put(symm_tensor_t *tensor, int peer, size_t dst_offset, const void *src,
                       size_t bytes, symm_stream_t stream) {
  SYMM_CHECK(check_one_sided(tensor, peer, dst_offset, src, bytes, stream, "symm_put"));
  return transfer(tensor, SYMM_ONE_SIDED_PUT, peer, dst_offset, (void *)src, bytes, stream);
}

symm_result_t symm_get(symm_tensor_t *tensor, int peer, size_t src_offset, void *dst,
                       size_t bytes, symm_stream_t stream) {
  SYMM_CHECK(check_one_sided(tensor, peer, src_offset, dst, bytes, stream, "symm_get"));
  return transfer(tensor, SYMM_ONE_SIDED_GET, peer, src_offset, dst, bytes, stream);
}

symm_result_t symm_put_signal(symm_tensor_t *tensor, int peer, size_t dst_offset,
                              const void *src, size_t bytes, int channel,
                              symm_stream_t stream) {
  static const char fn[] = "symm_put_signal";
  SYMM_CHECK(check_one_sided(tensor, peer, dst_offset, src, bytes, stream, fn));
  const int channels = symm_signal_channels(tensor);
  if (channel < 0 || channel >= channels || peer == tensor->comm->rank)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s", fn,
                      peer == tensor->comm->rank ? "a rank signals only other ranks"
                                                 : "channel out of range");
  SYMM_CHECK(transfer(tensor, SYMM_ONE_SIDED_PUT, peer, dst_offset, (void *)src, bytes, stream));
  return symm_signal_put(tensor, peer, channel, stream);
}

symm_result_t symm_put_batch(symm_tensor_t *tensor, const symm_put_desc_t *puts, size_t n,
                             symm_stream_t stream) {
  static const char fn[] = "symm_put_batch";
  if (n && !puts) return symm_error(SYMM_ERR_INVALID_ARG, "%s: puts is NULL", fn);
  for (size_t i = 0; i < n; i++) {
    symm_result_t res = check_one_sided(tensor, puts[i].peer, puts[i].dst_offset, puts[i].src,
                                        puts[i].bytes, stream, fn);
    if (res != SYMM_SUCCESS) return symm_error(res, "%s (put %zu of %zu)", symm_last_error(), i, n);
  }
  for (size_t i = 0; i < n; i++)
    SYMM_CHECK(transfer(tensor, SYMM_ONE_SIDED_PUT, puts[i].peer, puts[i].dst_offset,
                        (void *)puts[i].src, puts[i].bytes, stream));
  return SYMM_SUCCESS;
}
