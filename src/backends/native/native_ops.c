/* The native backend's ops table: CUDA VMM memory shared as POSIX fds (or
 * fabric handles), with contiguous views; the functions live in the other
 * native_*.c files, one per object.  Collectives, signals, device copies
 * and zeroing come from the GPU engine (mem_kind). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/native/native.h"

const symm_backend_ops_t symm_native_ops = {
    .version = 1,
    .name = "native",
    .id = SYMM_BACKEND_NATIVE,
    .mem_kind = SYMM_MEM_DEVICE,
    .caps = {.takes_stream = true, .contiguous_view = true, .device_peer_array = true},
    .probe = native_probe,
    .init = native_init,
    .startup = native_startup,
    .fini = native_fini,
    .granularity = native_granularity,
    .alloc = native_alloc,
    .free = native_free,
    .export_mem = native_export_mem,
    .map_peer = native_map_peer,
    .unmap_peer = native_unmap_peer,
    .contiguous_map = native_contiguous_map,
    .contiguous_unmap = native_contiguous_unmap,
    .validate = native_validate,
    .describe = native_describe,
};
