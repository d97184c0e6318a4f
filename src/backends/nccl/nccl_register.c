/*
 * The user's memory made symmetric on the nccl backend
 * (symm_tensor_register): an NCCL symmetric window on the user's buffer,
 * registered collectively as the backend's own allocations are, peers'
 * pointers from it (ncclGetPeerDevicePointer).  NCCL registers only VMM
 * memory (it retains the physical allocation's handle and maps it into
 * its peers), and a window must start on a 4 KiB boundary of its
 * allocation; a rank whose memory NCCL would refuse inside the collective
 * call would leave its peers waiting there, so check_user says so first
 * (the core's round carries it to every rank).  Deregistration drops the
 * window, never the memory: nothing here calls ncclMemFree.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>

#include "backends/nccl/nccl.h"

/* The bytes of the window: NCCL takes sizes of whole 4 KiB pages. */
static size_t window_bytes(size_t nbytes) {
  return (nbytes + SYMM_NCCL_WIN_ALIGNMENT - 1) / SYMM_NCCL_WIN_ALIGNMENT *
         SYMM_NCCL_WIN_ALIGNMENT;
}

symm_result_t nccl_check_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes) {
  nccl_state_t *st = symm_backend_state(comm);
  if (!st->comm)
    return symm_error(SYMM_ERR_STATE, "nccl: the NCCL communicator was aborted after an error");
  symm_gpu_vmm_t v;
  symm_result_t res = symm_gpu_vmm_of(st->gpu, u->ptr, nbytes, &v);
  if (res != SYMM_SUCCESS) {
    symm_error_context("nccl: an NCCL window on %p", u->ptr);
    return res;
  }
  const size_t offset = (size_t)((ncu_deviceptr)(uintptr_t)u->ptr - v.start);
  if (offset % SYMM_NCCL_WIN_ALIGNMENT != 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "nccl: %p lies %zu bytes into its mapping [%#llx, "
                      "+%zu bytes); an NCCL window starts on a %d-byte boundary of its "
                      "allocation", u->ptr, offset, v.start, v.size, SYMM_NCCL_WIN_ALIGNMENT);
  if (v.size - offset < window_bytes(nbytes))
    return symm_error(SYMM_ERR_INVALID_ARG, "nccl: the window of %zu bytes (whole %d-byte "
                      "pages) at %p runs past its mapping [%#llx, +%zu bytes)",
                      window_bytes(nbytes), SYMM_NCCL_WIN_ALIGNMENT, u->ptr, v.start, v.size);
  return SYMM_SUCCESS;
}

symm_result_t nccl_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem) {
  nccl_state_t *st = symm_backend_state(comm);
  nccl_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "nccl: out of memory");
  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res == SYMM_SUCCESS) {
    res = nccl_window_register(comm, st, u->ptr, window_bytes(nbytes), &a->win);
    symm_gpu_leave(st->gpu, saved);
  }
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  a->ptr = u->ptr;
  a->window_seq = st->windows;
  symm_mem_set_user(mem, u->ptr, 0, nbytes, symm_gpu_ordinal(st->gpu), a);
  SYMM_TRACE(BACKEND, "nccl: window %llu on the user's %p (%zu bytes)",
             (unsigned long long)a->window_seq, u->ptr, window_bytes(nbytes));
  return SYMM_SUCCESS;
}

void nccl_deregister_user(symm_comm_t *comm, symm_mem_t *mem) {
  nccl_deregister(comm, mem); /* the window only */
  free(mem->priv);
  mem->priv = NULL;
  mem->base = NULL;
}
