/*
 * The pad heap of the native backend (see native.h): signal pads are slots
 * of per-communicator heap chunks that are created and exported once, and
 * imported once per peer, instead of a physical chunk of their own per
 * tensor (which cost an extra cuMemCreate, export, fd publish, and per peer
 * an fd fetch and import, for every tensor).
 *
 * Slots come from the oldest chunk that has a free one, next-fit within it
 * (a cursor per chunk goes round), so a freed slot is usually not handed
 * out again at once: a peer that still signals a tensor already freed on
 * this rank (a program error) then most likely hits an unused slot rather
 * than the pad of a newer tensor.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

void native_heap_init(native_state_t *st) {
  pthread_mutex_init(&st->heap_lock, NULL);
  st->heap_lock_ready = true;
  st->heap_chunk_bytes = symm_round_up(st->pad_bytes, st->gran);
}

static void native_heap_chunk_release(native_state_t *st, native_heap_chunk_t *c) {
  if (c->published) symm_fdx_unpublish(st->fdx, NATIVE_HEAP_KEY_BIT | c->heap_id);
  c->published = false;
  if (c->have_h) st->drv->cuMemRelease(c->h);
  c->have_h = false;
  free(c->taken);
  free(c);
}

void native_heap_fini(native_state_t *st) {
  if (!st->heap_lock_ready) return;
  pthread_mutex_lock(&st->heap_lock);
  if (st->heap || st->peer_heaps)
    SYMM_TRACE(BACKEND, "native heap: releasing %ld chunk(s) and %ld imported peer chunk(s)",
               st->heap_chunks, st->peer_heap_count);
  while (st->peer_heaps) {
    native_peer_heap_t *p = st->peer_heaps;
    st->peer_heaps = p->next;
    st->drv->cuMemRelease(p->h);
    free(p);
  }
  st->peer_heap_count = 0;
  while (st->heap) {
    native_heap_chunk_t *c = st->heap;
    st->heap = c->next;
    if (c->used)
      SYMM_WARN(BACKEND, "native heap: chunk %llu released with %d slot(s) in use",
                (unsigned long long)c->heap_id, c->used);
    native_heap_chunk_release(st, c);
  }
  st->heap_chunks = 0;
  pthread_mutex_unlock(&st->heap_lock);
  pthread_mutex_destroy(&st->heap_lock);
  st->heap_lock_ready = false;
}

/* Creates one heap chunk and exports it: the fd goes to the fd exchange
 * (which keeps a dup) under a key no allocation uses, the fabric handle
 * stays in the chunk for export_mem.  Called with heap_lock held. */
static symm_result_t native_heap_grow(native_state_t *st, native_heap_chunk_t **out) {
  symm_result_t res = SYMM_SUCCESS;
  uint64_t t0 = symm_now_ns();
  native_heap_chunk_t *c = calloc(1, sizeof *c);
  int nslots = (int)(st->heap_chunk_bytes / st->pad_bytes);
  if (c) c->taken = calloc((size_t)nslots, 1);
  if (!c || !c->taken) {
    if (c) free(c);
    return symm_error(SYMM_ERR_NO_MEMORY, "native heap: out of memory");
  }
  c->nslots = nslots;
  c->heap_id = st->heap_seq + 1;
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, st->handle_types);
  SYMM_CU_GOTO(st->drv->cuMemCreate(&c->h, st->heap_chunk_bytes, &prop, 0), res, fail,
               "native heap: cuMemCreate(%zu bytes on device %d)", st->heap_chunk_bytes,
               st->ordinal);
  c->have_h = true;
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    SYMM_CU_GOTO(st->drv->cuMemExportToShareableHandle(&c->fabric, c->h, NCU_HANDLE_FABRIC, 0),
                 res, fail, "native heap: cuMemExportToShareableHandle(fabric)");
  } else {
    int fd = -1;
    SYMM_CU_GOTO(st->drv->cuMemExportToShareableHandle(&fd, c->h, NCU_HANDLE_POSIX_FD, 0), res,
                 fail, "native heap: cuMemExportToShareableHandle(POSIX fd)");
    res = symm_fdx_publish(st->fdx, NATIVE_HEAP_KEY_BIT | c->heap_id, fd);
    close(fd);
    if (res != SYMM_SUCCESS) goto fail;
    c->published = true;
  }
  st->heap_seq = c->heap_id;
  native_heap_chunk_t **pp = &st->heap;
  while (*pp) pp = &(*pp)->next;
  *pp = c;
  st->heap_chunks++;
  *out = c;
  SYMM_TRACE(BACKEND, "native heap: chunk %llu (%zu bytes, %d slots) created+exported in %.0f us",
             (unsigned long long)c->heap_id, st->heap_chunk_bytes, nslots,
             (double)(symm_now_ns() - t0) / 1e3);
  return SYMM_SUCCESS;
fail:
  native_heap_chunk_release(st, c);
  return res;
}

static int native_heap_find_slot(native_heap_chunk_t *c) {
  for (int k = 0; k < c->nslots; k++) {
    int s = (c->cursor + k) % c->nslots;
    if (!c->taken[s]) return s;
  }
  return -1;
}

symm_result_t native_heap_take(native_state_t *st, native_heap_chunk_t **chunk, int *slot,
                               bool *created) {
  symm_result_t res = SYMM_SUCCESS;
  *created = false;
  pthread_mutex_lock(&st->heap_lock);
  native_heap_chunk_t *c = st->heap;
  while (c && c->used == c->nslots) c = c->next;
  if (!c) {
    res = native_heap_grow(st, &c);
    *created = res == SYMM_SUCCESS;
  }
  if (res == SYMM_SUCCESS) {
    int s = native_heap_find_slot(c);
    c->taken[s] = 1;
    c->used++;
    c->cursor = (s + 1) % c->nslots;
    *chunk = c;
    *slot = s;
  }
  pthread_mutex_unlock(&st->heap_lock);
  return res;
}

void native_heap_give(native_state_t *st, native_heap_chunk_t *chunk, int slot) {
  if (!chunk || slot < 0) return;
  pthread_mutex_lock(&st->heap_lock);
  if (slot < chunk->nslots && chunk->taken[slot]) {
    chunk->taken[slot] = 0;
    chunk->used--;
  } else {
    SYMM_WARN(BACKEND, "native heap: slot %d of chunk %llu given back twice", slot,
              (unsigned long long)chunk->heap_id);
  }
  pthread_mutex_unlock(&st->heap_lock);
}

static bool native_peer_heap_is(const native_state_t *st, const native_peer_heap_t *p, int peer,
                                uint64_t heap_id, const ncu_fabric_handle *fabric) {
  if (p->peer != peer) return false;
  if (st->kind == NATIVE_HANDLE_FABRIC)
    return memcmp(p->fabric.data, fabric->data, NCU_FABRIC_HANDLE_BYTES) == 0;
  return p->heap_id == heap_id;
}

static symm_result_t native_heap_import(native_state_t *st, int peer, uint64_t heap_id,
                                        const ncu_fabric_handle *fabric, ncu_mem_handle *h) {
  if (st->kind == NATIVE_HANDLE_FABRIC) {
    ncu_fabric_handle fh = *fabric;
    ncu_result cu = st->drv->cuMemImportFromShareableHandle(h, &fh, NCU_HANDLE_FABRIC);
    if (cu != NCU_SUCCESS)
      return symm_gpu_fail(cu, "native heap: cuMemImportFromShareableHandle(fabric, rank %d)",
                           peer);
    return SYMM_SUCCESS;
  }
  int fd = -1;
  symm_result_t res = symm_fdx_fetch(st->fdx, peer, NATIVE_HEAP_KEY_BIT | heap_id, &fd);
  if (res != SYMM_SUCCESS) {
    symm_error_context("native heap: fetching the fd of rank %d's heap chunk %llu", peer,
                       (unsigned long long)heap_id);
    return res;
  }
  ncu_result cu = st->drv->cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd,
                                                          NCU_HANDLE_POSIX_FD);
  close(fd);
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "native heap: cuMemImportFromShareableHandle(fd of rank %d's heap "
                         "chunk %llu)", peer, (unsigned long long)heap_id);
  return SYMM_SUCCESS;
}

symm_result_t native_heap_peer(native_state_t *st, int peer, uint64_t heap_id,
                               const ncu_fabric_handle *fabric, ncu_mem_handle *h,
                               bool *imported) {
  symm_result_t res = SYMM_SUCCESS;
  *imported = false;
  pthread_mutex_lock(&st->heap_lock);
  native_peer_heap_t *p = st->peer_heaps;
  while (p && !native_peer_heap_is(st, p, peer, heap_id, fabric)) p = p->next;
  if (!p) {
    uint64_t t0 = symm_now_ns();
    p = calloc(1, sizeof *p);
    if (!p) {
      res = symm_error(SYMM_ERR_NO_MEMORY, "native heap: out of memory");
      goto out;
    }
    p->peer = peer;
    p->heap_id = heap_id;
    if (fabric) p->fabric = *fabric;
    res = native_heap_import(st, peer, heap_id, fabric, &p->h);
    if (res != SYMM_SUCCESS) {
      free(p);
      p = NULL;
      goto out;
    }
    p->next = st->peer_heaps;
    st->peer_heaps = p;
    st->peer_heap_count++;
    *imported = true;
    if (fabric)
      SYMM_TRACE(BACKEND, "native heap: imported a heap chunk of rank %d (fabric) in %.0f us",
                 peer, (double)(symm_now_ns() - t0) / 1e3);
    else
      SYMM_TRACE(BACKEND, "native heap: imported rank %d's heap chunk %llu in %.0f us", peer,
                 (unsigned long long)heap_id, (double)(symm_now_ns() - t0) / 1e3);
  }
  *h = p->h;
out:
  pthread_mutex_unlock(&st->heap_lock);
  return res;
}

symm_result_t native_heap_info(symm_comm_t *comm, native_heap_info_t *info) {
  if (!comm || !info) return symm_error(SYMM_ERR_INVALID_ARG, "native_heap_info: NULL argument");
  if (symm_comm_backend(comm) != SYMM_BACKEND_NATIVE || !symm_backend_state(comm))
    return symm_error(SYMM_ERR_UNSUPPORTED, "native_heap_info needs the native backend");
  native_state_t *st = symm_backend_state(comm);
  memset(info, 0, sizeof *info);
  info->chunk_bytes = st->heap_chunk_bytes;
  pthread_mutex_lock(&st->heap_lock);
  for (const native_heap_chunk_t *c = st->heap; c; c = c->next) {
    info->chunks++;
    info->slots_used += c->used;
    info->slots_total += c->nslots;
  }
  info->peer_chunks = st->peer_heap_count;
  pthread_mutex_unlock(&st->heap_lock);
  return SYMM_SUCCESS;
}
