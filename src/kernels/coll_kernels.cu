/*
 * Collective kernels of the GPU engine, for every GPU backend.  Built into
 * a fatbin that the library embeds and loads through the driver API (no
 * CUDA runtime in libsymmem); every kernel is extern "C" so that the GPU engine finds it by
 * name with cuModuleGetFunction.
 *
 * One translation unit, in pieces included below in this order:
 * coll_ctx.cuh (the protocol context), coll_common.cuh (partitions,
 * dtypes, reduction and push helpers), coll_all_reduce.cuh (one-shot,
 * two-shot), coll_ll.cuh, coll_ll128.cuh, coll_reduce_scatter.cuh,
 * coll_copy.cuh (all-gather, broadcast, all-to-all), coll_a2av.cuh
 * (all-to-all-v), signal_kernels.cuh;
 * the reducing kernels' entry points are instantiated at the end.
 *
 * Protocol (see coll_abi.h for the layouts)
 *
 *  Epoch.  The local words of this rank's scratch pad hold `epoch`, the
 *  number of collective kernels this rank ran on this scratch.  Every block
 *  reads it at start (e = epoch + 1) and is counted once all its threads
 *  have issued that load; the block that completes the count stores e when
 *  it finishes.
 *  Every rank runs the same sequence of collectives, so ranks agree on e
 *  without the host passing any counter: graphs replay correctly.  A fresh
 *  scratch has a zeroed pad, so every rank restarts at e = 1 together.
 *
 *  Headers.  Block 0 of every kernel first *announces* {e, sig} into slot
 *  [rank][e & 1] of every peer's pad.  Block b (= channel b) writes the
 *  epoch e (top bit set: never 0) into header slot [phase][b][rank][e & 1]
 *  of every peer's pad, waits for it in the peers' slots in its own pad,
 *  zeroes them, then waits for the peers' announces.  A different sig means the ranks enqueued different
 *  collectives (kind, count, dtype, op, root, algorithm, grid): the block
 *  records SYMM_ERR_MISMATCH and skips the data phase.  A block whose
 *  header never comes (the peer runs a smaller grid, or the LL kernel)
 *  looks at the announce while it waits, so no block is left waiting.
 *  Headers are 4 bytes so that the 4 KiB pad holds 122 channels for 2
 *  ranks: the bandwidth kernels need about one block per SM.
 *
 *  Parity.  Every kernel waits for something every peer wrote at the start
 *  of the same epoch (headers, or LL packets).  So a peer that writes
 *  something of epoch e + 2 into our memory has seen our epoch e + 1 data,
 *  which we write only after our epoch e kernel finished, and anything
 *  indexed by e & 1 (header slots, staging halves, LL halves) is free again
 *  two epochs later; no "done" barrier is needed at the end of a kernel.
 *
 *  Staging.  The reductions push: each rank writes its input into its
 *  region of every peer's staging half (e & 1) before the header, so no
 *  read has to cross NVLink and come back.  The copy collectives (all-
 *  gather, broadcast, all-to-all) stage into their own half and peers pull
 *  after the header.  Outputs are written by each rank into its own recv
 *  buffer.
 *
 *  LL.  The low-latency all-reduce pushes its input into every peer's LL
 *  region as 16-byte packets of two {data, flag} halves, each written in
 *  one piece, so data and flag arrive together; the reader spins on the
 *  packet itself and zeroes it after use.  One kernel and no header
 *  exchange between ranks: the flag carries the call's signature, and a reader whose packets do not
 *  come looks at the peer's announce to tell a mismatch from a late peer.
 *  LL128 does the same with 128-byte lines of 120 data bytes and a flag.
 *
 *  Timeouts.  Every wait is bounded by timeout_ns against %globaltimer,
 *  counted from the first time a thread's wait looks at the clock (after
 *  its first 64 polls, coll_expired), not from kernel start; on expiry the
 *  kernel records SYMM_ERR_TIMEOUT (an unread earlier error keeps its
 *  fields, the later code goes to `more`) in the
 *  pinned error record, sets a sticky word in this rank's scratch pad, and
 *  finishes.  While that word is set, later kernels on this scratch skip
 *  every wait (fail fast) and report again; it is never cleared (the
 *  ranks are out of step), only a new scratch starts without it.
 *
 *  Launch.  gpu_launch (src/gpu/) sets programmatic stream serialization on
 *  sm_90+ code: a kernel may start while the one before it on the stream
 *  still runs.  Every kernel first waits for that kernel (griddepcontrol
 *  .wait, coll_after_prior_kernel) before it reads anything, epoch and
 *  inputs included, so the protocol above sees kernels in stream order;
 *  only the launch latency between them is hidden.
 *
 *  Determinism.  Where every rank reduces the same element (one-shot, LL)
 *  the ranks' values are combined in the same order on every rank (the
 *  starting rank depends on the element's warp, not on the rank), so all
 *  ranks get bit-identical results while different warps start at
 *  different peers.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kernels/coll_abi.h"
#include "symmem_device.cuh"

typedef symm_coll_params_t params_t;

/* The parameter blocks and the ABI version these kernels were built with,
 * as the sizes of three arrays: the GPU engine (gpu_module.c) compares them with its own
 * (cuModuleGetGlobal) before it uses the kernels. */
extern "C" {
__device__ unsigned char symm_coll_abi_params[sizeof(symm_coll_params_t)];
__device__ unsigned char symm_coll_abi_signal[sizeof(symm_signal_params_t)];
__device__ unsigned char symm_coll_abi_version[SYMM_COLL_ABI_VERSION];
}

#include "coll_ctx.cuh"
#include "coll_common.cuh"
#include "coll_all_reduce.cuh"
#include "coll_ll.cuh"
#include "coll_ll128.cuh"
#include "coll_reduce_scatter.cuh"
#include "coll_copy.cuh"
#include "coll_a2av.cuh"
#include "signal_kernels.cuh"

/* --------------------------------------------- reduction entry points */

/* One block per SM is what the header-exchanging kernels' grids need (at
 * most their channels); LL and LL128 run smaller blocks, several per SM.
 * Saying so changes ptxas's register choice: with nvcc 13.0 and
 * __launch_bounds__(512) alone it held the LL128 bf16 and f16 sum kernels
 * at 64 registers and spilled 20 bytes; with the minimum of one block per
 * SM they take 76 and do not spill (-Xptxas -v). */
#define SYMM_COLL_REDUCING(name, fn, tname, T, oname, Op)                      \
  extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS, 1)           \
      symm_coll_##name##_##tname##_##oname(const params_t a) {                 \
    fn<T, Op>(a);                                                              \
  }
/* Every op (symm_redop_name) of every dtype (symm_dtype_name): the GPU
 * engine finds them as symm_coll_<kernel>_<dtype>_<op>. */
#define SYMM_COLL_FOR_OPS(name, fn, tname, T)                                  \
  SYMM_COLL_REDUCING(name, fn, tname, T, sum, op_sum)                          \
  SYMM_COLL_REDUCING(name, fn, tname, T, min, op_min)                          \
  SYMM_COLL_REDUCING(name, fn, tname, T, max, op_max)                          \
  SYMM_COLL_REDUCING(name, fn, tname, T, prod, op_prod)                        \
  SYMM_COLL_REDUCING(name, fn, tname, T, avg, op_avg)
#define SYMM_COLL_FOR_TYPES(name, fn)                                          \
  SYMM_COLL_FOR_OPS(name, fn, f16, __half)                                     \
  SYMM_COLL_FOR_OPS(name, fn, bf16, __nv_bfloat16)                             \
  SYMM_COLL_FOR_OPS(name, fn, f32, float)                                      \
  SYMM_COLL_FOR_OPS(name, fn, f64, double)                                     \
  SYMM_COLL_FOR_OPS(name, fn, i8, int8_t)                                      \
  SYMM_COLL_FOR_OPS(name, fn, i16, int16_t)                                    \
  SYMM_COLL_FOR_OPS(name, fn, i32, int32_t)                                    \
  SYMM_COLL_FOR_OPS(name, fn, i64, int64_t)                                    \
  SYMM_COLL_FOR_OPS(name, fn, u8, uint8_t)                                     \
  SYMM_COLL_FOR_OPS(name, fn, u16, uint16_t)                                   \
  SYMM_COLL_FOR_OPS(name, fn, u32, uint32_t)                                   \
  SYMM_COLL_FOR_OPS(name, fn, u64, uint64_t)                                   \
  SYMM_COLL_FOR_OPS(name, fn, f8e4m3, __nv_fp8_e4m3)                           \
  SYMM_COLL_FOR_OPS(name, fn, f8e5m2, __nv_fp8_e5m2)

SYMM_COLL_FOR_TYPES(ar_one_shot, all_reduce_one_shot)
SYMM_COLL_FOR_TYPES(ar_two_shot, all_reduce_two_shot)
SYMM_COLL_FOR_TYPES(ar_ll, all_reduce_ll)
SYMM_COLL_FOR_TYPES(ar_ll128, all_reduce_ll128)
SYMM_COLL_FOR_TYPES(reduce_scatter, reduce_scatter)
