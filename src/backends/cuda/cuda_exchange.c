/*
 * Making allocations reachable across ranks with CUDA IPC: export_mem puts
 * the allocation's 64-byte IPC handle into the exchange blob, map_peer opens
 * the peer's handle (cuIpcOpenMemHandle maps the peer's whole allocation:
 * its pad at offset 0, the data at data_offset, which the core adds), and
 * unmap_peer closes it.  Nothing but the blob crosses between processes.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda.h"

symm_result_t cuda_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  (void)comm;
  const cuda_alloc_t *a = mem->priv;
  cuda_blob_t b;
  memset(&b, 0, sizeof b);
  b.ipc = a->ipc;
  memcpy(b.mark, CUDA_BLOB_MARK, sizeof CUDA_BLOB_MARK);
  b.process = cuda_process_token();
  b.driver_bytes = a->driver_bytes;
  memset(info->blob, 0, sizeof info->blob);
  memcpy(info->blob, &b, sizeof b);
  return SYMM_SUCCESS;
}

/* Why `peer`'s allocation cannot be opened here, before any driver call. */
static symm_result_t cuda_check_peer(const cuda_state_t *st, const symm_mem_t *local, int peer,
                                     const symm_exchange_info_t *info, const cuda_blob_t *b) {
  if (memcmp(b->mark, CUDA_BLOB_MARK, sizeof CUDA_BLOB_MARK) != 0)
    return symm_error(SYMM_ERR_PROTOCOL,
                      "cuda: rank %d sent an exchange blob without a CUDA IPC handle", peer);
  /* The user's memory (a registration) has no pad in front of its data. */
  const bool pad_ok = local->user || (info->data_offset >= local->pad_bytes &&
                                      info->pad_offset + local->pad_bytes <= info->data_offset);
  if (info->alloc_bytes == 0 || info->alloc_bytes > b->driver_bytes || !pad_ok ||
      info->data_offset >= info->alloc_bytes)
    return symm_error(SYMM_ERR_PROTOCOL,
                      "cuda: rank %d describes allocation %llu as %llu bytes (driver %llu) with "
                      "data at %llu and its signal pad at %llu", peer,
                      (unsigned long long)info->id, (unsigned long long)info->alloc_bytes,
                      (unsigned long long)b->driver_bytes, (unsigned long long)info->data_offset,
                      (unsigned long long)info->pad_offset);
  if (b->process == cuda_process_token())
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "cuda: rank %d runs in this process (rank %d's), and the driver opens CUDA "
                      "IPC handles only in another process; give each rank a process of its own",
                      peer, st->rank);
  if (symm_gpu_peer_access(st->gpu, peer) == 0)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "cuda: GPU %d cannot access rank %d's GPU %s (cuDeviceCanAccessPeer = 0: "
                      "no NVLink or PCIe peer path)", st->ordinal, peer,
                      symm_gpu_peer_bus_id(st->gpu, peer));
  return SYMM_SUCCESS;
}

symm_result_t cuda_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  cuda_state_t *st = symm_backend_state(comm);
  cuda_blob_t b;
  memcpy(&b, info->blob, sizeof b);
  SYMM_CHECK(cuda_check_peer(st, local, peer, info, &b));
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  ncu_deviceptr p = 0;
  uint64_t t0 = symm_now_ns();
  ncu_result cu = st->drv->cuIpcOpenMemHandle(&p, b.ipc, NCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  symm_gpu_leave(st->gpu, saved);
  if (cu != NCU_SUCCESS) {
    char hint[160] = "";
    if (!symm_comm_peer_same_host(comm, peer))
      snprintf(hint, sizeof hint, " (rank %d has another host name: CUDA IPC reaches this "
               "machine's GPUs only; nccl and nvshmem reach other hosts)", peer);
    return symm_gpu_fail(cu, "cuda: cuIpcOpenMemHandle of rank %d's allocation %llu (%llu bytes) "
                         "on GPU %d%s", peer, (unsigned long long)info->id,
                         (unsigned long long)b.driver_bytes, st->ordinal, hint);
  }
  map->base = (void *)(uintptr_t)p;
  map->peer_id = info->id;
  map->priv = NULL;
  SYMM_TRACE(BACKEND, "cuda: opened rank %d's allocation %llu (%llu bytes) at %p in %.0f us",
             peer, (unsigned long long)info->id, (unsigned long long)info->alloc_bytes, map->base,
             (double)(symm_now_ns() - t0) / 1e3);
  return SYMM_SUCCESS;
}

void cuda_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  cuda_state_t *st = symm_backend_state(comm);
  if (!st || !map->base) return;
  ncu_context saved = NULL;
  bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  ncu_result cu = st->drv->cuIpcCloseMemHandle((ncu_deviceptr)(uintptr_t)map->base);
  if (cu != NCU_SUCCESS)
    SYMM_WARN(BACKEND, "cuda: cuIpcCloseMemHandle(%p) failed: %s", map->base, symm_cu_error(cu));
  if (entered) symm_gpu_leave(st->gpu, saved);
  map->base = NULL;
}
