/*
 * Stream-ordered signals: a put, wait or barrier on a rendezvoused
 * tensor's signal pads is one launch of the symm_signal_op kernel (one
 * block) on the caller's stream, with every rank's pad in its parameters;
 * the copy-engine collectives' barriers are launches of the same kernel.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <string.h>

#include "gpu/gpu.h"

symm_result_t gpu_signal_launch(symm_gpu_t *g, symm_signal_params_t *p, void *stream) {
  if (!g->signal_fn) {
    ncu_result cu = g->cd->cuModuleGetFunction(&g->signal_fn, g->module, "symm_signal_op");
    if (cu != NCU_SUCCESS) {
      g->signal_fn = NULL;
      return symm_gpu_fail(cu, "cuModuleGetFunction(symm_signal_op)");
    }
  }
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(g, &saved));
  ncu_result cu = gpu_launch(g, g->signal_fn, 1, SYMM_SIGNAL_THREADS, stream, p);
  symm_gpu_leave(g, saved);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuLaunchKernel(symm_signal_op)");
  return SYMM_SUCCESS;
}

symm_result_t gpu_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                         int channel, void *stream) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g || !g->ready)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s backend: stream-ordered signals need the "
                      "GPU kernels, which are unavailable: %s", symm_comm_backend_name(comm),
                      g ? g->why : "backend not started");
  if (g->size > SYMM_COLL_MAX_WORLD)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s backend: stream-ordered signals support at "
                      "most %d ranks (this communicator has %d)", g->name, SYMM_COLL_MAX_WORLD,
                      g->size);
  symm_signal_params_t p;
  memset(&p, 0, sizeof p);
  for (int r = 0; r < g->size; r++) {
    void *pad = NULL;
    SYMM_CHECK(symm_tensor_signal_pad(tensor, r, &pad));
    p.pads[r] = (uint64_t)(uintptr_t)pad;
  }
  p.err = g->err_dev;
  p.timeout_ns = (uint64_t)symm_comm_timeout_ms(comm) * 1000000ull;
  p.op = op;
  p.rank = g->rank;
  p.world = g->size;
  p.peer = peer;
  p.channel = channel;
  return gpu_signal_launch(g, &p, stream);
}
