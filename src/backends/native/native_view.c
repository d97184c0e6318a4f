/*
 * Contiguous view: every rank's allocation mapped back to back in one
 * reserved range, rank r at base + r * stride.  cuMemMap can only map a
 * whole physical chunk (its offset argument must be 0), so with the split
 * layout (data in its own chunk) we map just the data chunks and the view
 * is truly contiguous (stride = data chunk size); otherwise we map whole
 * allocations and the stride includes each rank's signal pad.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>

#include "backends/native/native.h"

typedef struct native_view {
  ncu_deviceptr va;
  size_t total, stride;
  int world, mapped;   /* ranks [0, mapped) are mapped */
} native_view_t;

static void native_view_release(native_state_t *st, native_view_t *v) {
  for (int r = 0; r < v->mapped; r++) {
    ncu_result cu = st->drv->cuMemUnmap(v->va + (size_t)r * v->stride, v->stride);
    if (cu != NCU_SUCCESS)
      SYMM_WARN(BACKEND, "native: contiguous view: cuMemUnmap(rank %d) failed: %s", r,
                symm_cu_error(cu));
  }
  v->mapped = 0;
  if (v->va) st->drv->cuMemAddressFree(v->va, v->total);
  v->va = 0;
}

/* The handle of rank r's chunk that goes into the view: our own for this
 * rank, the imported one (kept in the peer map) for the others. */
static const native_alloc_t *native_view_source(const native_state_t *st, const symm_mem_t *local,
                                                const symm_peer_map_t *maps, int r) {
  return r == st->rank ? local->priv : maps[r].priv;
}

symm_result_t native_contiguous_map(symm_comm_t *comm, const symm_mem_t *local,
                                    const symm_peer_map_t *maps,
                                    const symm_exchange_info_t *infos, void **base,
                                    size_t *stride, void **priv) {
  native_state_t *st = symm_backend_state(comm);
  const native_alloc_t *mine = local->priv;
  for (int r = 0; r < st->size; r++) {
    const native_alloc_t *src = native_view_source(st, local, maps, r);
    if (!src)
      return symm_error(SYMM_ERR_STATE, "native contiguous view: rank %d is not mapped", r);
    if (infos[r].alloc_bytes != local->alloc_bytes || infos[r].data_offset != local->data_offset ||
        src->nchunks != mine->nchunks)
      return symm_error(SYMM_ERR_MISMATCH,
                        "native contiguous view: rank %d's allocation is %llu bytes with data at "
                        "%llu, this rank's %zu with data at %zu", r,
                        (unsigned long long)infos[r].alloc_bytes,
                        (unsigned long long)infos[r].data_offset, local->alloc_bytes,
                        local->data_offset);
  }
  native_view_t *v = calloc(1, sizeof *v);
  if (!v) return symm_error(SYMM_ERR_NO_MEMORY, "native contiguous view: out of memory");
  v->world = st->size;
  v->stride = mine->len[mine->data_chunk];
  v->total = v->stride * (size_t)st->size;

  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res != SYMM_SUCCESS) {
    free(v);
    return res;
  }
  SYMM_CU_GOTO(st->drv->cuMemAddressReserve(&v->va, v->total, st->gran, 0, 0), res, fail,
               "native contiguous view: cuMemAddressReserve(%zu bytes)", v->total);
  for (int r = 0; r < st->size; r++) {
    const native_alloc_t *src = native_view_source(st, local, maps, r);
    SYMM_CU_GOTO(st->drv->cuMemMap(v->va + (size_t)r * v->stride, v->stride, 0,
                                   src->h[src->data_chunk], 0),
                 res, fail, "native contiguous view: cuMemMap(rank %d, %zu bytes)", r,
                 v->stride);
    v->mapped = r + 1;
  }
  SYMM_CHECK_GOTO(native_grant_access(st, v->va, v->total, NULL, st->size, v->stride), res, fail);
  symm_gpu_leave(st->gpu, saved);

  /* Whole-allocation chunks start with the pad: the data begins
   * data_offset in. */
  size_t skip = mine->nchunks == 1 ? local->data_offset : 0;
  *base = (void *)(uintptr_t)(v->va + skip);
  *stride = v->stride;
  *priv = v;
  SYMM_TRACE(BACKEND, "native: contiguous view of %d ranks at %p, stride %zu", st->size, *base,
             v->stride);
  return SYMM_SUCCESS;
fail:
  native_view_release(st, v);
  symm_gpu_leave(st->gpu, saved);
  free(v);
  return res;
}

void native_contiguous_unmap(symm_comm_t *comm, void *base, size_t bytes, void *priv) {
  native_state_t *st = symm_backend_state(comm);
  native_view_t *v = priv;
  if (!st || !v) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  native_view_release(st, v);
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(v);
}
