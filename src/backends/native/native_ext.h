/*
 * Native-backend functions that only the tests call: the pad heap's
 * statistics.  Each takes a communicator whose backend is native; anything
 * else gets SYMM_ERR_UNSUPPORTED.  (The device copy of host data the GPU
 * tests use is the GPU engine's: symm_gpu_device_copy, symm_gpu.h.)
 */
#ifndef SYMM_NATIVE_EXT_H
#define SYMM_NATIVE_EXT_H

#include "symm_backend.h"

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
