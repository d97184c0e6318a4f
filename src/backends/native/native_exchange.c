/*
 * Making allocations reachable across ranks: export_mem puts the identity
 * of the pad's heap chunk (and fabric handles) into the exchange blob (the
 * data chunk's fd was already published at allocation time, the heap
 * chunk's when the heap grew), map_peer maps the peer's heap chunk
 * (imported once per peer and chunk, native_heap.c) as the pad window and
 * imports + maps the data chunk behind it, unmap_peer undoes it.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

/* Blob layout.
 *  Fabric kind: [heap chunk's fabric handle | data chunk's fabric handle],
 *    64 bytes each, which fills the 128-byte blob exactly (one-chunk layout:
 *    [data chunk's handle | zeros]).
 *  Fd kind: the marker, then at NATIVE_BLOB_HEAP_AT the heap id (0 for the
 *    one-chunk layout); the fds travel through the fd exchange. */
#define NATIVE_BLOB_FD_MARK "symm-native-fd"
#define NATIVE_BLOB_HEAP_AT 16

_Static_assert(2 * NCU_FABRIC_HANDLE_BYTES <= SYMM_EXCHANGE_BLOB_BYTES,
               "the heap chunk's and the data chunk's fabric handles must fit the blob");
_Static_assert(sizeof NATIVE_BLOB_FD_MARK <= NATIVE_BLOB_HEAP_AT &&
               NATIVE_BLOB_HEAP_AT + sizeof(uint64_t) <= SYMM_EXCHANGE_BLOB_BYTES,
               "fd blob layout");

symm_result_t native_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  native_state_t *st = symm_backend_state(comm);
  const native_alloc_t *a = mem->priv;
  memset(info->blob, 0, sizeof info->blob);
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    size_t at = 0;
    if (native_is_split(a)) {
      memcpy(info->blob, a->heap->fabric.data, NCU_FABRIC_HANDLE_BYTES);
      at = NCU_FABRIC_HANDLE_BYTES;
    }
    memcpy(info->blob + at, a->fabric.data, NCU_FABRIC_HANDLE_BYTES);
  } else {
    memcpy(info->blob, NATIVE_BLOB_FD_MARK, sizeof NATIVE_BLOB_FD_MARK);
    uint64_t heap_id = native_is_split(a) ? a->heap->heap_id : 0;
    memcpy(info->blob + NATIVE_BLOB_HEAP_AT, &heap_id, sizeof heap_id);
  }
  /* A registration is one chunk: the second fabric handle's room is free. */
  if (mem->user) memcpy(info->blob + NATIVE_BLOB_USER_BYTES_AT, &a->size, sizeof(uint64_t));
  return SYMM_SUCCESS;
}

static uint64_t native_blob_heap_id(const symm_exchange_info_t *info) {
  uint64_t heap_id;
  memcpy(&heap_id, info->blob + NATIVE_BLOB_HEAP_AT, sizeof heap_id);
  return heap_id;
}

static symm_result_t native_check_peer_path(const native_state_t *st, int peer) {
  if (symm_gpu_peer_access(st->gpu, peer) == 0)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: GPU %d cannot access rank %d's GPU %s (cuDeviceCanAccessPeer = 0: "
                      "no NVLink or PCIe peer path)", st->ordinal, peer,
                      symm_gpu_peer_bus_id(st->gpu, peer));
  return SYMM_SUCCESS;
}

/* Why `peer` cannot be mapped at all from here, before any driver call. */
static symm_result_t native_check_reachable(const native_state_t *st, int peer,
                                            const symm_exchange_info_t *info) {
  bool split = info->data_offset == st->heap_chunk_bytes;
  if (info->alloc_bytes == 0 || info->alloc_bytes % st->gran != 0 ||
      info->data_offset >= info->alloc_bytes || info->pad_offset % st->pad_bytes != 0 ||
      info->pad_offset + st->pad_bytes > info->data_offset)
    return symm_error(SYMM_ERR_PROTOCOL,
                      "native: rank %d describes allocation %llu as %llu bytes with data at %llu "
                      "and its signal pad at %llu (granularity %zu)", peer,
                      (unsigned long long)info->id, (unsigned long long)info->alloc_bytes,
                      (unsigned long long)info->data_offset,
                      (unsigned long long)info->pad_offset, st->gran);
  /* Ranks on several hosts with fd handles were refused at startup
   * (native_check_hosts). */
  if (st->kind == NATIVE_HANDLE_FD) {
    if (memcmp(info->blob, NATIVE_BLOB_FD_MARK, sizeof NATIVE_BLOB_FD_MARK) != 0)
      return symm_error(SYMM_ERR_PROTOCOL,
                        "native: rank %d sent an exchange blob that is not the fd marker", peer);
    if (split != (native_blob_heap_id(info) != 0))
      return symm_error(SYMM_ERR_PROTOCOL,
                        "native: rank %d's allocation %llu %s a pad heap chunk", peer,
                        (unsigned long long)info->id, split ? "lacks" : "names");
  }
  return native_check_peer_path(st, peer);
}

/* The pad window of a split allocation: the peer's heap chunk, imported on
 * first use and cached (borrowed here: have_h[0] stays false). */
static symm_result_t native_peer_window(native_state_t *st, int peer,
                                        const symm_exchange_info_t *info, native_alloc_t *a,
                                        bool *imported) {
  /* Fabric kind: the chunk's fabric handle names it (no room for an id). */
  bool fabric = st->kind == NATIVE_HANDLE_FABRIC;
  ncu_fabric_handle fh;
  memcpy(fh.data, info->blob, NCU_FABRIC_HANDLE_BYTES);
  SYMM_CHECK(native_heap_peer(st, peer, fabric ? 0 : native_blob_heap_id(info),
                              fabric ? &fh : NULL, &a->h[0], imported));
  a->have_h[0] = false;
  return SYMM_SUCCESS;
}

/* Imports the data chunk of the peer's allocation into a->h[data_chunk]. */
static symm_result_t native_import_data(native_state_t *st, int peer,
                                        const symm_exchange_info_t *info, native_alloc_t *a) {
  symm_result_t res = SYMM_SUCCESS;
  int i = a->data_chunk;
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    ncu_fabric_handle fh;
    memcpy(fh.data, info->blob + (native_is_split(a) ? NCU_FABRIC_HANDLE_BYTES : 0),
           NCU_FABRIC_HANDLE_BYTES);
    SYMM_CU_GOTO(st->drv->cuMemImportFromShareableHandle(&a->h[i], &fh, NCU_HANDLE_FABRIC),
                 res, out, "cuMemImportFromShareableHandle(fabric, rank %d)", peer);
    a->have_h[i] = true;
    goto out;
  }
  int fd = -1;
  res = symm_fdx_fetch(st->fdx, peer, info->id, &fd);
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
    res = symm_gpu_fail(cu, "cuMemImportFromShareableHandle(fd of rank %d, %zu bytes)", peer,
                        a->len[i]);
    goto out;
  }
  a->have_h[i] = true;
out:
  return res;
}

/* A peer's registration of its user's memory: one chunk of the mapped
 * bytes its blob gives, holding this rank's span after data_offset. */
static symm_result_t native_user_layout(const native_state_t *st, const symm_mem_t *local,
                                        int peer, const symm_exchange_info_t *info,
                                        native_alloc_t *a) {
  uint64_t bytes;
  memcpy(&bytes, info->blob + NATIVE_BLOB_USER_BYTES_AT, sizeof bytes);
  const uint64_t span = local->alloc_bytes - local->data_offset;
  if (bytes == 0 || bytes % st->gran_min != 0 || info->alloc_bytes > bytes ||
      info->data_offset >= info->alloc_bytes || info->alloc_bytes - info->data_offset != span ||
      (st->kind == NATIVE_HANDLE_FD &&
       memcmp(info->blob, NATIVE_BLOB_FD_MARK, sizeof NATIVE_BLOB_FD_MARK) != 0))
    return symm_error(SYMM_ERR_PROTOCOL, "native: rank %d describes its registration %llu as "
                      "%llu bytes with data at %llu in a mapping of %llu bytes (this rank's "
                      "data: %llu bytes)", peer, (unsigned long long)info->id,
                      (unsigned long long)info->alloc_bytes,
                      (unsigned long long)info->data_offset, (unsigned long long)bytes,
                      (unsigned long long)span);
  SYMM_CHECK(native_check_peer_path(st, peer));
  a->size = a->len[0] = (size_t)bytes;
  a->nchunks = 1;
  a->slot = -1;
  return SYMM_SUCCESS;
}

symm_result_t native_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                              const symm_exchange_info_t *info, symm_peer_map_t *map) {
  native_state_t *st = symm_backend_state(comm);
  if (!local->user) SYMM_CHECK(native_check_reachable(st, peer, info));
  native_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "native map_peer: out of memory");
  a->id = info->id;
  symm_result_t checked = SYMM_SUCCESS;
  if (local->user) checked = native_user_layout(st, local, peer, info, a);
  else native_layout(st, (size_t)info->alloc_bytes, (size_t)info->data_offset, a);
  if (checked != SYMM_SUCCESS) {
    free(a);
    return checked;
  }

  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  uint64_t t0 = symm_now_ns(), t1, t2;
  bool heap_imported = false;
  if (native_is_split(a))
    SYMM_CHECK_GOTO(native_peer_window(st, peer, info, a, &heap_imported), res, fail);
  t1 = symm_now_ns();
  SYMM_CHECK_GOTO(native_import_data(st, peer, info, a), res, fail);
  t2 = symm_now_ns();
  char what[64];
  snprintf(what, sizeof what, "native: mapping rank %d", peer);
  SYMM_CHECK_GOTO(native_map_chunks(st, a, what), res, fail);
  symm_gpu_leave(st->gpu, saved);

  map->base = (void *)(uintptr_t)a->va;
  map->peer_id = info->id;
  map->priv = a;
  SYMM_TRACE(BACKEND, "native: mapped rank %d allocation %llu (%zu bytes) at %p, pad at +%llu; "
             "us: heap window %.0f (%s) import data %.0f map+access %.0f", peer,
             (unsigned long long)info->id, a->size, map->base,
             (unsigned long long)info->pad_offset, (double)(t1 - t0) / 1e3,
             !native_is_split(a) ? "none" : heap_imported ? "imported" : "cached",
             (double)(t2 - t1) / 1e3, (double)(symm_now_ns() - t2) / 1e3);
  return SYMM_SUCCESS;
fail:
  native_alloc_release(st, a);
  symm_gpu_leave(st->gpu, saved);
  free(a);
  return res;
}

void native_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  native_state_t *st = symm_backend_state(comm);
  native_alloc_t *a = map->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  native_alloc_release(st, a);
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(a);
  map->priv = NULL;
  map->base = NULL;
}
