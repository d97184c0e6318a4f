/*
 * symmem_device.cuh - device-side synchronisation over symmem signal pads,
 * for user CUDA kernels (include after symmem.h; needs sm_70 or newer).
 *
 * The same operations, launched from the host on a stream, are
 * symm_signal_put / symm_signal_wait / symm_signal_barrier (symmem.h).
 *
 * A signal pad (symm_tensor_signal_pad) is an array of 32-bit *slots*,
 * symm_comm_signal_pad_bytes(comm) / 4 of them, zeroed at allocation.  Rank r's pad is
 * written by the peers (through their mappings of it) and read by r.  A slot
 * is identified by a *channel* and the sending rank:
 *
 *     slot = symm_dev_signal_slot(channel, from_rank, world_size)
 *
 * so that each (channel, sender) pair has its own slot and different blocks
 * (or different phases of an algorithm) can use different channels without
 * interfering.  Channels run from 0 to symm_dev_signal_channels(pad_bytes,
 * world) - 1.
 *
 * Signals are *self-resetting*: a put stores a non-zero value into an empty
 * (zero) slot of the receiver; the receiver's wait consumes it and puts the
 * slot back to zero.  A put into a slot that still holds an unconsumed value
 * waits until the receiver has consumed it, so a sender can never run more
 * than one signal ahead of its receiver on one slot, and no sequence numbers
 * are needed: the same kernel can be launched any number of times (CUDA
 * graph replay included) and the pads return to all-zero after every
 * balanced put/wait pair.
 *
 * Memory model: a put is a release at system scope (everything the calling
 * thread wrote before it, and everything its block wrote before a block-level
 * put, is visible to the receiver once the receiver's wait returns); a wait
 * is an acquire at system scope.  This covers peers over NVLink/PCIe.
 *
 * Timeouts: every function that can wait takes timeout_ns (read against
 * %globaltimer, nanoseconds; 0 means wait forever - not recommended) and an
 * error record `err` in memory the host can read (pinned host memory mapped
 * for the device, or device memory the host copies back).  When a wait runs
 * past its timeout, the function records SYMM_DEV_ERR_TIMEOUT and the peer
 * in *err (the first error is kept; later ones are dropped), and returns
 * SYMM_DEV_ERR_TIMEOUT instead of hanging.  After a timeout the pads of the
 * ranks involved may hold unconsumed signals: treat the tensor's pads as
 * unusable (free the tensor) once an error was recorded.
 *
 * Thread-level functions may be called by any single thread; the block-level
 * variants (suffix _block) must be called by every thread of the block
 * (they contain __syncthreads) and return the same result in every thread.
 * Blocks of any shape (1-, 2- or 3-D) and size work with them.
 */
#ifndef SYMMEM_DEVICE_CUH
#define SYMMEM_DEVICE_CUH

#include <stdint.h>

/* Result codes; the values equal symm_result_t's. */
#define SYMM_DEV_SUCCESS 0
#define SYMM_DEV_ERR_MISMATCH 4
#define SYMM_DEV_ERR_TIMEOUT 5

/* Device-visible error record.  Zero it before use; the host reads it after
 * synchronising the stream (code != 0: something failed). */
typedef struct symm_dev_error {
  unsigned int code; /* SYMM_DEV_ERR_*, 0 until an error is recorded */
  unsigned int peer; /* rank whose signal did not come (or differed) */
} symm_dev_error_t;

/* Nanoseconds from the GPU's global timer. */
static __device__ __forceinline__ uint64_t symm_dev_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* ------------------------------------------------ system-scope accessors */
static __device__ __forceinline__ uint32_t symm_dev_ld_acquire_u32(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ uint64_t symm_dev_ld_acquire_u64(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void symm_dev_st_release_u32(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ void symm_dev_st_release_u64(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void symm_dev_st_relaxed_u32(uint32_t *p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ uint64_t symm_dev_ld_relaxed_u64(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void symm_dev_st_relaxed_u64(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Records an error in *err unless one is already there (err may be NULL).
 * Plain stores, the code last, so that the record may live in pinned host
 * memory, where GPUs without host-native atomics may not use atomics; when
 * two threads fail at once, either error may be the one kept. */
static __device__ __forceinline__ void symm_dev_record_error(symm_dev_error_t *err,
                                                             unsigned int code,
                                                             unsigned int peer) {
  volatile symm_dev_error_t *e = err;
  if (e && e->code == 0u) {
    e->peer = peer;
    __threadfence_system();
    e->code = code;
    __threadfence_system();
  }
}

/* ------------------------------------------------------------------ slots */
/* Slot of (channel, from_rank) in a pad of a world_size-rank tensor. */
static __device__ __host__ __forceinline__ unsigned int symm_dev_signal_slot(
    unsigned int channel, unsigned int from_rank, unsigned int world_size) {
  return channel * world_size + from_rank;
}
/* Number of channels a pad of pad_bytes offers to world_size ranks. */
static __device__ __host__ __forceinline__ unsigned int symm_dev_signal_channels(
    unsigned int pad_bytes, unsigned int world_size) {
  return pad_bytes / 4u / world_size;
}

/* Whether `deadline` (from symm_dev_deadline) has passed; 0 never passes. */
static __device__ __forceinline__ uint64_t symm_dev_deadline(uint64_t timeout_ns) {
  return timeout_ns ? symm_dev_globaltimer() + timeout_ns : 0;
}
static __device__ __forceinline__ bool symm_dev_expired(uint64_t deadline) {
  return deadline && symm_dev_globaltimer() > deadline;
}

/*
 * Put: stores `value` (non-zero) into slot `slot` of a peer's pad
 * (`peer_pad`: this process's mapping of the receiver's pad, e.g. from
 * symm_tensor_signal_pad), with release semantics at system scope.  Waits,
 * up to timeout_ns, while the slot still holds an unconsumed signal.
 * `peer` only labels the error.  Returns SYMM_DEV_SUCCESS or
 * SYMM_DEV_ERR_TIMEOUT (recorded in *err).  value 0 is treated as 1.
 */
static __device__ __forceinline__ int symm_dev_put_signal(uint32_t *peer_pad, unsigned int slot,
                                                         uint32_t value, unsigned int peer,
                                                         uint64_t timeout_ns,
                                                         symm_dev_error_t *err) {
  if (value == 0) value = 1;
  uint64_t deadline = symm_dev_deadline(timeout_ns);
  /* The fence makes the CAS a release: every earlier write of this thread
   * (and of the block, after the __syncthreads of the block variant) is
   * visible system-wide before the signal can be seen. */
  __threadfence_system();
  unsigned int spins = 0;
  while (atomicCAS_system(peer_pad + slot, 0u, value) != 0u) {
    if ((++spins & 63u) == 0 && symm_dev_expired(deadline)) {
      symm_dev_record_error(err, SYMM_DEV_ERR_TIMEOUT, peer);
      return SYMM_DEV_ERR_TIMEOUT;
    }
  }
  return SYMM_DEV_SUCCESS;
}

/*
 * Wait: waits, up to timeout_ns, until slot `slot` of this rank's own pad
 * (`my_pad`) is non-zero, with acquire semantics at system scope; then
 * resets the slot to zero and stores the value received in *value (may be
 * NULL).  Returns SYMM_DEV_SUCCESS or SYMM_DEV_ERR_TIMEOUT (recorded in
 * *err with `peer`, the rank expected to signal).
 */
static __device__ __forceinline__ int symm_dev_wait_signal(uint32_t *my_pad, unsigned int slot,
                                                          unsigned int peer, uint64_t timeout_ns,
                                                          symm_dev_error_t *err,
                                                          uint32_t *value) {
  uint64_t deadline = symm_dev_deadline(timeout_ns);
  unsigned int spins = 0;
  uint32_t v;
  while ((v = symm_dev_ld_acquire_u32(my_pad + slot)) == 0u) {
    if ((++spins & 63u) == 0 && symm_dev_expired(deadline)) {
      symm_dev_record_error(err, SYMM_DEV_ERR_TIMEOUT, peer);
      return SYMM_DEV_ERR_TIMEOUT;
    }
  }
  /* Only the sender's next put (which waits for zero) can follow. */
  symm_dev_st_relaxed_u32(my_pad + slot, 0u);
  if (value) *value = v;
  return SYMM_DEV_SUCCESS;
}

/*
 * Barrier of one thread with every other rank on `channel`: puts a signal
 * to every peer, then waits for every peer's.  `pads` is an array (readable
 * by the device) of world_size pad pointers, index r = rank r's pad as
 * mapped here (pads[rank] = own pad).  Peers are visited starting at
 * rank + 1 so that ranks do not all hit the same peer first.  Returns the
 * first error (SYMM_DEV_ERR_TIMEOUT) or SYMM_DEV_SUCCESS.  Every rank must
 * call it with the same channel.
 */
static __device__ __forceinline__ int symm_dev_barrier(uint32_t *const *pads, int rank,
                                                      int world_size, unsigned int channel,
                                                      uint64_t timeout_ns,
                                                      symm_dev_error_t *err) {
  int res = SYMM_DEV_SUCCESS;
  for (int k = 1; k < world_size && res == SYMM_DEV_SUCCESS; k++) {
    int p = (rank + k) % world_size;
    res = symm_dev_put_signal(pads[p], symm_dev_signal_slot(channel, rank, world_size), 1u, p,
                              timeout_ns, err);
  }
  for (int k = 1; k < world_size && res == SYMM_DEV_SUCCESS; k++) {
    int p = (rank + k) % world_size;
    res = symm_dev_wait_signal(pads[rank], symm_dev_signal_slot(channel, p, world_size), p,
                               timeout_ns, err, NULL);
  }
  return res;
}

/* This thread's index in its block and the block's thread count, whatever
 * the block's shape. */
static __device__ __forceinline__ unsigned int symm_dev_thread_in_block(void) {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static __device__ __forceinline__ unsigned int symm_dev_block_threads(void) {
  return blockDim.x * blockDim.y * blockDim.z;
}

/*
 * Block-level barrier: every thread of the block calls it; all writes the
 * block made before it are visible to every peer's block after it.  Thread
 * t signals peer t and waits for peer t (and peers t + n, t + 2n, ... in a
 * block of n < world_size threads), so the peers are handled in parallel.
 * Same result in every thread.
 */
static __device__ __forceinline__ int symm_dev_barrier_block(uint32_t *const *pads, int rank,
                                                            int world_size,
                                                            unsigned int channel,
                                                            uint64_t timeout_ns,
                                                            symm_dev_error_t *err) {
  __syncthreads();
  int res = SYMM_DEV_SUCCESS;
  for (int p = (int)symm_dev_thread_in_block(); p < world_size && res == SYMM_DEV_SUCCESS;
       p += (int)symm_dev_block_threads()) {
    if (p == rank) continue;
    res = symm_dev_put_signal(pads[p], symm_dev_signal_slot(channel, rank, world_size), 1u, p,
                              timeout_ns, err);
    if (res == SYMM_DEV_SUCCESS)
      res = symm_dev_wait_signal(pads[rank], symm_dev_signal_slot(channel, p, world_size), p,
                                 timeout_ns, err, NULL);
  }
  /* __syncthreads_or also orders the block: the waits' acquires by the
   * signalling threads cover the reads of every thread after it. */
  int failed = __syncthreads_or(res != SYMM_DEV_SUCCESS);
  return failed ? SYMM_DEV_ERR_TIMEOUT : SYMM_DEV_SUCCESS;
}

/* Block-level put: the whole block's earlier writes are released with the
 * signal (thread 0 sends it).  Same result in every thread. */
static __device__ __forceinline__ int symm_dev_put_signal_block(uint32_t *peer_pad,
                                                               unsigned int slot, uint32_t value,
                                                               unsigned int peer,
                                                               uint64_t timeout_ns,
                                                               symm_dev_error_t *err) {
  __syncthreads();
  int res = SYMM_DEV_SUCCESS;
  if (symm_dev_thread_in_block() == 0)
    res = symm_dev_put_signal(peer_pad, slot, value, peer, timeout_ns, err);
  return __syncthreads_or(res != SYMM_DEV_SUCCESS) ? SYMM_DEV_ERR_TIMEOUT : SYMM_DEV_SUCCESS;
}

/* Block-level wait: thread 0 waits; every thread may then read what the
 * sender released.  *value (may be NULL) is set in every thread. */
static __device__ __forceinline__ int symm_dev_wait_signal_block(uint32_t *my_pad,
                                                                unsigned int slot,
                                                                unsigned int peer,
                                                                uint64_t timeout_ns,
                                                                symm_dev_error_t *err,
                                                                uint32_t *value) {
  __shared__ uint32_t symm_dev_value_;
  int res = SYMM_DEV_SUCCESS;
  if (symm_dev_thread_in_block() == 0) {
    uint32_t v = 0;
    res = symm_dev_wait_signal(my_pad, slot, peer, timeout_ns, err, &v);
    symm_dev_value_ = v;
  }
  int failed = __syncthreads_or(res != SYMM_DEV_SUCCESS);
  if (value) *value = symm_dev_value_;
  __syncthreads(); /* symm_dev_value_ may be reused by the next call */
  return failed ? SYMM_DEV_ERR_TIMEOUT : SYMM_DEV_SUCCESS;
}

#endif /* SYMMEM_DEVICE_CUH */
