/*
 * State shared by the files of the cuda backend: device memory from the
 * driver's cuMemAlloc, shared with CUDA IPC handles that travel in the
 * rendezvous exchange blob.  No fd passes between processes, so ranks in
 * separate containers or PID namespaces (one host, one IPC namespace) can
 * share memory where the native backend's Unix-socket fd exchange cannot.
 * The device, its context and every collective and signal are the GPU
 * engine's (symm_gpu.h); this backend makes memory and shares it.
 */
#ifndef SYMM_CUDA_BACKEND_H
#define SYMM_CUDA_BACKEND_H

#include "symm_backend.h"
#include "symm_gpu.h"

/* Layout granularity the core rounds to: the signal pad is one page at
 * offset 0 and the data starts one page in, so a small tensor costs a pad
 * of 4 KiB, not a whole granule. */
#define CUDA_LAYOUT_GRANULARITY ((size_t)SYMM_SIGNAL_PAD_MIN_BYTES)
/* What each cuMemAlloc asks of the driver: the layout rounded up to 2 MiB.
 * The driver may sub-allocate smaller blocks from one 2 MiB page, and an
 * IPC handle shares the whole page, so a peer would see this process's
 * other allocations in it; CUDA's guide asks for 2 MiB-aligned sizes for
 * memory shared over IPC.  The tail behind alloc_bytes stays unused. */
#define CUDA_IPC_ROUND ((size_t)2 << 20)

/* The exchange blob of one allocation (symm_exchange_info_t.blob). */
typedef struct cuda_blob {
  ncu_ipc_mem_handle ipc;   /* cuIpcGetMemHandle of the allocation's base */
  char mark[16];            /* CUDA_BLOB_MARK */
  uint64_t process;         /* the exporter's process token (cuda_process_token) */
  uint64_t driver_bytes;    /* bytes the exporter's cuMemAlloc made */
} cuda_blob_t;
#define CUDA_BLOB_MARK "symm-cuda-ipc"
_Static_assert(sizeof(cuda_blob_t) <= SYMM_EXCHANGE_BLOB_BYTES,
               "the IPC handle and its marks must fit the exchange blob");

/* symm_backend_state of a cuda communicator. */
typedef struct cuda_state {
  symm_gpu_t *gpu;             /* the communicator's GPU engine */
  const symm_cu_driver_t *drv; /* symm_gpu_driver(gpu) */
  int ordinal;                 /* symm_gpu_ordinal(gpu) */
  int rank, size;
} cuda_state_t;

/* One local allocation (symm_mem_t.priv). */
typedef struct cuda_alloc {
  ncu_deviceptr ptr;        /* cuMemAlloc's result: pad at 0, data behind */
  size_t driver_bytes;      /* what was asked of cuMemAlloc */
  ncu_ipc_mem_handle ipc;   /* made at alloc: rendezvous only opens */
} cuda_alloc_t;

/* A random token of this process, the same for every communicator: tells
 * a handle of this process (which the driver will not open here) from a
 * peer's. */
uint64_t cuda_process_token(void);

/* Whether this device can export an IPC handle, tried for real on one
 * CUDA_IPC_ROUND allocation (drivers and platforms without IPC support
 * say so only there).  Context current.  false with the reason in why. */
bool cuda_ipc_export_works(const symm_cu_driver_t *drv, char *why, size_t why_len);

/* Ops implemented in the files of this folder (cuda_ops.c tables them). */
SYMM_BACKEND_DECLARE_REQUIRED(cuda);
symm_result_t cuda_startup(symm_comm_t *comm, const symm_blob_t *all);
void cuda_describe(FILE *out);
symm_result_t cuda_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
/* cuda_register.c: the user's cuMemAlloc memory (symm_tensor_register). */
symm_result_t cuda_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem);
void cuda_deregister_user(symm_comm_t *comm, symm_mem_t *mem);

#endif /* SYMM_CUDA_BACKEND_H */
