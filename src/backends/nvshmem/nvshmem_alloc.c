/*
 * Memory of the nvshmem backend: allocations from NVSHMEM's symmetric heap
 * (nvshmem_malloc and nvshmem_free are collective: the core checks that
 * every rank asks for the same size in the same order, and frees the same
 * allocation, before it calls them), peers' memory from nvshmem_ptr.  A
 * peer that this process cannot load and store (nvshmem_ptr NULL: another
 * node, reached by NVSHMEM's network transports) keeps a NULL mapping.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>

#include "backends/nvshmem/nvshmem.h"

/* What an allocation tells its peers: which nvshmem_malloc of the instance
 * made it.  Symmetric addresses are the same call's on every PE. */
typedef struct nvsh_alloc_info {
  uint64_t nth;
} nvsh_alloc_info_t;

symm_result_t nvsh_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  nvsh_state_t *st = symm_backend_state(comm);
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  nvsh_boot_use(comm); /* a heap that grows is a round of NVSHMEM's bootstrap */
  void *p = st->lib->malloc(mem->alloc_bytes);
  nvsh_boot_use(NULL);
  uint64_t nth = nvsh_instance_count_malloc();
  symm_result_t res = SYMM_SUCCESS;
  if (!p) {
    /* Every PE has the same heap and makes the same calls: they all fail. */
    res = symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: nvshmem_malloc(%zu bytes) returned NULL: the "
                     "symmetric heap is full (NVSHMEM_SYMMETRIC_SIZE sets its size per PE)",
                     mem->alloc_bytes);
    goto out;
  }
  res = symm_gpu_zero(st->gpu, (ncu_deviceptr)(uintptr_t)p, mem->pad_bytes);
  if (res != SYMM_SUCCESS) goto out; /* p stays: nvshmem_free would wait for the other PEs */
  mem->base = p;
  mem->pad_offset = 0;
  mem->device = symm_gpu_ordinal(st->gpu);
  mem->priv = (void *)(uintptr_t)nth;
  SYMM_TRACE(BACKEND, "nvshmem alloc %llu: nvshmem_malloc #%llu, %zu bytes at %p",
             (unsigned long long)mem->id, (unsigned long long)nth, mem->alloc_bytes, p);
out:
  symm_gpu_leave(st->gpu, saved);
  return res;
}

void nvsh_free(symm_comm_t *comm, symm_mem_t *mem) {
  nvsh_state_t *st = symm_backend_state(comm);
  if (!st || !mem->base) return;
  int gone = symm_comm_first_gone(comm);
  if (gone >= 0) {
    SYMM_WARN(BACKEND, "nvshmem: rank %d's process is gone; allocation %llu is not given back "
              "(nvshmem_free is collective and would wait for it)", gone,
              (unsigned long long)mem->id);
  } else {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    nvsh_boot_use(comm);
    st->lib->free(mem->base);
    nvsh_boot_use(NULL);
    if (entered) symm_gpu_leave(st->gpu, saved);
  }
  mem->base = NULL;
  mem->priv = NULL;
}

/* Which heap call made the memory, and its symmetric address (for
 * nvshmem_ptr): an allocation's own, or a registration's (mem->user). */
static uint64_t nvsh_nth(const symm_mem_t *mem) {
  return mem->user ? ((const nvsh_user_t *)mem->priv)->nth : (uint64_t)(uintptr_t)mem->priv;
}

static const void *nvsh_sym(const symm_mem_t *mem) {
  return mem->user ? ((const nvsh_user_t *)mem->priv)->sym : mem->base;
}

symm_result_t nvsh_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  (void)comm;
  nvsh_alloc_info_t a = {nvsh_nth(mem)};
  memcpy(info->blob, &a, sizeof a);
  return SYMM_SUCCESS;
}

symm_result_t nvsh_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  nvsh_state_t *st = symm_backend_state(comm);
  nvsh_alloc_info_t a;
  memcpy(&a, info->blob, sizeof a);
  const uint64_t mine = nvsh_nth(local);
  if (a.nth != mine || info->alloc_bytes != local->alloc_bytes)
    return symm_error(SYMM_ERR_MISMATCH, "nvshmem: rank %d's tensor is nvshmem_malloc #%llu of "
                      "%llu bytes, this rank's #%llu of %zu: not the same symmetric allocation",
                      peer, (unsigned long long)a.nth, (unsigned long long)info->alloc_bytes,
                      (unsigned long long)mine, local->alloc_bytes);
  map->base = st->lib->ptr(nvsh_sym(local), peer);
  map->priv = NULL;
  const bool reachable = nvsh_peer_reachable(comm, peer);
  if (!map->base && reachable)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmem_ptr gives no address for rank %d's "
                      "allocation %llu although it did for the heap at start-up", peer,
                      (unsigned long long)mine);
  if (!reachable) map->base = NULL; /* NVSHMEM's transports only: no view, no signal */
  return SYMM_SUCCESS;
}

void nvsh_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  (void)comm;
  map->base = NULL; /* nvshmem_ptr's addresses are NVSHMEM's until nvshmem_free */
}
