/* host backend: stream-ordered signals, run at once (ops->signal).  The
 * slots are the 32-bit words of the tensor's pads in shared memory, with
 * the same meaning as on the GPU (symmem_device.cuh): slot channel * world
 * + sender of the receiver's pad; put = compare-and-swap 0 -> 1 with
 * release, waiting while the receiver has not consumed the last signal;
 * wait = acquire until non-zero, then store 0. */
#include <stdatomic.h>

#include "host.h"

static symm_result_t slot_of(const symm_tensor_t *t, int owner, int channel, int sender,
                             _Atomic uint32_t **slot) {
  void *pad = NULL;
  SYMM_CHECK(symm_tensor_signal_pad(t, owner, &pad));
  *slot = (_Atomic uint32_t *)pad + (size_t)channel * (size_t)t->comm->size + (size_t)sender;
  return SYMM_SUCCESS;
}

static symm_result_t lost(const symm_comm_t *comm, int peer, const char *fn) {
  return symm_error(SYMM_ERR_PEER_LOST, "%s: rank %d (pid %d) is gone", fn, peer,
                    (int)comm->pids[peer]);
}

static symm_result_t put(symm_comm_t *comm, const symm_tensor_t *t, int peer, int channel,
                         const char *fn) {
  _Atomic uint32_t *slot;
  SYMM_CHECK(slot_of(t, peer, channel, comm->rank, &slot));
  symm_backoff_t b;
  bool started = false;
  for (;;) {
    uint32_t empty = 0;
    if (atomic_compare_exchange_weak_explicit(slot, &empty, 1u, memory_order_release,
                                              memory_order_relaxed))
      return SYMM_SUCCESS;
    if (!started) host_backoff_start(&b, comm, peer);
    started = true;
    if (!symm_backoff_pause(&b))
      return b.lost ? lost(comm, peer, fn)
                    : symm_error(SYMM_ERR_TIMEOUT, "%s: rank %d did not consume the previous "
                                 "signal on channel %d within %d ms", fn, peer, channel,
                                 comm->timeout_ms);
  }
}

static symm_result_t wait(symm_comm_t *comm, const symm_tensor_t *t, int peer, int channel,
                          const char *fn) {
  _Atomic uint32_t *slot;
  SYMM_CHECK(slot_of(t, comm->rank, channel, peer, &slot));
  if (!atomic_load_explicit(slot, memory_order_acquire)) {
    symm_backoff_t b;
    host_backoff_start(&b, comm, peer);
    while (!atomic_load_explicit(slot, memory_order_acquire))
      if (!symm_backoff_pause(&b))
        return b.lost ? lost(comm, peer, fn)
                      : symm_error(SYMM_ERR_TIMEOUT, "%s: no signal from rank %d on channel %d "
                                   "within %d ms", fn, peer, channel, comm->timeout_ms);
  }
  atomic_store_explicit(slot, 0u, memory_order_relaxed); /* consumed */
  return SYMM_SUCCESS;
}

symm_result_t host_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                          int channel, void *stream) {
  (void)stream;
  switch (op) {
    case SYMM_SIGNAL_PUT: return put(comm, tensor, peer, channel, "symm_signal_put");
    case SYMM_SIGNAL_WAIT: return wait(comm, tensor, peer, channel, "symm_signal_wait");
    default: break;
  }
  /* Barrier: peers from rank + 1 on, so that ranks do not all hit one pad. */
  const int w = comm->size;
  for (int k = 1; k < w; k++)
    SYMM_CHECK(put(comm, tensor, (comm->rank + k) % w, channel, "symm_signal_barrier"));
  for (int k = 1; k < w; k++)
    SYMM_CHECK(wait(comm, tensor, (comm->rank + k) % w, channel, "symm_signal_barrier"));
  return SYMM_SUCCESS;
}
