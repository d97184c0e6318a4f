/*
 * Engines: what every backend on one kind of memory shares.  The core picks
 * the engine from the backend's mem_kind and drives it through this table;
 * backends never call it (they see the GPU engine through symm_gpu.h).
 *   - the CPU engine (src/cpu/): collectives and signals run by the calling
 *     thread on peer memory the CPU loads and stores;
 *   - the GPU engine (src/gpu/): the CUDA driver, the device and its
 *     context, the embedded kernels, their planning and launch, the
 *     asynchronous error record, device copies.
 * Both work only from what the core and the backend give them: the
 * communicator's accessors, the peer pointers of rendezvoused tensors, the
 * scratch tensor, the caller's stream.  Not installed.
 */
#ifndef SYMM_ENGINE_H
#define SYMM_ENGINE_H

#include "symm_backend.h"

typedef struct symm_engine_ops {
  int version; /* 1 */
  const char *name;          /* "cpu", "gpu" */
  symm_mem_kind_t mem_kind;  /* the memory it serves */
  /* Local, before the backend's init: the engine's resources for this rank
   * (GPU: driver, device, context, stream, kernels).  May publish a blob;
   * the core all-gathers it with the backend's in one round.  On failure
   * the core calls fini. */
  symm_result_t (*init)(symm_comm_t *comm, symm_blob_t *blob);
  /* Local, after that round: every rank's engine blob (all[rank]), before
   * the backend's startup (GPU: peers' devices, access, kernels agreed). */
  symm_result_t (*startup)(symm_comm_t *comm, const symm_blob_t *all);
  /* Local, after the backend's fini: frees what init made. */
  void (*fini)(symm_comm_t *comm);
  /* Bytes the engine keeps in the scratch tensor besides staging (GPU: the
   * LL areas); SYMM_SCRATCH_BYTES comes on top. */
  size_t (*scratch_fixed)(symm_comm_t *comm);
  /* The all-reduce algorithm that runs when `asked` (AUTO included) is
   * asked for on `bytes` per rank.  Maps its own answers to themselves. */
  symm_algo_t (*allreduce_algo)(symm_comm_t *comm, symm_algo_t asked, size_t bytes);
  /* Scratch bytes per rank with which every collective on buffers of at
   * most max_bytes runs without growing it (symm_comm_scratch_bytes);
   * SYMM_ERR_INVALID_ARG when that overflows. */
  symm_result_t (*scratch_bytes)(symm_comm_t *comm, size_t max_bytes, size_t *bytes);
  /* Runs (CPU) or enqueues (GPU) one collective; the core has validated the
   * arguments and resolved algo.  SYMM_ERR_UNSUPPORTED with the reason when
   * this communicator cannot run collectives (no kernels in this build). */
  symm_result_t (*collective)(symm_comm_t *comm, const symm_coll_args_t *args);
  /* Takes part in collective args->seq for a rank whose call failed the
   * core's argument checks (kind, count, seq set; other fields may be
   * invalid; send_bytes and recv_bytes 0), with a descriptor no valid call
   * has, so that the peers fail with SYMM_ERR_MISMATCH instead of pairing
   * their call with this rank's next one; a peer in a host call is met as
   * by a collective (symm_comm_meet_host_call).  Touches no buffer of the
   * call. */
  symm_result_t (*abstain)(symm_comm_t *comm, const symm_coll_args_t *args);
  /* Runs or enqueues a signal put, wait or barrier (SYMM_SIGNAL_*) on a
   * rendezvoused tensor's pads; the core has checked peer, channel and
   * stream. */
  symm_result_t (*signal)(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                          int channel, void *stream);
  /* Optional: moves an error raised by device-side work since the last
   * call into the communicator (symm_comm_set_async_error) and clears it at
   * the source.  Local, does not synchronise. */
  symm_result_t (*poll_async_error)(symm_comm_t *comm);
  /* Zeroes `bytes` at ptr, memory of this engine's kind (a pooled
   * allocation's signal pad before reuse). */
  symm_result_t (*zero)(symm_comm_t *comm, void *ptr, size_t bytes);
  /* Optional: copies `bytes` of host memory into new device memory of the
   * communicator's GPU (the device array of peer pointers), and frees it.
   * NULL for memory the CPU reaches directly. */
  symm_result_t (*device_copy)(symm_comm_t *comm, const void *host, size_t bytes, void **dev);
  void (*device_free)(symm_comm_t *comm, void *dev);
  /* Optional: this rank enters communicator-wide call `seq`, which agrees
   * over the bootstrap (a barrier, a rendezvous...), and the scratch
   * exists.  Says so where a peer's collective of the same number waits
   * for this rank (CPU: this rank's pad slot, as an arrival with
   * SYMM_COLL_SIG_HOST_CALL), so that the peer calls
   * symm_comm_meet_host_call instead of waiting out the timeout.  NULL
   * where collectives run where the host cannot look at once (GPU). */
  void (*host_call)(symm_comm_t *comm, uint64_t seq);
  /* members above: version 1 */
  /* Optional: this rank leaves every communicator-wide call up to `last`
   * (the outermost call ended, whatever its result; a call that took
   * several numbers, such as a sliced all-reduce, leaves them all).  Says
   * so where the peers look before they reuse what those calls used, and
   * gives up the rounds of those calls this rank never arrived at, so
   * that peers waiting in them fail at once and none of them can
   * complete later.  Called for host calls and collectives alike. */
  void (*call_end)(symm_comm_t *comm, uint64_t last);
  /* members above: version 2 */
  /* Writes `value` to `count` 32-bit words at ptr (4-byte aligned memory
   * of this engine's kind, the core has checked), after the work on
   * `stream` before it and with what that work wrote made visible first
   * (GPU: cuStreamWriteValue32 for one word, cuMemsetD32Async for more;
   * CPU: a release fence, then the stores, at once). */
  symm_result_t (*write32)(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                           void *stream);
  /* members above: version 3 */
  /* Whether the engine's collectives reduce `dtype` with `op` (both in
   * range); where not, the core refuses the call with SYMM_ERR_UNSUPPORTED
   * naming the engine. */
  bool (*reduces)(symm_comm_t *comm, symm_dtype_t dtype, symm_redop_t op);
  /* members above: version 4 */
  /* Copies `bytes` from src to dst, either of them this rank's memory of
   * any kind the engine reaches or a peer's mapping, after the work on
   * `stream` before it (GPU: cuMemcpyAsync on the copy engine, unified
   * addressing; CPU: memmove at once).  The core has checked the ranges. */
  symm_result_t (*copy)(symm_comm_t *comm, void *dst, const void *src, size_t bytes,
                        void *stream);
  /* members above: version 5 */
  /* Optional: runs or enqueues a collective that only moves data
   * (all-gather, broadcast, all-to-all, all-to-all-v with host counts)
   * asked for with SYMM_ALGO_CE (args->algo), on the copy engines: no
   * kernel moves data.  Where NULL the core runs `collective` instead
   * (the CPU engine: its collectives are the calling thread's copies
   * already).  A call that failed the core's checks still goes to
   * `abstain`, with args->algo SYMM_ALGO_CE. */
  symm_result_t (*ce_collective)(symm_comm_t *comm, const symm_coll_args_t *args);
  /* members above: version 6 */
} symm_engine_ops_t;

extern const symm_engine_ops_t symm_cpu_engine;
extern const symm_engine_ops_t symm_gpu_engine;

/* The signature a rank in a host call (engine->host_call) arrives with:
 * no collective's signature. */
#define SYMM_COLL_SIG_HOST_CALL UINT64_MAX
/* For a collective that found a peer in a host call of its own number:
 * takes part in that call's bootstrap round in the name of this rank's
 * call, so that every rank of both kinds fails at once with
 * SYMM_ERR_MISMATCH naming both calls, having used up the same number and
 * the same round (the communicator stays in step).  Every rank in a
 * collective joins exactly once; returns that mismatch. */
symm_result_t symm_comm_meet_host_call(symm_comm_t *comm);

/* Whether symm_comm_init finished with this communicator (false in the
 * fini calls of a failed init). */
bool symm_comm_ready(const symm_comm_t *comm);
/* The communicator's engine, and its per-communicator state (NULL until
 * set). */
const symm_engine_ops_t *symm_comm_engine(const symm_comm_t *comm);
void *symm_engine_state(const symm_comm_t *comm);
void symm_engine_set_state(symm_comm_t *comm, void *state);

#endif /* SYMM_ENGINE_H */
