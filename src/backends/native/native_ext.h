/*
 * Native-backend functions that the ops table reaches (device_copy and
 * device_free, members of version 2) or that only the GPU tests call (the
 * pad heap's statistics).  Each takes a communicator whose
 * backend is native; anything else gets SYMM_ERR_UNSUPPORTED.
 */
#ifndef SYMM_NATIVE_EXT_H
#define SYMM_NATIVE_EXT_H

#include "core/internal.h"

/*
 * Copies `bytes` of host memory to a new device allocation on the
 * communicator's GPU (cuMemAlloc + copy on the backend's own stream) and
 * returns its address in *dev: e.g. the world_size peer data pointers, for
 * kernels that take a `void **`.  Local.  Free with native_device_free.
 */
symm_result_t native_device_copy(symm_comm_t *comm, const void *host, size_t bytes, void **dev);
void native_device_free(symm_comm_t *comm, void *dev);

/*
 * The pad heap of a native communicator (signal pads are slots of heap
 * chunks that stay until symm_comm_destroy): our chunks, their slots in
 * use, and the peers' chunks imported here.  For leak checks that must
 * tell these from leaks.  Local.
 */
typedef struct native_heap_info {
  long chunks, slots_used, slots_total, peer_chunks;
  size_t chunk_bytes;
} native_heap_info_t;
symm_result_t native_heap_info(symm_comm_t *comm, native_heap_info_t *info);

#endif /* SYMM_NATIVE_EXT_H */
