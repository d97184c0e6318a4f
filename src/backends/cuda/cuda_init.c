/*
 * cuda backend lifecycle: probe (a driver, a device, IPC support), init (on
 * the device the GPU engine picked: unified addressing and one IPC export
 * tried for real), startup (notes peers that look like other hosts), fini.
 * No blob is published: every rank's device is the GPU engine's business,
 * and the handles travel per allocation in the exchange blob.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda.h"

static uint64_t cuda_token;
static pthread_once_t cuda_token_once = PTHREAD_ONCE_INIT;

static void cuda_token_make(void) {
  do symm_random_bytes(&cuda_token, sizeof cuda_token);
  while (cuda_token == 0);
}

uint64_t cuda_process_token(void) {
  pthread_once(&cuda_token_once, cuda_token_make);
  return cuda_token;
}

bool cuda_ipc_export_works(const symm_cu_driver_t *drv, char *why, size_t why_len) {
  ncu_deviceptr p = 0;
  ncu_result cu = drv->cuMemAlloc(&p, CUDA_IPC_ROUND);
  if (cu != NCU_SUCCESS) {
    snprintf(why, why_len, "cuMemAlloc(%zu bytes) failed: %s", CUDA_IPC_ROUND, symm_cu_error(cu));
    return false;
  }
  ncu_ipc_mem_handle h;
  cu = drv->cuIpcGetMemHandle(&h, p);
  drv->cuMemFree(p);
  if (cu != NCU_SUCCESS) {
    snprintf(why, why_len, "cuIpcGetMemHandle failed: %s", symm_cu_error(cu));
    return false;
  }
  return true;
}

/* ------------------------------------------------------------------ probe */

symm_result_t cuda_probe(char *why, size_t why_len) {
  char reason[512] = "";
  int count = 0, ipc = 0;
  const symm_cu_driver_t *drv = symm_gpu_probe(reason, sizeof reason, &count);
  if (!drv) goto unusable;
  /* The driver's rule for IPC: devices with unified addressing, on Linux. */
  for (int i = 0; i < count; i++) {
    ncu_device dev;
    if (drv->cuDeviceGet(&dev, i) == NCU_SUCCESS &&
        symm_gpu_attr(drv, NCU_DEV_ATTR_UNIFIED_ADDRESSING, dev))
      ipc++;
  }
  if (!ipc) {
    snprintf(reason, sizeof reason,
             "none of the %d CUDA device(s) supports CUDA IPC (it needs unified addressing: "
             "CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING=0)", count);
    goto unusable;
  }
  return SYMM_SUCCESS;
unusable:
  if (why && why_len) snprintf(why, why_len, "%s", reason);
  return SYMM_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------------------- init */

symm_result_t cuda_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  (void)caps, (void)blob;
  cuda_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "cuda: out of memory");
  symm_backend_set_state(comm, st); /* cuda_fini frees it after a failure too */
  st->gpu = symm_gpu_of(comm);
  if (!st->gpu) return symm_error(SYMM_ERR_INTERNAL, "cuda: the GPU engine is not started");
  st->drv = symm_gpu_driver(st->gpu);
  st->ordinal = symm_gpu_ordinal(st->gpu);
  st->rank = symm_comm_rank(comm);
  st->size = symm_comm_size(comm);
  char name[128] = "?";
  st->drv->cuDeviceGetName(name, (int)sizeof name, symm_gpu_device(st->gpu));
  if (!symm_gpu_attr(st->drv, NCU_DEV_ATTR_UNIFIED_ADDRESSING, symm_gpu_device(st->gpu)))
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "cuda: GPU %d (%s) lacks unified addressing, which CUDA IPC needs",
                      st->ordinal, name);
  /* The engine left the device's context current. */
  char why[384];
  if (!cuda_ipc_export_works(st->drv, why, sizeof why))
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "cuda: GPU %d (%s) cannot export CUDA IPC handles here (%s); the native "
                      "backend shares memory without CUDA IPC", st->ordinal, name, why);
  return SYMM_SUCCESS;
}

/* IPC handles name memory of this host's GPUs only.  Host names can differ
 * between containers of one host, which is where this backend is meant to
 * run, so a differing name is no reason to refuse: map_peer reports the
 * rank whose handle does not open. */
symm_result_t cuda_startup(symm_comm_t *comm, const symm_blob_t *all) {
  (void)all;
  cuda_state_t *st = symm_backend_state(comm);
  for (int r = 0; r < st->size; r++)
    if (!symm_comm_peer_same_host(comm, r))
      SYMM_INFO(BACKEND, "cuda: rank %d has another host name than rank %d; its CUDA IPC handles "
                "open only if it runs on this machine", r, st->rank);
  SYMM_INFO(BACKEND, "cuda: rank %d on GPU %d (%s), CUDA IPC, allocations rounded to %zu bytes",
            st->rank, st->ordinal, symm_gpu_peer_bus_id(st->gpu, st->rank), CUDA_IPC_ROUND);
  return SYMM_SUCCESS;
}

void cuda_fini(symm_comm_t *comm) {
  /* Every tensor is freed and every peer's handle closed (the core's
   * unmap_peer) before fini: only the state is left. */
  free(symm_backend_state(comm));
  symm_backend_set_state(comm, NULL);
}

size_t cuda_granularity(symm_comm_t *comm) {
  (void)comm;
  return CUDA_LAYOUT_GRANULARITY;
}
