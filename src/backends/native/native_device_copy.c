/*
 * Small device-side copies of host data for kernels, chiefly the array of
 * the peers' data pointers (a kernel cannot read the host array that
 * symm_tensor_peer_ptrs returns).  Plain cuMemAlloc memory: it is private to
 * this process and never shared, so VMM would only add cost.
 */
#include "backends/native/native.h"

symm_result_t native_device_copy(symm_comm_t *comm, const void *host, size_t bytes, void **dev) {
  if (!comm || !host || !bytes || !dev)
    return symm_error(SYMM_ERR_INVALID_ARG, "native device copy: NULL argument or zero bytes");
  *dev = NULL;
  if (comm->ops != &symm_native_ops || !comm->backend_state)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native device copy needs the native backend");
  native_state_t *st = comm->backend_state;
  ncu_context saved;
  SYMM_CHECK(native_ctx_enter(st, &saved));
  ncu_deviceptr d = 0;
  symm_result_t res = SYMM_SUCCESS;
  NATIVE_CU_GOTO(st->drv->cuMemAlloc(&d, bytes), res, fail, "cuMemAlloc(%zu bytes)", bytes);
  /* Our own non-blocking stream: the copy must not queue behind (or wait
   * for) the application's kernels, which may be waiting on peers. */
  NATIVE_CU_GOTO(st->drv->cuMemcpyHtoDAsync(d, host, bytes, st->stream), res, fail,
                 "cuMemcpyHtoDAsync(%zu bytes)", bytes);
  NATIVE_CU_GOTO(st->drv->cuStreamSynchronize(st->stream), res, fail,
                 "cuStreamSynchronize(after copying %zu bytes to the device)", bytes);
  native_ctx_leave(st, saved);
  *dev = (void *)(uintptr_t)d;
  return SYMM_SUCCESS;
fail:
  if (d) st->drv->cuMemFree(d);
  native_ctx_leave(st, saved);
  return res;
}

void native_device_free(symm_comm_t *comm, void *dev) {
  if (!comm || !dev || !comm->backend_state || comm->ops != &symm_native_ops) return;
  native_state_t *st = comm->backend_state;
  ncu_context saved = NULL;
  bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
  ncu_result cu = st->drv->cuMemFree((ncu_deviceptr)(uintptr_t)dev);
  if (cu != NCU_SUCCESS)
    SYMM_WARN(BACKEND, "native: cuMemFree(%p) failed: %s", dev, symm_cu_error(cu));
  if (entered) native_ctx_leave(st, saved);
}
