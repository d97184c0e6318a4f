/* The GPU engine as a backend reads it (symm_gpu.h). */
#include "gpu/gpu.h"

symm_gpu_t *symm_gpu_of(const symm_comm_t *comm) {
  if (!comm || symm_comm_engine(comm) != &symm_gpu_engine) return NULL;
  return symm_engine_state(comm);
}

const symm_cu_driver_t *symm_gpu_driver(const symm_gpu_t *gpu) { return gpu->drv; }
int symm_gpu_ordinal(const symm_gpu_t *gpu) { return gpu->ordinal; }
ncu_device symm_gpu_device(const symm_gpu_t *gpu) { return gpu->dev; }
ncu_stream symm_gpu_stream(const symm_gpu_t *gpu) { return gpu->stream; }
ncu_context symm_gpu_context(const symm_gpu_t *gpu) { return gpu->ctx; }

int symm_gpu_peer_ordinal(const symm_gpu_t *gpu, int r) {
  return gpu->peer_ordinal && r >= 0 && r < gpu->size ? gpu->peer_ordinal[r] : -1;
}

int symm_gpu_peer_access(const symm_gpu_t *gpu, int r) {
  return gpu->peer_access && r >= 0 && r < gpu->size ? gpu->peer_access[r] : -1;
}

const char *symm_gpu_peer_bus_id(const symm_gpu_t *gpu, int r) {
  return gpu->ranks && r >= 0 && r < gpu->size ? gpu->ranks[r].bus_id : "?";
}
