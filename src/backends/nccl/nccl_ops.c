/* The nccl backend's ops table: ncclMemAlloc memory registered as NCCL
 * symmetric windows, peers' pointers from NCCL where it maps them, NCCL's
 * own collectives where it does not, the ncclComm_t for the user,
 * groups from ncclCommSplit, and windows on the user's own VMM memory
 * (symm_tensor_register).  The
 * functions live in the other nccl_*.c files.  Chosen by name only
 * (SYMM_BACKEND=nccl): `auto` never starts NCCL by itself. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/nccl/nccl.h"

const symm_backend_ops_t symm_nccl_ops = {
    .version = 6,
    .name = "nccl",
    .id = SYMM_BACKEND_NCCL,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .registers = true, .device_peer_array = true,
             .backend_handle = true, .registers_user = true},
    .by_name_only = true,
    SYMM_BACKEND_REQUIRED_MEMBERS(nccl),
    .startup = nccl_startup,
    .export_mem = nccl_export_mem,
    .backend_handle = nccl_backend_handle,
    .describe = nccl_describe,
    .register_mem = nccl_register,
    .deregister_mem = nccl_deregister,
    .peer_reachable = nccl_peer_reachable,
    .collective = nccl_collective,
    .unreachable_why = nccl_unreachable_why,
    .split_ready = nccl_split_ready,
    .split = nccl_split,
    .split_release = nccl_split_release,
    .register_user = nccl_register_user,
    .deregister_user = nccl_deregister_user,
    .check_user = nccl_check_user,
};
