/* host backend: CPU shared memory from memfd_create, shared by passing the
 * fds over abstract Unix sockets (core/fd_exchange.h). */
#ifndef SYMM_HOST_H
#define SYMM_HOST_H

#include "backends/util/backoff.h"
#include "backends/util/fd_exchange.h"
#include "core/internal.h"

typedef struct {
  symm_fdx_t *fdx;
  size_t page;
  size_t slice_bytes; /* SYMM_HOST_SLICE_BYTES, read once */
} host_state_t;

/* Per allocation: the memfd, kept open while the allocation lives so that
 * peers can fetch it at any time. */
typedef struct {
  int fd;
} host_mem_t;

static inline host_state_t *host_state(const symm_comm_t *comm) {
  return (host_state_t *)comm->backend_state;
}

symm_result_t host_alloc(symm_comm_t *comm, symm_mem_t *mem);
void host_free(symm_comm_t *comm, symm_mem_t *mem);
symm_result_t host_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map);
void host_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map);
symm_result_t host_contiguous_map(symm_comm_t *comm, const symm_mem_t *local,
                                  const symm_peer_map_t *maps, const symm_exchange_info_t *infos,
                                  void **base, size_t *stride, void **priv);
void host_contiguous_unmap(symm_comm_t *comm, void *base, size_t bytes, void *priv);

/* Stream-ordered signals, run at once (host_signal.c): ops->signal. */
symm_result_t host_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                          int channel, void *stream);

/* Collectives (host_coll.c): ops->collective.  Synchronous; the protocol is
 * described at the top of host_coll.c. */
symm_result_t host_collective(symm_comm_t *comm, const symm_coll_args_t *args);

/* The process of rank `peer` (0: unknown, not watched). */
static inline int32_t host_peer_pid(const symm_comm_t *comm, int peer) {
  return comm->pids ? comm->pids[peer] : 0;
}
/* A wait for rank `peer` within comm's timeout, backing off as this host's
 * ranks call for, and failing early if peer's process goes. */
static inline void host_backoff_start(symm_backoff_t *b, const symm_comm_t *comm, int peer) {
  symm_backoff_start(b, comm->timeout_ms, comm->local_size);
  symm_backoff_watch(b, host_peer_pid(comm, peer));
}
symm_result_t host_abstain(symm_comm_t *comm, const symm_coll_args_t *args);
symm_algo_t host_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes);
symm_result_t host_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes);
/* out[i] = in[0][i] op in[1][i] op ... in[nin-1][i] for i < count, in that
 * order (host_coll_reduce.c).  out must not overlap any input.  f16 and
 * bf16 are reduced in f32 and rounded to nearest-even. */
void host_reduce(void *out, const void *const *in, int nin, size_t count, symm_dtype_t dtype,
                 symm_redop_t op);

#endif
