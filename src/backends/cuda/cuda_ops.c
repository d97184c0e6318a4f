/* The cuda backend's ops table: cuMemAlloc memory shared with CUDA IPC
 * handles through the rendezvous exchange; no contiguous view (each
 * allocation opens at an address of the driver's choosing).  Collectives,
 * signals, device copies and zeroing come from the GPU engine (mem_kind). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/cuda/cuda.h"

const symm_backend_ops_t symm_cuda_ops = {
    .version = 1,
    .name = "cuda",
    .id = SYMM_BACKEND_CUDA,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .device_peer_array = true},
    .probe = cuda_probe,
    .init = cuda_init,
    .startup = cuda_startup,
    .fini = cuda_fini,
    .granularity = cuda_granularity,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .export_mem = cuda_export_mem,
    .map_peer = cuda_map_peer,
    .unmap_peer = cuda_unmap_peer,
    .describe = cuda_describe,
};
