/*
 * Small device-side copies of host data for kernels, chiefly the array of
 * the peers' data pointers (a kernel cannot read the host array that
 * symm_tensor_peer_ptrs returns), and zeroing of device memory.  Plain
 * cuMemAlloc memory: it is private to this process and never shared, so
 * VMM would only add cost.  Both work on the engine's own non-blocking
 * stream: they must not queue behind (or wait for) the application's
 * kernels, which may be waiting on peers.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "gpu/gpu.h"

symm_result_t symm_gpu_device_copy(symm_comm_t *comm, const void *host, size_t bytes,
                                   void **dev) {
  if (!comm || !host || !bytes || !dev)
    return symm_error(SYMM_ERR_INVALID_ARG, "GPU device copy: NULL argument or zero bytes");
  *dev = NULL;
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g)
    return symm_error(SYMM_ERR_UNSUPPORTED, "GPU device copy needs a backend on GPU memory "
                      "(the %s backend's is not)", symm_comm_backend_name(comm));
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(g, &saved));
  ncu_deviceptr d = 0;
  symm_result_t res = SYMM_SUCCESS;
  SYMM_CU_GOTO(g->drv->cuMemAlloc(&d, bytes), res, fail, "cuMemAlloc(%zu bytes)", bytes);
  SYMM_CU_GOTO(g->drv->cuMemcpyHtoDAsync(d, host, bytes, g->stream), res, fail,
               "cuMemcpyHtoDAsync(%zu bytes)", bytes);
  SYMM_CU_GOTO(g->drv->cuStreamSynchronize(g->stream), res, fail,
               "cuStreamSynchronize(after copying %zu bytes to the device)", bytes);
  symm_gpu_leave(g, saved);
  *dev = (void *)(uintptr_t)d;
  return SYMM_SUCCESS;
fail:
  if (d) g->drv->cuMemFree(d);
  symm_gpu_leave(g, saved);
  return res;
}

void symm_gpu_device_free(symm_comm_t *comm, void *dev) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g || !dev) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(g, &saved) == SYMM_SUCCESS;
  ncu_result cu = g->drv->cuMemFree((ncu_deviceptr)(uintptr_t)dev);
  if (cu != NCU_SUCCESS)
    SYMM_WARN(BACKEND, "%s: cuMemFree(%p) failed: %s", g->name, dev, symm_cu_error(cu));
  if (entered) symm_gpu_leave(g, saved);
}

/* Waits for the zeroing, so that the memory (a signal pad) is clean before
 * any peer can map or signal it. */
symm_result_t symm_gpu_zero(symm_gpu_t *gpu, ncu_deviceptr ptr, size_t bytes) {
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(gpu, &saved));
  symm_result_t res = SYMM_SUCCESS;
  SYMM_CU_GOTO(gpu->drv->cuMemsetD8Async(ptr, 0, bytes, gpu->stream), res, out,
               "cuMemsetD8Async(signal pad, %zu bytes)", bytes);
  SYMM_CU_GOTO(gpu->drv->cuStreamSynchronize(gpu->stream), res, out,
               "cuStreamSynchronize(after zeroing the signal pad)");
out:
  symm_gpu_leave(gpu, saved);
  return res;
}

/* On the caller's stream, in its order: one word with the driver's memory
 * fence before it (a flag after the data), more as a fill. */
symm_result_t gpu_write32(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                          void *stream) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g) return symm_error(SYMM_ERR_STATE, "GPU write: the engine is not started");
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(g, &saved));
  const ncu_deviceptr d = (ncu_deviceptr)(uintptr_t)ptr;
  symm_result_t res = SYMM_SUCCESS;
  if (count == 1)
    SYMM_CU_GOTO(g->drv->cuStreamWriteValue32((ncu_stream)stream, d, value, 0), res, out,
                 "cuStreamWriteValue32(%p)", ptr);
  else
    SYMM_CU_GOTO(g->drv->cuMemsetD32Async(d, value, count, (ncu_stream)stream), res, out,
                 "cuMemsetD32Async(%p, %zu words)", ptr, count);
out:
  symm_gpu_leave(g, saved);
  return res;
}

symm_result_t gpu_copy(symm_comm_t *comm, void *dst, const void *src, size_t bytes,
                       void *stream) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g) return symm_error(SYMM_ERR_STATE, "GPU copy: the engine is not started");
  if (!bytes) return SYMM_SUCCESS;
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(g, &saved));
  symm_result_t res = SYMM_SUCCESS;
  SYMM_CU_GOTO(g->drv->cuMemcpyAsync((ncu_deviceptr)(uintptr_t)dst,
                                     (ncu_deviceptr)(uintptr_t)src, bytes, (ncu_stream)stream),
               res, out, "cuMemcpyAsync(%p <- %p, %zu bytes)", dst, src, bytes);
out:
  symm_gpu_leave(g, saved);
  return res;
}

symm_result_t gpu_zero(symm_comm_t *comm, void *ptr, size_t bytes) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g) return symm_error(SYMM_ERR_STATE, "GPU zero: the engine is not started");
  return symm_gpu_zero(g, (ncu_deviceptr)(uintptr_t)ptr, bytes);
}
