/*
 * State shared by the files of the GPU engine (src/gpu/).  Not seen by the
 * core, which drives the engine through symm_gpu_engine (symm_engine.h),
 * nor by the backends, which see symm_gpu.h.  One file per object:
 *   gpu_engine.c       the table, init / startup / fini, the accessors
 *   gpu_context.c      entering and leaving the device's context, errors
 *   gpu_module.c       the kernel module (embedded or SYMM_COLL_KERNELS)
 *   gpu_coll_plan.c    algorithm, kernel, grid and scratch choices
 *   gpu_coll_launch.c  parameter blocks, launch with PDL, collective, abstain
 *   gpu_coll_a2av.c    all-to-all-v's checks and parameters
 *   gpu_coll_ce.c      the copy-engine collectives (SYMM_ALGO_CE)
 *   gpu_signal.c       stream-ordered signals (symm_signal_op)
 *   gpu_async.c        the pinned error record the kernels write, its poll
 *   gpu_device_copy.c  device copies of host data, zeroing
 */
#ifndef SYMM_GPU_ENGINE_PRIV_H
#define SYMM_GPU_ENGINE_PRIV_H

#include "kernels/coll_abi.h"
#include "symm_backend.h"
#include "symm_engine.h"
#include "symm_gpu.h"

enum { GPU_COLL_KINDS = 11, GPU_COLL_DTYPES = SYMM_DTYPE_COUNT_ };

/* Bytes of a PCI bus id as the engine keeps and publishes it. */
#define GPU_BUS_ID_BYTES 32

/* What the engine knows of rank r's device (from r's init blob). */
typedef struct gpu_rank {
  int ordinal;                    /* in r's process */
  uint64_t kernels;               /* gpu_module.c: which kernels r runs */
  char bus_id[GPU_BUS_ID_BYTES];  /* "0000:19:00.0", NUL-terminated */
  uint8_t uuid[16];
} gpu_rank_t;

/* symm_engine_state of a communicator on device memory. */
struct symm_gpu {
  const char *name;         /* the backend's, for messages ("native") */
  const symm_cu_driver_t *drv;
  ncu_device dev;
  int ordinal;
  ncu_context ctx;          /* the device's primary context (retained) */
  bool ctx_retained;
  ncu_context caller_ctx;   /* current on this thread before init made ctx current */
  bool caller_saved;        /* caller_ctx is known (put back if init fails) */
  ncu_stream stream;        /* private non-blocking stream */
  int rank, size;
  gpu_rank_t *ranks;        /* [size], from startup on */
  int *peer_ordinal;        /* [size] each rank's GPU as seen here, or -1 */
  int *peer_access;         /* [size] cuDeviceCanAccessPeer from ours, -1 unknown */

  /* Kernels (gpu_module.c).  When they cannot run here (no kernels in this
   * build, a driver without module support) the communicator still works
   * and every collective and signal says why. */
  bool ready;
  char why[256];                    /* why collectives are unavailable */
  uint64_t kernels;                 /* 0: the embedded ones; 1: the SYMM_COLL_KERNELS file
                                       could not be read; else a hash of it (never 0 or 1) */
  symm_result_t file_res;           /* the read's error, reported at startup */
  char file_msg[1024];
  const symm_cu_coll_driver_t *cd;
  ncu_module module;
  ncu_function fn[GPU_COLL_KINDS][GPU_COLL_DTYPES][SYMM_REDUCE_COUNT_];
  ncu_function signal_fn;           /* symm_signal_op, loaded on first use */
  bool ll128;                       /* every pair of ranks' GPUs is NVLink-class */
  bool pdl;                         /* launch with programmatic dependent launch */
  unsigned max_blocks;              /* SYMM_COLL_MAX_BLOCKS, 0: no limit */
  unsigned ll_threads;              /* SYMM_COLL_LL_THREADS, 0: by size */

  /* The error record (gpu_async.c): pinned, mapped for the device. */
  volatile symm_coll_error_t *err;
  ncu_deviceptr err_dev;

  /* Launches (gpu_coll_launch.c). */
  const symm_tensor_t *scratch;     /* scratch `base` describes */
  symm_coll_params_t base;          /* per-scratch parameters: pointers, layout, nonce */
};

/* gpu_module.c: init reads SYMM_COLL_KERNELS (a failed read is kept for
 * startup, so that every rank still publishes and learns which rank could
 * not read its file) and loads the kernels, leaving them unavailable, with
 * the reason in g->why, where they cannot run.  Errors for a kernel file
 * that the driver refuses are returned.  Context current. */
symm_result_t gpu_module_load(symm_comm_t *comm, symm_gpu_t *g);
/* Startup: every rank must run the same kernels (SYMM_ERR_MISMATCH naming
 * a rank that differs), and a rank whose file could not be read fails. */
symm_result_t gpu_module_agree(symm_comm_t *comm, symm_gpu_t *g);
void gpu_module_unload(symm_gpu_t *g);

/* gpu_async.c: the error record, allocated by gpu_module_load (false with
 * g->why set when the driver cannot), freed by gpu_module_unload. */
bool gpu_async_alloc(symm_gpu_t *g);
void gpu_async_free(symm_gpu_t *g);
symm_result_t gpu_poll_async_error(symm_comm_t *comm);

/* gpu_coll_plan.c. */
extern const char *const gpu_coll_kernel_names[GPU_COLL_KINDS];
bool gpu_coll_reducing(int kind);
/* gpu_coll_launch.c: kernel `kind`'s function for dtype dti and op (both
 * ignored for kernels that do not reduce), looked up in the module on
 * first use; SYMM_ERR_BACKEND where the module lacks it. */
symm_result_t gpu_coll_function(symm_gpu_t *g, int kind, int dti, int op, ncu_function *fn);
/* The kernel (SYMM_COLL_KERNEL_*, -1 for an unknown collective) that runs
 * collective `coll`, its staging need and segment (gpu_coll_plan.c). */
int gpu_coll_plan(const symm_gpu_t *g, int coll, symm_algo_t algo, uint64_t count, uint64_t es,
                  int world, uint64_t *seg, uint64_t *stage);
uint64_t gpu_coll_scratch_bytes(uint64_t stage);
/* All-to-all-v's grid (the same on every rank: world, n_experts and the
 * settings decide it) and staging layout (coll_abi.h) for a rank that
 * sends send_bytes at most. */
typedef struct gpu_a2av_layout {
  unsigned grid;
  uint64_t table_bytes, plan_bytes; /* one block's */
  uint64_t data_off;                /* the staged rows in a staging half */
  uint64_t stage;                   /* bytes of a staging half it needs */
} gpu_a2av_layout_t;
void gpu_coll_a2av_layout(const symm_gpu_t *g, int world, int n_experts, uint64_t send_bytes,
                          gpu_a2av_layout_t *l);
uint64_t gpu_coll_ll_region(int world);
uint64_t gpu_coll_ll128_region(int world);
uint64_t gpu_coll_ll128_lines(uint64_t bytes);
unsigned gpu_coll_grid(uint64_t work_bytes, uint64_t per_block, unsigned channels);
unsigned gpu_coll_bw_blocks(int kind, int channels, uint64_t seg_bytes);
unsigned gpu_coll_ll_launch(const symm_gpu_t *g, uint64_t units, unsigned per_thread,
                            unsigned *threads);
/* Most blocks of the LL kernels, and of any kernel through
 * SYMM_COLL_MAX_BLOCKS. */
#define GPU_COLL_LL_MAX_BLOCKS 1024u
/* Usable collectives of this communicator in *g, or why not. */
symm_result_t gpu_coll_usable(const symm_comm_t *comm, symm_gpu_t **g);
size_t gpu_scratch_fixed(symm_comm_t *comm);
symm_algo_t gpu_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes);
symm_result_t gpu_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes);

/* gpu_coll_launch.c. */
ncu_result gpu_launch(symm_gpu_t *g, ncu_function fn, unsigned grid, unsigned threads,
                      void *stream, void *params);
symm_result_t gpu_collective(symm_comm_t *comm, const symm_coll_args_t *args);
symm_result_t gpu_abstain(symm_comm_t *comm, const symm_coll_args_t *args);
/* The parameters a launch starts from, on a scratch with at least `stage`
 * staging bytes per half (grown, collectively, if needed). */
symm_result_t gpu_coll_base(symm_comm_t *comm, symm_gpu_t *g, uint64_t stage,
                            symm_coll_params_t *p);

/* Whether [ptr, ptr + bytes) lies, on this rank, in a rendezvoused tensor
 * of comm that every rank maps: then peer[r] is rank r's memory at the
 * same offset as this rank maps it, and *key a hash of the tensor and the
 * offset that is the same on every rank passing the same place. */
bool gpu_coll_symm_range(symm_comm_t *comm, const symm_gpu_t *g, const void *ptr,
                         uint64_t bytes, uint64_t peer[SYMM_COLL_MAX_WORLD], uint64_t *key);

/* gpu_coll_ce.c: engine->ce_collective, and the part of a call refused on
 * this rank (engine->abstain with args->algo SYMM_ALGO_CE). */
symm_result_t gpu_ce_collective(symm_comm_t *comm, const symm_coll_args_t *args);
symm_result_t gpu_ce_abstain(symm_comm_t *comm, const symm_coll_args_t *args);

/* gpu_coll_a2av.c: the public function a call of args->v came from (for
 * messages); the host's checks of an all-to-all-v call and its layout
 * (errors as the header says; SYMM_ERR_UNSUPPORTED past
 * SYMM_COLL_V_MAX_CHUNKS); the call's part of the parameters. */
const char *gpu_a2av_name(const symm_coll_v_t *v);
symm_result_t gpu_a2av_check(const symm_gpu_t *g, const symm_coll_args_t *args,
                             gpu_a2av_layout_t *l);
void gpu_a2av_fill(const symm_gpu_t *g, const symm_coll_args_t *args,
                   const gpu_a2av_layout_t *l, symm_coll_params_t *p);

/* gpu_signal.c; gpu_signal_launch: one launch of symm_signal_op with p. */
symm_result_t gpu_signal_launch(symm_gpu_t *g, symm_signal_params_t *p, void *stream);
symm_result_t gpu_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                         int channel, void *stream);

/* gpu_device_copy.c. */
/* engine->copy: cuMemcpyAsync on the caller's stream (unified addressing:
 * host, device and peers' mappings alike). */
symm_result_t gpu_copy(symm_comm_t *comm, void *dst, const void *src, size_t bytes,
                       void *stream);
symm_result_t gpu_zero(symm_comm_t *comm, void *ptr, size_t bytes);
symm_result_t gpu_write32(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                          void *stream);

#endif /* SYMM_GPU_ENGINE_PRIV_H */
