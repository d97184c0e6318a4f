/* The native backend's ops table: CUDA VMM memory shared as POSIX fds (or
 * fabric handles), with contiguous views; the functions live in the other
 * native_*.c files, one per object. */
#include "backends/native/native.h"

const symm_backend_ops_t symm_native_ops = {
    .version = 7,
    .name = "native",
    .id = SYMM_BACKEND_NATIVE,
    .probe = native_probe,
    .init = native_init,
    .startup = native_coll_startup,
    .fini = native_coll_fini, /* then native_fini */
    .granularity = native_granularity,
    .alloc = native_alloc,
    .free = native_free,
    .export_mem = native_export_mem,
    .map_peer = native_map_peer,
    .unmap_peer = native_unmap_peer,
    .contiguous_map = native_contiguous_map,
    .contiguous_unmap = native_contiguous_unmap,
    .validate = native_validate,
    .native_handle = NULL,
    .reset_pad = native_reset_pad,
    .describe = native_describe,
    .device_copy = native_device_copy,
    .device_free = native_device_free,
    .collective = native_collective,
    .poll_async_error = native_poll_async_error,
    .signal = native_signal,
    .allreduce_algo = native_allreduce_algo,
    .scratch_bytes = native_scratch_bytes,
    .abstain = native_abstain,
};
