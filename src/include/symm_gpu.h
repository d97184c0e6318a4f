/*
 * The GPU engine as a backend sees it (src/gpu/).  For a backend whose
 * memory is device memory (ops->mem_kind == SYMM_MEM_DEVICE) the core
 * starts the GPU engine before the backend's init: the CUDA driver loaded
 * at run time, the rank's device picked, its primary context retained and
 * current, a private stream, the embedded kernels, every rank's device
 * identity exchanged.  The backend then only makes and shares memory; the
 * engine runs every collective and signal on the peer pointers the
 * backend's map_peer returns.  Not installed.
 */
#ifndef SYMM_GPU_H
#define SYMM_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gpu/cu_driver.h"
#include "symm_error.h"

typedef struct symm_gpu symm_gpu_t;

/* For a GPU backend's probe (no engine, no context yet): the driver loaded
 * and initialised, and *count devices; NULL with the reason in why ("no
 * CUDA device visible (...)", "libcuda.so.1 not found ...") otherwise. */
const symm_cu_driver_t *symm_gpu_probe(char *why, size_t why_len, int *count);
/* For a GPU backend's describe: prints the driver line ("driver: PATH,
 * CUDA driver API X.Y") and the device count to out, and returns the
 * driver with *count devices; NULL (having printed why, or nothing when
 * the driver does not load: the probe's reason shows already). */
const symm_cu_driver_t *symm_gpu_describe_driver(FILE *out, int *count);
/* A device attribute (NCU_DEV_ATTR_*), 0 where the driver cannot say. */
int symm_gpu_attr(const symm_cu_driver_t *drv, int attr, ncu_device dev);

/* The communicator's GPU engine; NULL for a communicator on CPU memory. */
symm_gpu_t *symm_gpu_of(const symm_comm_t *comm);

/* The driver's entry points (never NULL for an engine that exists). */
const symm_cu_driver_t *symm_gpu_driver(const symm_gpu_t *gpu);
/* This rank's device: its ordinal in this process and the driver's handle. */
int symm_gpu_ordinal(const symm_gpu_t *gpu);
ncu_device symm_gpu_device(const symm_gpu_t *gpu);
/* A non-blocking stream of the engine's own (zeroing, small copies): it
 * never waits behind the application's work. */
ncu_stream symm_gpu_stream(const symm_gpu_t *gpu);
/* The device's primary context, which the engine retains and leaves
 * current on the thread that created the communicator. */
ncu_context symm_gpu_context(const symm_gpu_t *gpu);
/* Rank r's device as an ordinal of this process (-1: not visible here),
 * and whether this rank's device can access it (1 yes, 0 no, -1 unknown).
 * Valid from the backend's startup on. */
int symm_gpu_peer_ordinal(const symm_gpu_t *gpu, int r);
int symm_gpu_peer_access(const symm_gpu_t *gpu, int r);
/* Every rank's device PCI bus id ("0000:19:00.0"), from startup on. */
const char *symm_gpu_peer_bus_id(const symm_gpu_t *gpu, int r);

/* Makes the communicator's context current on this thread; *saved gets
 * what symm_gpu_leave puts back (the caller's context). */
symm_result_t symm_gpu_enter(symm_gpu_t *gpu, ncu_context *saved);
void symm_gpu_leave(symm_gpu_t *gpu, ncu_context saved);

/* Zeroes `bytes` of device memory at ptr on the engine's stream and waits
 * for it (a signal pad, before any peer can see it).  Enters the context
 * itself. */
symm_result_t symm_gpu_zero(symm_gpu_t *gpu, ncu_deviceptr ptr, size_t bytes);

/*
 * Copies `bytes` of host memory to a new device allocation on the
 * communicator's GPU (cuMemAlloc + copy on the engine's own stream) and
 * returns its address in *dev: e.g. the world_size peer data pointers, for
 * kernels that take a `void **`.  Local.  Free with symm_gpu_device_free.
 * The engine's device_copy / device_free; the tests call them directly.
 * SYMM_ERR_UNSUPPORTED for a communicator without the GPU engine.
 */
symm_result_t symm_gpu_device_copy(symm_comm_t *comm, const void *host, size_t bytes, void **dev);
void symm_gpu_device_free(symm_comm_t *comm, void *dev);

/* The cuMemCreate mapping that holds the user's [ptr, ptr + nbytes) on
 * this rank's GPU (gpu_vmm.c), for providers that register only such
 * memory: its mapping's start and size and the handle types the physical
 * allocation was created exportable as.  SYMM_ERR_INVALID_ARG with the
 * reason for memory that is not device memory, not VMM (cuMemAlloc, a
 * caching allocator's), of another GPU, or not within one mapping.  Local;
 * enters the context itself. */
typedef struct symm_gpu_vmm {
  ncu_deviceptr start;
  size_t size;
  int handle_types;
} symm_gpu_vmm_t;
symm_result_t symm_gpu_vmm_of(symm_gpu_t *gpu, const void *ptr, size_t nbytes,
                              symm_gpu_vmm_t *out);

/* Records a failed driver call as the thread's error, "<what> failed:
 * CUDA_ERROR_X (text)", raised where the call failed (symm_error), and
 * returns SYMM_ERR_NO_MEMORY for out-of-memory, else SYMM_ERR_BACKEND. */
#define symm_gpu_fail(res, ...) \
  symm_gpu_fail_at(__FILE__, __LINE__, SYMM_LOG_SUBSYS, (res), __VA_ARGS__)
symm_result_t symm_gpu_fail_at(const char *file, int line, unsigned subsys, ncu_result res,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A driver call that must succeed, else `res` = symm_gpu_fail(...) and
 * goto label. */
#define SYMM_CU_GOTO(call, res, label, ...)                                    \
  do {                                                                         \
    ncu_result cu_ = (call);                                                   \
    if (cu_ != NCU_SUCCESS) {                                                  \
      (res) = symm_gpu_fail(cu_, __VA_ARGS__);                                 \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#endif /* SYMM_GPU_H */
