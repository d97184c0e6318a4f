/*
 * The user's cuMemAlloc memory made symmetric (symm_tensor_register): the
 * allocation that holds the pointer (its range as the driver reports it)
 * is shared by its CUDA IPC handle, exactly as the backend's own
 * allocations are; peers open the whole allocation and the core adds the
 * pointer's offset in it.  The memory stays the user's: nothing here
 * frees it, and the exporter has no handle to retire.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>

#include "backends/cuda/cuda.h"

/* The cuMemAlloc allocation [*base, *base + *size) that holds
 * [p, p + nbytes), on this rank's GPU; or why the memory does not do. */
static symm_result_t cuda_user_range(const cuda_state_t *st, ncu_deviceptr p, size_t nbytes,
                                     ncu_deviceptr *base, size_t *size) {
  unsigned int type = 0;
  int ordinal = -1;
  ncu_result cu = st->drv->cuPointerGetAttribute(&type, NCU_PTR_ATTR_MEMORY_TYPE, p);
  if (cu != NCU_SUCCESS || type != NCU_MEMORYTYPE_DEVICE)
    return symm_error(SYMM_ERR_INVALID_ARG, "cuda: %#llx is not device memory (%s)", p,
                      cu != NCU_SUCCESS ? symm_cu_error(cu) : "host or managed memory");
  cu = st->drv->cuPointerGetAttribute(&ordinal, NCU_PTR_ATTR_DEVICE_ORDINAL, p);
  if (cu == NCU_SUCCESS && ordinal != st->ordinal)
    return symm_error(SYMM_ERR_INVALID_ARG, "cuda: %#llx is memory of GPU %d; this rank uses "
                      "GPU %d", p, ordinal, st->ordinal);
  cu = st->drv->cuPointerGetAttribute(base, NCU_PTR_ATTR_RANGE_START, p);
  if (cu == NCU_SUCCESS) cu = st->drv->cuPointerGetAttribute(size, NCU_PTR_ATTR_RANGE_SIZE, p);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuda: the allocation range of %#llx", p);
  if (p - *base > *size || *size - (size_t)(p - *base) < nbytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "cuda: [%#llx, +%zu bytes) runs past its "
                      "allocation [%#llx, +%zu bytes)", p, nbytes, *base, *size);
  return SYMM_SUCCESS;
}

symm_result_t cuda_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem) {
  cuda_state_t *st = symm_backend_state(comm);
  const ncu_deviceptr p = (ncu_deviceptr)(uintptr_t)u->ptr;
  cuda_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "cuda: out of memory");
  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  SYMM_CHECK_GOTO(cuda_user_range(st, p, nbytes, &a->ptr, &a->driver_bytes), res, out);
  ncu_result cu = st->drv->cuIpcGetMemHandle(&a->ipc, a->ptr);
  if (cu != NCU_SUCCESS)
    res = symm_error(SYMM_ERR_INVALID_ARG, "cuda: %#llx is not memory of cuMemAlloc that CUDA "
                     "IPC can share (cuIpcGetMemHandle of its allocation %#llx: %s); VMM memory "
                     "registers with the native backend", p, a->ptr, symm_cu_error(cu));
out:
  symm_gpu_leave(st->gpu, saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  symm_mem_set_user(mem, (void *)(uintptr_t)a->ptr, (size_t)(p - a->ptr), nbytes, st->ordinal, a);
  return SYMM_SUCCESS;
}

void cuda_deregister_user(symm_comm_t *comm, symm_mem_t *mem) {
  (void)comm;
  free(mem->priv);
  mem->priv = NULL;
  mem->base = NULL;
}
