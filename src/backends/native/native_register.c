/*
 * The user's VMM memory made symmetric (symm_tensor_register): memory that
 * passes native_validate (cuMemCreate, pinned, on this rank's GPU, mapped
 * read-write here, exportable with the communicator's handle type, the
 * pointer on a granularity boundary, the tensor inside one mapping).  Its
 * physical allocation's handle is retained and exported as the backend's
 * own data chunks are; peers import it and map the whole mapping's bytes
 * (cuMemMap maps from offset 0 only).  The user's mapping is never
 * unmapped and its memory never released here: the retained reference
 * goes at deregistration, and the driver frees the memory with the last.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>

#include "backends/native/native.h"

/* Retains and exports the allocation mapped at [start, start + size). */
static symm_result_t native_share_user(native_state_t *st, ncu_deviceptr start, size_t size,
                                       native_alloc_t *a) {
  a->size = a->len[0] = size;
  a->nchunks = 1;
  a->slot = -1;
  ncu_result cu = st->drv->cuMemRetainAllocationHandle(&a->h[0], (void *)(uintptr_t)start);
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "native: cuMemRetainAllocationHandle(%#llx)", start);
  a->have_h[0] = true;
  return native_export_data(st, a);
}

symm_result_t native_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                   symm_mem_t *mem) {
  native_state_t *st = symm_backend_state(comm);
  native_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  a->id = mem->id;
  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  const ncu_deviceptr p = (ncu_deviceptr)(uintptr_t)u->ptr;
  ncu_deviceptr start = 0;
  size_t size = 0;
  res = native_validate_range(st, u->ptr, nbytes);
  if (res != SYMM_SUCCESS) symm_error_context("native: symm_tensor_register of %p", u->ptr);
  if (res == SYMM_SUCCESS) res = native_mapping_of(st, p, &start, &size);
  if (res == SYMM_SUCCESS) res = native_share_user(st, start, size, a);
  if (res != SYMM_SUCCESS) {
    native_unpublish(st, a);
    native_alloc_release(st, a);
  }
  symm_gpu_leave(st->gpu, saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  symm_mem_set_user(mem, (void *)(uintptr_t)start, (size_t)(p - start), nbytes, st->ordinal, a);
  return SYMM_SUCCESS;
}

void native_deregister_user(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = symm_backend_state(comm);
  native_alloc_t *a = mem->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  native_unpublish(st, a);
  native_alloc_release(st, a); /* our reference only: nothing of ours is mapped */
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(a);
  mem->priv = NULL;
  mem->base = NULL;
}
