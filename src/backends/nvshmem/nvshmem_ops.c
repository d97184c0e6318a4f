/* The nvshmem backend's ops table: memory from NVSHMEM's symmetric heap
 * (collective alloc and free), peers by nvshmem_ptr, NVSHMEM's own team
 * collectives where a peer is beyond load/store, the user's VMM memory
 * by nvshmemx_buffer_register_symmetric.  Everything else (signals,
 * the collectives between reachable peers, device copies, zeroing) comes
 * from the GPU engine (mem_kind). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/nvshmem/nvshmem.h"

const symm_backend_ops_t symm_nvshmem_ops = {
    .version = 6,
    .name = "nvshmem",
    .id = SYMM_BACKEND_NVSHMEM,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .collective_alloc = true, .collective_free = true,
             .device_peer_array = true, .registers_user = true},
    /* A job that links NVSHMEM itself may not mean to start it through us. */
    .by_name_only = true,
    SYMM_BACKEND_REQUIRED_MEMBERS(nvsh),
    .startup = nvsh_startup,
    .export_mem = nvsh_export_mem,
    .describe = nvsh_describe,
    .peer_reachable = nvsh_peer_reachable,
    .collective = nvsh_collective,
    .register_user = nvsh_register_user,
    .deregister_user = nvsh_deregister_user,
    .check_user = nvsh_check_user,
};
