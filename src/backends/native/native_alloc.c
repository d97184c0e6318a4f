/*
 * Local allocations of the native backend: physical chunks from cuMemCreate
 * mapped into one reserved range, the signal pad zeroed, and the chunks
 * exported at allocation time (fds published in the fd exchange, or fabric
 * handles kept for export_mem), so that rendezvous only imports.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

void native_layout(const native_state_t *st, size_t alloc_bytes, size_t data_offset,
                   native_alloc_t *a) {
  a->size = alloc_bytes;
  if (data_offset > 0 && data_offset < alloc_bytes && data_offset % st->gran == 0) {
    /* Split: pad chunk, then data chunk; the data can be mapped alone. */
    a->nchunks = 2;
    a->off[0] = 0;
    a->len[0] = data_offset;
    a->off[1] = data_offset;
    a->len[1] = alloc_bytes - data_offset;
    a->data_chunk = 1;
  } else {
    a->nchunks = 1;
    a->off[0] = 0;
    a->len[0] = alloc_bytes;
    a->data_chunk = 0;
  }
}

symm_result_t native_grant_access(native_state_t *st, ncu_deviceptr va, size_t total,
                                  const size_t *lens, int n, size_t uniform) {
  ncu_access_desc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = NCU_LOCATION_DEVICE;
  acc.location.id = st->ordinal;
  acc.flags = NCU_ACCESS_READWRITE;
  /* One call usually covers every mapping of the range; should a driver
   * insist on one mapping per call, grant them one by one. */
  ncu_result cu = st->drv->cuMemSetAccess(va, total, &acc, 1);
  if (cu == NCU_ERROR_INVALID_VALUE && n > 1) {
    size_t off = 0;
    cu = NCU_SUCCESS;
    for (int i = 0; i < n && cu == NCU_SUCCESS; i++) {
      size_t len = lens ? lens[i] : uniform;
      cu = st->drv->cuMemSetAccess(va + off, len, &acc, 1);
      off += len;
    }
  }
  if (cu != NCU_SUCCESS)
    return native_cu_fail(cu, "cuMemSetAccess(%zu bytes, device %d read-write)", total,
                          st->ordinal);
  return SYMM_SUCCESS;
}

symm_result_t native_map_chunks(native_state_t *st, native_alloc_t *a, const char *what) {
  const native_driver_t *drv = st->drv;
  symm_result_t res = SYMM_SUCCESS;
  NATIVE_CU_GOTO(drv->cuMemAddressReserve(&a->va, a->size, st->gran, 0, 0), res, out,
                 "%s: cuMemAddressReserve(%zu bytes)", what, a->size);
  for (int i = 0; i < a->nchunks; i++) {
    NATIVE_CU_GOTO(drv->cuMemMap(a->va + a->off[i], a->len[i], 0, a->h[i], 0), res, out,
                   "%s: cuMemMap(%zu bytes at offset %zu)", what, a->len[i], a->off[i]);
    a->mapped[i] = true;
  }
  res = native_grant_access(st, a->va, a->size, a->len, a->nchunks, 0);
  if (res != SYMM_SUCCESS) symm_error_context("%s", what);
out:
  return res;
}

void native_alloc_release(native_state_t *st, native_alloc_t *a) {
  const native_driver_t *drv = st->drv;
  /* Mappings first, then the reservation, then our handle references; the
   * driver frees the physical memory once no mapping, handle or exported
   * fd refers to it any more (peers' imports count), so freeing while
   * peers still map it is safe. */
  for (int i = 0; i < a->nchunks; i++)
    if (a->mapped[i]) {
      ncu_result cu = drv->cuMemUnmap(a->va + a->off[i], a->len[i]);
      if (cu != NCU_SUCCESS)
        SYMM_WARN(BACKEND, "native: cuMemUnmap(%zu bytes) failed: %s", a->len[i],
                  native_cu_error(cu));
      a->mapped[i] = false;
    }
  if (a->va) {
    ncu_result cu = drv->cuMemAddressFree(a->va, a->size);
    if (cu != NCU_SUCCESS)
      SYMM_WARN(BACKEND, "native: cuMemAddressFree(%zu bytes) failed: %s", a->size,
                native_cu_error(cu));
    a->va = 0;
  }
  for (int i = 0; i < a->nchunks; i++)
    if (a->have_h[i]) {
      drv->cuMemRelease(a->h[i]);
      a->have_h[i] = false;
    }
}

/* Zeroes [base, base + bytes) on the backend's private stream and waits, so
 * that the pad is clean before any peer can map it. */
static symm_result_t native_zero(native_state_t *st, ncu_deviceptr base, size_t bytes) {
  symm_result_t res = SYMM_SUCCESS;
  NATIVE_CU_GOTO(st->drv->cuMemsetD8Async(base, 0, bytes, st->stream), res, out,
                 "cuMemsetD8Async(signal pad, %zu bytes)", bytes);
  NATIVE_CU_GOTO(st->drv->cuStreamSynchronize(st->stream), res, out,
                 "cuStreamSynchronize(after zeroing the signal pad)");
out:
  return res;
}

/* Exports every chunk: fds go to the fd exchange (which keeps a dup, so our
 * copy is closed at once), fabric handles stay in the allocation until
 * export_mem copies them into the exchange blob. */
static symm_result_t native_export_chunks(native_state_t *st, native_alloc_t *a) {
  symm_result_t res = SYMM_SUCCESS;
  for (int i = 0; i < a->nchunks; i++) {
    if (st->kind == NATIVE_HANDLE_FABRIC) {
      NATIVE_CU_GOTO(st->drv->cuMemExportToShareableHandle(&a->fabric[i], a->h[i],
                                                           NCU_HANDLE_FABRIC, 0),
                     res, out, "cuMemExportToShareableHandle(fabric, %zu bytes)", a->len[i]);
      continue;
    }
    int fd = -1;
    NATIVE_CU_GOTO(st->drv->cuMemExportToShareableHandle(&fd, a->h[i], NCU_HANDLE_POSIX_FD, 0),
                   res, out, "cuMemExportToShareableHandle(POSIX fd, %zu bytes)", a->len[i]);
    res = symm_fdx_publish(st->fdx, native_chunk_key(a, i), fd);
    close(fd);
    if (res != SYMM_SUCCESS) goto out;
    a->published[i] = true;
  }
out:
  return res;
}

static void native_unpublish(native_state_t *st, native_alloc_t *a) {
  for (int i = 0; i < a->nchunks; i++)
    if (a->published[i]) {
      symm_fdx_unpublish(st->fdx, native_chunk_key(a, i));
      a->published[i] = false;
    }
}

static symm_result_t native_create_chunks(native_state_t *st, native_alloc_t *a) {
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, st->handle_types);
  symm_result_t res = SYMM_SUCCESS;
  for (int i = 0; i < a->nchunks; i++) {
    NATIVE_CU_GOTO(st->drv->cuMemCreate(&a->h[i], a->len[i], &prop, 0), res, out,
                   "cuMemCreate(%zu bytes on device %d)", a->len[i], st->ordinal);
    a->have_h[i] = true;
  }
out:
  return res;
}

symm_result_t native_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = comm->backend_state;
  if (mem->alloc_bytes == 0 || mem->alloc_bytes % st->gran != 0 ||
      mem->data_offset < SYMM_SIGNAL_PAD_BYTES || mem->data_offset >= mem->alloc_bytes)
    return symm_error(SYMM_ERR_INTERNAL,
                      "native alloc: %zu bytes with data at %zu (granularity %zu, pad %d)",
                      mem->alloc_bytes, mem->data_offset, st->gran, SYMM_SIGNAL_PAD_BYTES);
  native_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "native alloc: out of memory");
  a->id = mem->id;
  native_layout(st, mem->alloc_bytes, mem->data_offset, a);

  ncu_context saved;
  symm_result_t res = native_ctx_enter(st, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  SYMM_CHECK_GOTO(native_create_chunks(st, a), res, fail);
  SYMM_TRACE(BACKEND, "native alloc %llu: created", (unsigned long long)a->id);
  SYMM_CHECK_GOTO(native_map_chunks(st, a, "native alloc"), res, fail);
  SYMM_TRACE(BACKEND, "native alloc %llu: mapped", (unsigned long long)a->id);
  SYMM_CHECK_GOTO(native_zero(st, a->va, SYMM_SIGNAL_PAD_BYTES), res, fail);
  SYMM_TRACE(BACKEND, "native alloc %llu: pad zeroed", (unsigned long long)a->id);
  SYMM_CHECK_GOTO(native_export_chunks(st, a), res, fail);
  SYMM_TRACE(BACKEND, "native alloc %llu: exported", (unsigned long long)a->id);
  native_ctx_leave(st, saved);

  mem->base = (void *)(uintptr_t)a->va;
  mem->priv = a;
  mem->device = st->ordinal;
  SYMM_TRACE(BACKEND, "native: alloc id %llu: %zu bytes at %p (%d chunk%s)",
             (unsigned long long)mem->id, mem->alloc_bytes, mem->base, a->nchunks,
             a->nchunks > 1 ? "s" : "");
  return SYMM_SUCCESS;
fail:
  native_unpublish(st, a);
  native_alloc_release(st, a);
  native_ctx_leave(st, saved);
  free(a);
  return res;
}

/* A pooled allocation is reused: signals its last user left behind must not
 * reach the next one. */
symm_result_t native_reset_pad(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = comm->backend_state;
  ncu_context saved;
  SYMM_CHECK(native_ctx_enter(st, &saved));
  /* Only the advertised pad (symm_signal_pad_bytes) is ever signalled; the
   * rest of the pad chunk is never handed out. */
  symm_result_t res = native_zero(st, (ncu_deviceptr)(uintptr_t)mem->base, SYMM_SIGNAL_PAD_BYTES);
  native_ctx_leave(st, saved);
  return res;
}

void native_free(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = comm->backend_state;
  native_alloc_t *a = mem->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
  native_alloc_release(st, a);
  native_unpublish(st, a);
  if (entered) native_ctx_leave(st, saved);
  free(a);
  mem->priv = NULL;
  mem->base = NULL;
}
