/*
 * The device's context around every driver call of the engine and of the
 * GPU backends: made current on entry, the caller's put back on leave; and
 * the text of a failed driver call.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdarg.h>
#include <stdio.h>

#include "gpu/gpu.h"

symm_result_t symm_gpu_fail_at(const char *file, int line, unsigned subsys, ncu_result res,
                               const char *fmt, ...) {
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  symm_result_t code = res == NCU_ERROR_OUT_OF_MEMORY ? SYMM_ERR_NO_MEMORY : SYMM_ERR_BACKEND;
  return symm_error_at(file, line, subsys, code, "%s failed: %s", what, symm_cu_error(res));
}

symm_result_t symm_gpu_enter(symm_gpu_t *gpu, ncu_context *saved) {
  *saved = NULL;
  ncu_result res = gpu->drv->cuCtxGetCurrent(saved);
  if (res != NCU_SUCCESS) return symm_gpu_fail(res, "cuCtxGetCurrent");
  if (*saved == gpu->ctx) return SYMM_SUCCESS;
  res = gpu->drv->cuCtxSetCurrent(gpu->ctx);
  if (res != NCU_SUCCESS) return symm_gpu_fail(res, "cuCtxSetCurrent(device %d)", gpu->ordinal);
  return SYMM_SUCCESS;
}

void symm_gpu_leave(symm_gpu_t *gpu, ncu_context saved) {
  /* Put back a context the application chose; a thread that had none keeps
   * ours, so that its CUDA runtime calls land on the communicator's GPU. */
  if (saved && saved != gpu->ctx) gpu->drv->cuCtxSetCurrent(saved);
}
