/*
 * Memory of the nccl backend: ncclMemAlloc (local), its signal pad zeroed
 * on the engine's stream, then registered as a symmetric window
 * (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC: collective, the
 * seam's register_mem).  Registration happens once per allocation: a
 * pooled allocation keeps its window (registering the same memory again
 * would use up NCCL's window address space).  Peers' memory comes from the
 * window (ncclGetPeerDevicePointer): nothing travels at rendezvous but the
 * window's sequence number, which shows that both ranks hold the same
 * collective registration.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>

#include "backends/nccl/nccl.h"

#define NCCL_BLOB_MARK "symm-nccl-win"
#define NCCL_BLOB_SEQ_AT 16

_Static_assert(sizeof NCCL_BLOB_MARK <= NCCL_BLOB_SEQ_AT &&
               NCCL_BLOB_SEQ_AT + sizeof(uint64_t) <= SYMM_EXCHANGE_BLOB_BYTES, "blob layout");

symm_result_t nccl_window_register(symm_comm_t *comm, nccl_state_t *st, void *ptr, size_t bytes,
                                   symm_nccl_window_t *win) {
  if (!st->comm)
    return symm_error(SYMM_ERR_STATE, "nccl: the NCCL communicator was aborted after an error");
  *win = NULL;
  int rc = st->lib->comm_window_register(st->comm, ptr, bytes, win, SYMM_NCCL_WIN_COLL_SYMMETRIC);
  SYMM_CHECK(nccl_call(comm, st, rc, "ncclCommWindowRegister"));
  if (!*win) {
    /* NCCL answers success without a window when the communicator has no
     * symmetric-memory support (the GPUs, the topology or the settings). */
    symm_result_t err = symm_error(SYMM_ERR_UNSUPPORTED,
                                   "nccl: ncclCommWindowRegister(%zu bytes, "
                                   "NCCL_WIN_COLL_SYMMETRIC) returned ncclSuccess but no window: "
                                   "this NCCL communicator has no symmetric-memory support", bytes);
    nccl_publish_failure(comm, err);
    return err;
  }
  st->windows++;
  st->live_windows++;
  return SYMM_SUCCESS;
}

void nccl_window_deregister(symm_comm_t *comm, nccl_state_t *st, symm_nccl_window_t win) {
  st->live_windows--;
  if (!st->comm) return; /* aborted: NCCL freed its windows */
  int rc = st->lib->comm_window_deregister(st->comm, win);
  /* A non-blocking communicator may finish it later. */
  if (rc == SYMM_NCCL_IN_PROGRESS || rc == SYMM_NCCL_SUCCESS) {
    if (nccl_call(comm, st, rc, "ncclCommWindowDeregister") != SYMM_SUCCESS)
      SYMM_WARN(BACKEND, "%s", symm_last_error());
  } else {
    SYMM_WARN(BACKEND, "nccl: ncclCommWindowDeregister failed: %s", nccl_result_text(st, rc));
  }
}

symm_result_t nccl_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  nccl_state_t *st = symm_backend_state(comm);
  if (mem->alloc_bytes == 0 || mem->alloc_bytes % SYMM_NCCL_WIN_ALIGNMENT != 0 ||
      mem->data_offset < mem->pad_bytes || mem->data_offset >= mem->alloc_bytes)
    return symm_error(SYMM_ERR_INTERNAL, "nccl alloc: %zu bytes with data at %zu", mem->alloc_bytes,
                      mem->data_offset);
  nccl_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "nccl alloc: out of memory");
  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  int rc = st->lib->mem_alloc(&a->ptr, mem->alloc_bytes);
  if (rc != SYMM_NCCL_SUCCESS || !a->ptr) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "nccl alloc: ncclMemAlloc(%zu bytes) failed: %s",
                     mem->alloc_bytes, nccl_result_text(st, rc));
    goto fail;
  }
  SYMM_CHECK_GOTO(symm_gpu_zero(st->gpu, (ncu_deviceptr)(uintptr_t)a->ptr, mem->pad_bytes),
                  res, fail);
  symm_gpu_leave(st->gpu, saved);
  mem->base = a->ptr;
  mem->pad_offset = 0;
  mem->priv = a;
  mem->device = symm_gpu_ordinal(st->gpu);
  return SYMM_SUCCESS;
fail:
  if (a->ptr) st->lib->mem_free(a->ptr);
  symm_gpu_leave(st->gpu, saved);
  free(a);
  return res;
}

void nccl_free(symm_comm_t *comm, symm_mem_t *mem) {
  nccl_state_t *st = symm_backend_state(comm);
  nccl_alloc_t *a = mem->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  int rc = st->lib->mem_free(a->ptr);
  if (rc != SYMM_NCCL_SUCCESS)
    SYMM_WARN(BACKEND, "nccl: ncclMemFree(%p) failed: %s", a->ptr, nccl_result_text(st, rc));
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(a);
  mem->priv = NULL;
  mem->base = NULL;
}

symm_result_t nccl_register(symm_comm_t *comm, symm_mem_t *mem) {
  nccl_state_t *st = symm_backend_state(comm);
  nccl_alloc_t *a = mem->priv;
  if (a->win) return SYMM_SUCCESS; /* once per allocation */
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  symm_result_t res = nccl_window_register(comm, st, a->ptr, mem->alloc_bytes, &a->win);
  symm_gpu_leave(st->gpu, saved);
  if (res == SYMM_SUCCESS) a->window_seq = st->windows;
  return res;
}

void nccl_deregister(symm_comm_t *comm, symm_mem_t *mem) {
  nccl_state_t *st = symm_backend_state(comm);
  nccl_alloc_t *a = mem->priv;
  if (!st || !a || !a->win) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  nccl_window_deregister(comm, st, a->win);
  if (entered) symm_gpu_leave(st->gpu, saved);
  a->win = NULL;
}

symm_result_t nccl_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  (void)comm;
  const nccl_alloc_t *a = mem->priv;
  memset(info->blob, 0, sizeof info->blob);
  memcpy(info->blob, NCCL_BLOB_MARK, sizeof NCCL_BLOB_MARK);
  memcpy(info->blob + NCCL_BLOB_SEQ_AT, &a->window_seq, sizeof a->window_seq);
  return SYMM_SUCCESS;
}

symm_result_t nccl_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  nccl_state_t *st = symm_backend_state(comm);
  const nccl_alloc_t *a = local->priv;
  uint64_t seq;
  memcpy(&seq, info->blob + NCCL_BLOB_SEQ_AT, sizeof seq);
  if (memcmp(info->blob, NCCL_BLOB_MARK, sizeof NCCL_BLOB_MARK) != 0)
    return symm_error(SYMM_ERR_PROTOCOL, "nccl: rank %d sent an exchange blob that is not an "
                      "nccl window's", peer);
  /* A window pairs the allocations of one collective registration: the
   * peer's must be the one registered with ours. */
  if (seq != a->window_seq || info->alloc_bytes != local->alloc_bytes)
    return symm_error(SYMM_ERR_MISMATCH, "nccl: rank %d rendezvoused its window %llu (%llu "
                      "bytes) with rank %d's window %llu (%zu bytes): NCCL windows pair by "
                      "registration", peer, (unsigned long long)seq,
                      (unsigned long long)info->alloc_bytes, st->rank,
                      (unsigned long long)a->window_seq, local->alloc_bytes);
  map->base = NULL;
  if (!st->reachable[peer]) return SYMM_SUCCESS; /* refused by name where used */
  void *p = NULL;
  int rc = st->lib->get_peer_device_pointer(a->win, 0, peer, &p);
  if (rc != SYMM_NCCL_SUCCESS)
    return symm_error(SYMM_ERR_BACKEND, "nccl: ncclGetPeerDevicePointer(rank %d) failed: %s",
                      peer, nccl_result_text(st, rc));
  if (!p)
    return symm_error(SYMM_ERR_PROTOCOL, "nccl: NCCL gave no pointer to rank %d's window %llu "
                      "although it mapped rank %d at start-up", peer,
                      (unsigned long long)a->window_seq, peer);
  map->base = p;
  return SYMM_SUCCESS;
}

void nccl_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  (void)comm;
  map->base = NULL; /* NCCL's mapping lives as long as the window */
}

void nccl_unreachable_why(symm_comm_t *comm, int peer, char *out, size_t len) {
  const nccl_state_t *st = symm_backend_state(comm);
  int maj, min, pat;
  symm_nccl_version_parts(st->lib->version, &maj, &min, &pat);
  if (!st->lib->get_peer_device_pointer)
    snprintf(out, len, "NCCL %d.%d.%d (%s) has no ncclGetPeerDevicePointer, which peer "
             "pointers need (NCCL 2.29.2 or later); collectives run NCCL's own", maj, min, pat,
             nccl_library_path());
  else
    snprintf(out, len, "NCCL maps no pointer to rank %d's window here (another host or no "
             "peer path); collectives run NCCL's own", peer);
}
