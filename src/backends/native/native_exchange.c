/*
 * Making allocations reachable across ranks: export_mem puts fabric handles
 * into the exchange blob (fds were already published at allocation time),
 * map_peer imports a peer's chunks and maps them like a local allocation,
 * unmap_peer undoes it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

/* Blob layout.  Fabric kind: the handles of the chunks in chunk order, 64
 * bytes each (two chunks fill the 128-byte blob exactly).  Fd kind: only a
 * marker, since the fds travel through the fd exchange. */
#define NATIVE_BLOB_FD_MARK "symm-native-fd"

_Static_assert(NATIVE_MAX_CHUNKS * NCU_FABRIC_HANDLE_BYTES <= SYMM_EXCHANGE_BLOB_BYTES,
               "fabric handles of every chunk must fit the exchange blob");

symm_result_t native_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  native_state_t *st = comm->backend_state;
  const native_alloc_t *a = mem->priv;
  memset(info->blob, 0, sizeof info->blob);
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    for (int i = 0; i < a->nchunks; i++)
      memcpy(info->blob + (size_t)i * NCU_FABRIC_HANDLE_BYTES, a->fabric[i].data,
             NCU_FABRIC_HANDLE_BYTES);
  } else {
    memcpy(info->blob, NATIVE_BLOB_FD_MARK, sizeof NATIVE_BLOB_FD_MARK);
  }
  return SYMM_SUCCESS;
}

/* Why `peer` cannot be mapped at all from here, before any driver call. */
static symm_result_t native_check_reachable(const native_state_t *st, int peer,
                                            const symm_exchange_info_t *info) {
  const native_rank_info_t *p = &st->ranks[peer];
  if (info->alloc_bytes == 0 || info->alloc_bytes % st->gran != 0 ||
      info->data_offset >= info->alloc_bytes)
    return symm_error(SYMM_ERR_PROTOCOL,
                      "native: rank %d describes allocation %llu as %llu bytes with data at %llu "
                      "(granularity %zu)", peer, (unsigned long long)info->id,
                      (unsigned long long)info->alloc_bytes,
                      (unsigned long long)info->data_offset, st->gran);
  if (st->kind == NATIVE_HANDLE_FD) {
    if (p->host_hash != st->ranks[st->rank].host_hash)
      return symm_error(SYMM_ERR_UNSUPPORTED,
                        "native: rank %d is on another host; POSIX fd handles reach only ranks "
                        "of one host (fabric handles need IMEX: SYMM_NATIVE_HANDLE=fabric)", peer);
    if (memcmp(info->blob, NATIVE_BLOB_FD_MARK, sizeof NATIVE_BLOB_FD_MARK) != 0)
      return symm_error(SYMM_ERR_PROTOCOL,
                        "native: rank %d sent an exchange blob that is not the fd marker", peer);
  }
  if (st->peer_access[peer] == 0)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: GPU %d cannot access rank %d's GPU %s (cuDeviceCanAccessPeer = 0: "
                      "no NVLink or PCIe peer path)", st->ordinal, peer, p->pci_bus_id);
  return SYMM_SUCCESS;
}

/* Imports chunk i of the peer's allocation into a->h[i]. */
static symm_result_t native_import_chunk(native_state_t *st, int peer,
                                         const symm_exchange_info_t *info, native_alloc_t *a,
                                         int i) {
  symm_result_t res = SYMM_SUCCESS;
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    ncu_fabric_handle fh;
    memcpy(fh.data, info->blob + (size_t)i * NCU_FABRIC_HANDLE_BYTES, NCU_FABRIC_HANDLE_BYTES);
    NATIVE_CU_GOTO(st->drv->cuMemImportFromShareableHandle(&a->h[i], &fh, NCU_HANDLE_FABRIC),
                   res, out, "cuMemImportFromShareableHandle(fabric, rank %d)", peer);
    a->have_h[i] = true;
    goto out;
  }
  int fd = -1;
  res = symm_fdx_fetch(st->fdx, peer, native_chunk_key(a, i), &fd);
  if (res != SYMM_SUCCESS) {
    symm_error_context("native: fetching the fd of rank %d's allocation %llu", peer,
                       (unsigned long long)info->id);
    goto out;
  }
  /* The driver's import takes the fd by value, smuggled in the pointer. */
  ncu_result cu = st->drv->cuMemImportFromShareableHandle(&a->h[i], (void *)(intptr_t)fd,
                                                          NCU_HANDLE_POSIX_FD);
  close(fd);
  if (cu != NCU_SUCCESS) {
    res = native_cu_fail(cu, "cuMemImportFromShareableHandle(fd of rank %d, %zu bytes)", peer,
                         a->len[i]);
    goto out;
  }
  a->have_h[i] = true;
out:
  return res;
}

symm_result_t native_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                              const symm_exchange_info_t *info, symm_peer_map_t *map) {
  native_state_t *st = comm->backend_state;
  SYMM_CHECK(native_check_reachable(st, peer, info));
  native_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "native map_peer: out of memory");
  a->id = info->id;
  native_layout(st, (size_t)info->alloc_bytes, (size_t)info->data_offset, a);

  ncu_context saved;
  symm_result_t res = native_ctx_enter(st, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  for (int i = 0; i < a->nchunks; i++)
    SYMM_CHECK_GOTO(native_import_chunk(st, peer, info, a, i), res, fail);
  SYMM_TRACE(BACKEND, "native: imported rank %d allocation %llu", peer,
             (unsigned long long)info->id);
  char what[64];
  snprintf(what, sizeof what, "native: mapping rank %d", peer);
  SYMM_CHECK_GOTO(native_map_chunks(st, a, what), res, fail);
  native_ctx_leave(st, saved);

  map->base = (void *)(uintptr_t)a->va;
  map->peer_id = info->id;
  map->priv = a;
  SYMM_TRACE(BACKEND, "native: mapped rank %d allocation %llu (%zu bytes) at %p", peer,
             (unsigned long long)info->id, a->size, map->base);
  return SYMM_SUCCESS;
fail:
  native_alloc_release(st, a);
  native_ctx_leave(st, saved);
  free(a);
  return res;
}

void native_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  native_state_t *st = comm->backend_state;
  native_alloc_t *a = map->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
  native_alloc_release(st, a);
  if (entered) native_ctx_leave(st, saved);
  free(a);
  map->priv = NULL;
  map->base = NULL;
}
