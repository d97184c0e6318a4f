/*
 * Local allocations of the native backend: a pad window (a mapping of the
 * pad-heap chunk that holds this tensor's signal-pad slot, native_heap.c)
 * and the data chunk from cuMemCreate mapped into one reserved range, the
 * slot zeroed, and the data chunk exported at allocation time (fd published
 * in the fd exchange, or fabric handle kept for export_mem), so that
 * rendezvous only imports.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

void native_layout(const native_state_t *st, size_t alloc_bytes, size_t data_offset,
                   native_alloc_t *a) {
  a->size = alloc_bytes;
  a->slot = -1;
  if (data_offset == st->heap_chunk_bytes && data_offset < alloc_bytes) {
    /* Split: pad window (a heap chunk), then the data chunk, which can be
     * mapped alone. */
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
    return symm_gpu_fail(cu, "cuMemSetAccess(%zu bytes, device %d read-write)", total,
                         st->ordinal);
  return SYMM_SUCCESS;
}

symm_result_t native_map_chunks(native_state_t *st, native_alloc_t *a, const char *what) {
  const symm_cu_driver_t *drv = st->drv;
  symm_result_t res = SYMM_SUCCESS;
  SYMM_CU_GOTO(drv->cuMemAddressReserve(&a->va, a->size, st->gran, 0, 0), res, out,
               "%s: cuMemAddressReserve(%zu bytes)", what, a->size);
  for (int i = 0; i < a->nchunks; i++) {
    SYMM_CU_GOTO(drv->cuMemMap(a->va + a->off[i], a->len[i], 0, a->h[i], 0), res, out,
                 "%s: cuMemMap(%zu bytes at offset %zu)", what, a->len[i], a->off[i]);
    a->mapped[i] = true;
  }
  res = native_grant_access(st, a->va, a->size, a->len, a->nchunks, 0);
  if (res != SYMM_SUCCESS) symm_error_context("%s", what);
out:
  return res;
}

void native_alloc_release(native_state_t *st, native_alloc_t *a) {
  const symm_cu_driver_t *drv = st->drv;
  /* Mappings first, then the reservation, then our handle references; the
   * driver frees the physical memory once no mapping, handle or exported
   * fd refers to it any more (peers' imports count), so freeing while
   * peers still map it is safe. */
  for (int i = 0; i < a->nchunks; i++)
    if (a->mapped[i]) {
      ncu_result cu = drv->cuMemUnmap(a->va + a->off[i], a->len[i]);
      if (cu != NCU_SUCCESS)
        SYMM_WARN(BACKEND, "native: cuMemUnmap(%zu bytes) failed: %s", a->len[i],
                  symm_cu_error(cu));
      a->mapped[i] = false;
    }
  if (a->va) {
    ncu_result cu = drv->cuMemAddressFree(a->va, a->size);
    if (cu != NCU_SUCCESS)
      SYMM_WARN(BACKEND, "native: cuMemAddressFree(%zu bytes) failed: %s", a->size,
                symm_cu_error(cu));
    a->va = 0;
  }
  /* A window's handle belongs to the heap (have_h false): not ours. */
  for (int i = 0; i < a->nchunks; i++)
    if (a->have_h[i]) {
      drv->cuMemRelease(a->h[i]);
      a->have_h[i] = false;
    }
}

/* Exports the data chunk (the pad window's heap chunk was exported when
 * the heap grew): the fd goes to the fd exchange (which keeps a dup, so our
 * copy is closed at once), the fabric handle stays in the allocation until
 * export_mem copies it into the exchange blob. */
symm_result_t native_export_data(native_state_t *st, native_alloc_t *a) {
  symm_result_t res = SYMM_SUCCESS;
  int i = a->data_chunk;
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    SYMM_CU_GOTO(st->drv->cuMemExportToShareableHandle(&a->fabric, a->h[i], NCU_HANDLE_FABRIC,
                                                       0),
                 res, out, "cuMemExportToShareableHandle(fabric, %zu bytes)", a->len[i]);
    goto out;
  }
  int fd = -1;
  SYMM_CU_GOTO(st->drv->cuMemExportToShareableHandle(&fd, a->h[i], NCU_HANDLE_POSIX_FD, 0),
               res, out, "cuMemExportToShareableHandle(POSIX fd, %zu bytes)", a->len[i]);
  res = symm_fdx_publish(st->fdx, a->id, fd);
  close(fd);
  if (res == SYMM_SUCCESS) a->published = true;
out:
  return res;
}

void native_unpublish(native_state_t *st, native_alloc_t *a) {
  if (a->published) symm_fdx_unpublish(st->fdx, a->id);
  a->published = false;
}

/* The window: a slot of the pad heap, and the heap chunk's handle mapped in
 * front of the data (borrowed: the heap releases it at fini). */
static symm_result_t native_take_pad(native_state_t *st, native_alloc_t *a, bool *created) {
  *created = false;
  if (!native_is_split(a)) return SYMM_SUCCESS;
  SYMM_CHECK(native_heap_take(st, &a->heap, &a->slot, created));
  a->h[0] = a->heap->h;
  a->have_h[0] = false;
  return SYMM_SUCCESS;
}

/* The data chunk (and, in the one-chunk layout, the pad with it). */
static symm_result_t native_create_data(native_state_t *st, native_alloc_t *a) {
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, st->handle_types);
  symm_result_t res = SYMM_SUCCESS;
  int i = a->data_chunk;
  SYMM_CU_GOTO(st->drv->cuMemCreate(&a->h[i], a->len[i], &prop, 0), res, out,
               "cuMemCreate(%zu bytes on device %d)", a->len[i], st->ordinal);
  a->have_h[i] = true;
out:
  return res;
}

static double native_us_since(uint64_t *t) {
  uint64_t now = symm_now_ns();
  double us = (double)(now - *t) / 1e3;
  *t = now;
  return us;
}

symm_result_t native_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = symm_backend_state(comm);
  if (mem->alloc_bytes == 0 || mem->alloc_bytes % st->gran != 0 ||
      mem->pad_bytes != st->pad_bytes || mem->data_offset < mem->pad_bytes ||
      mem->data_offset >= mem->alloc_bytes)
    return symm_error(SYMM_ERR_INTERNAL,
                      "native alloc: %zu bytes with data at %zu (granularity %zu, pad %zu of %zu)",
                      mem->alloc_bytes, mem->data_offset, st->gran, mem->pad_bytes, st->pad_bytes);
  native_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return symm_error(SYMM_ERR_NO_MEMORY, "native alloc: out of memory");
  a->id = mem->id;
  native_layout(st, mem->alloc_bytes, mem->data_offset, a);

  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(a);
    return res;
  }
  uint64_t t = symm_now_ns();
  double us_slot, us_create, us_map, us_zero, us_export;
  bool heap_grew = false;
  SYMM_CHECK_GOTO(native_take_pad(st, a, &heap_grew), res, fail);
  us_slot = native_us_since(&t);
  SYMM_CHECK_GOTO(native_create_data(st, a), res, fail);
  us_create = native_us_since(&t);
  SYMM_CHECK_GOTO(native_map_chunks(st, a, "native alloc"), res, fail);
  us_map = native_us_since(&t);
  /* The slot may have served an earlier tensor: zero it before any peer
   * can see this allocation. */
  size_t pad_offset = a->slot >= 0 ? (size_t)a->slot * st->pad_bytes : 0;
  SYMM_CHECK_GOTO(symm_gpu_zero(st->gpu, a->va + pad_offset, st->pad_bytes), res, fail);
  us_zero = native_us_since(&t);
  SYMM_CHECK_GOTO(native_export_data(st, a), res, fail);
  us_export = native_us_since(&t);
  symm_gpu_leave(st->gpu, saved);

  mem->base = (void *)(uintptr_t)a->va;
  mem->pad_offset = pad_offset;
  mem->priv = a;
  mem->device = st->ordinal;
  SYMM_TRACE(BACKEND, "native alloc %llu: %zu bytes at %p, pad at +%zu (heap chunk %llu slot %d%s); "
             "us: slot %.0f create %.0f map+access %.0f zero %.0f export %.0f",
             (unsigned long long)mem->id, mem->alloc_bytes, mem->base, pad_offset,
             a->heap ? (unsigned long long)a->heap->heap_id : 0ull, a->slot,
             heap_grew ? ", chunk new" : "", us_slot, us_create, us_map, us_zero, us_export);
  return SYMM_SUCCESS;
fail:
  native_unpublish(st, a);
  native_alloc_release(st, a);
  native_heap_give(st, a->heap, a->slot);
  symm_gpu_leave(st->gpu, saved);
  free(a);
  return res;
}

void native_free(symm_comm_t *comm, symm_mem_t *mem) {
  native_state_t *st = symm_backend_state(comm);
  native_alloc_t *a = mem->priv;
  if (!st || !a) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  native_alloc_release(st, a);
  native_unpublish(st, a);
  /* Peers that still map this tensor keep their own reference to the heap
   * chunk; the slot is zeroed when it is handed out again. */
  native_heap_give(st, a->heap, a->slot);
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(a);
  mem->priv = NULL;
  mem->base = NULL;
}
