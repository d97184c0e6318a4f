/* CPU engine: stream-ordered signals, run at once by the calling thread.  The
 * slots are the 32-bit words of the tensor's pads in shared memory, with
 * the same meaning as on the GPU (symmem_device.cuh): slot channel * world
 * + sender of the receiver's pad; put = compare-and-swap 0 -> 1 with
 * release, waiting while the receiver has not consumed the last signal;
 * wait = acquire until non-zero, then store 0. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdatomic.h>

#include "cpu/cpu.h"

static symm_result_t slot_of(const symm_tensor_t *t, int owner, int channel, int sender,
                             _Atomic uint32_t **slot) {
  void *pad = NULL;
  SYMM_CHECK(symm_tensor_signal_pad(t, owner, &pad));
  *slot = (_Atomic uint32_t *)pad + (size_t)channel * (size_t)symm_comm_size(symm_tensor_comm(t)) + (size_t)sender;
  return SYMM_SUCCESS;
}

static symm_result_t lost(const symm_comm_t *comm, int peer, const char *fn) {
  return symm_error(SYMM_ERR_PEER_LOST, "%s: rank %d (pid %d) is gone", fn, peer,
                    (int)symm_comm_peer_pid(comm, peer));
}

static symm_result_t put(symm_comm_t *comm, const symm_tensor_t *t, int peer, int channel,
                         const char *fn) {
  _Atomic uint32_t *slot;
  SYMM_CHECK(slot_of(t, peer, channel, symm_comm_rank(comm), &slot));
  symm_backoff_t b;
  bool started = false;
  for (;;) {
    uint32_t empty = 0;
    if (atomic_compare_exchange_weak_explicit(slot, &empty, 1u, memory_order_release,
                                              memory_order_relaxed))
      return SYMM_SUCCESS;
    if (!started) cpu_backoff_start(&b, comm, peer);
    started = true;
    if (!symm_backoff_pause(&b))
      return b.lost ? lost(comm, peer, fn)
                    : symm_error(SYMM_ERR_TIMEOUT, "%s: rank %d did not consume the previous "
                                 "signal on channel %d within %d ms", fn, peer, channel,
                                 symm_comm_timeout_ms(comm));
  }
}

static symm_result_t wait(symm_comm_t *comm, const symm_tensor_t *t, int peer, int channel,
                          const char *fn) {
  _Atomic uint32_t *slot;
  SYMM_CHECK(slot_of(t, symm_comm_rank(comm), channel, peer, &slot));
  if (!atomic_load_explicit(slot, memory_order_acquire)) {
    symm_backoff_t b;
    cpu_backoff_start(&b, comm, peer);
    while (!atomic_load_explicit(slot, memory_order_acquire))
      if (!symm_backoff_pause(&b))
        return b.lost ? lost(comm, peer, fn)
                      : symm_error(SYMM_ERR_TIMEOUT, "%s: no signal from rank %d on channel %d "
                                   "within %d ms", fn, peer, channel, symm_comm_timeout_ms(comm));
  }
  atomic_store_explicit(slot, 0u, memory_order_relaxed); /* consumed */
  return SYMM_SUCCESS;
}

symm_result_t cpu_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                          int channel, void *stream) {
  (void)stream;
  switch (op) {
    case SYMM_SIGNAL_PUT: return put(comm, tensor, peer, channel, "symm_signal_put");
    case SYMM_SIGNAL_WAIT: return wait(comm, tensor, peer, channel, "symm_signal_wait");
    default: break;
  }
  /* Barrier: peers from rank + 1 on, so that ranks do not all hit one pad. */
  const int w = symm_comm_size(comm);
  for (int k = 1; k < w; k++)
    SYMM_CHECK(put(comm, tensor, (symm_comm_rank(comm) + k) % w, channel, "symm_signal_barrier"));
  for (int k = 1; k < w; k++)
    SYMM_CHECK(wait(comm, tensor, (symm_comm_rank(comm) + k) % w, channel, "symm_signal_barrier"));
  return SYMM_SUCCESS;
}
