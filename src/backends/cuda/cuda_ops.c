/* The cuda backend's ops table: cuMemAlloc memory shared with CUDA IPC
 * handles through the rendezvous exchange; no contiguous view (each
 * allocation opens at an address of the driver's choosing).  Collectives,
 * signals, device copies and zeroing come from the GPU engine (mem_kind). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/cuda/cuda.h"

const symm_backend_ops_t symm_cuda_ops = {
    .version = 6,
    .name = "cuda",
    .id = SYMM_BACKEND_CUDA,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .device_peer_array = true, .registers_user = true},
    SYMM_BACKEND_REQUIRED_MEMBERS(cuda),
    .startup = cuda_startup,
    .export_mem = cuda_export_mem,
    .describe = cuda_describe,
    .register_user = cuda_register_user,
    .deregister_user = cuda_deregister_user,
};
