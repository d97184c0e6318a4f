/*
 * Local allocations of the cuda backend: one cuMemAlloc per tensor, the
 * signal pad at offset 0 (zeroed before any peer can see it) and the data
 * one page in, rounded up to CUDA_IPC_ROUND for the driver; its IPC handle
 * is made at allocation time, so that a rendezvous only opens.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>

#include "backends/cuda/cuda.h"

symm_result_t cuda_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  cuda_state_t *st = symm_backend_state(comm);
  if (mem->alloc_bytes == 0 || mem->alloc_bytes % CUDA_LAYOUT_GRANULARITY != 0 ||
      mem->data_offset < mem->pad_bytes || mem->data_offset >= mem->alloc_bytes)
    return symm_error(SYMM_ERR_INTERNAL, "cuda alloc: %zu bytes with data at %zu (granularity "
                      "%zu, pad %zu)", mem->alloc_bytes, mem->data_offset,
                      CUDA_LAYOUT_GRANULARITY, mem->pad_bytes);
  cuda_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "cuda alloc: out of memory");
  a->driver_bytes = symm_round_up(mem->alloc_bytes, CUDA_IPC_ROUND);

  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  SYMM_CU_GOTO(st->drv->cuMemAlloc(&a->ptr, a->driver_bytes), res, fail,
               "cuda: cuMemAlloc(%zu bytes on GPU %d)", a->driver_bytes, st->ordinal);
  SYMM_CHECK_GOTO(symm_gpu_zero(st->gpu, a->ptr, mem->pad_bytes), res, fail);
  SYMM_CU_GOTO(st->drv->cuIpcGetMemHandle(&a->ipc, a->ptr), res, fail,
               "cuda: cuIpcGetMemHandle(%zu bytes on GPU %d)", a->driver_bytes, st->ordinal);
  symm_gpu_leave(st->gpu, saved);

  mem->base = (void *)(uintptr_t)a->ptr;
  mem->pad_offset = 0;
  mem->priv = a;
  mem->device = st->ordinal;
  SYMM_TRACE(BACKEND, "cuda alloc %llu: %zu bytes (driver %zu) at %p",
             (unsigned long long)mem->id, mem->alloc_bytes, a->driver_bytes, mem->base);
  return SYMM_SUCCESS;
fail:
  if (a->ptr) st->drv->cuMemFree(a->ptr);
  symm_gpu_leave(st->gpu, saved);
  free(a);
  return res;
}

/* An exporter needs no call to retire its handle: the driver drops it with
 * the memory.  Peers close theirs in unmap_peer; like every backend's free,
 * this one is local, and the pool keeps freed tensors (and the peers'
 * opens of them) until trim or destroy. */
void cuda_free(symm_comm_t *comm, symm_mem_t *mem) {
  cuda_state_t *st = symm_backend_state(comm);
  cuda_alloc_t *a = mem->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  ncu_result cu = st->drv->cuMemFree(a->ptr);
  if (cu != NCU_SUCCESS)
    SYMM_WARN(BACKEND, "cuda: cuMemFree(%zu bytes) failed: %s", a->driver_bytes,
              symm_cu_error(cu));
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(a);
  mem->priv = NULL;
  mem->base = NULL;
}
