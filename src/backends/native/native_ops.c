/* The native backend's ops table: CUDA VMM memory shared as POSIX fds (or
 * fabric handles), with contiguous views; the functions live in the other
 * native_*.c files, one per object.  Collectives, signals, device copies
 * and zeroing come from the GPU engine (mem_kind). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/native/native.h"

const symm_backend_ops_t symm_native_ops = {
    .version = 6,
    .name = "native",
    .id = SYMM_BACKEND_NATIVE,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .contiguous_view = true, .device_peer_array = true,
             .registers_user = true},
    SYMM_BACKEND_REQUIRED_MEMBERS(native),
    .startup = native_startup,
    .export_mem = native_export_mem,
    .contiguous_map = native_contiguous_map,
    .contiguous_unmap = native_contiguous_unmap,
    .validate = native_validate,
    .describe = native_describe,
    .register_user = native_register_user,
    .deregister_user = native_deregister_user,
};
