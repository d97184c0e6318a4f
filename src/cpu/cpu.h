/*
 * The CPU engine: collectives and signals for any backend whose peers'
 * memory this process loads and stores (host, and backends like it), run
 * by the calling thread on the peer pointers of rendezvoused tensors.
 * Private to src/cpu/; the core reaches it through symm_cpu_engine.
 */
#ifndef SYMM_CPU_H
#define SYMM_CPU_H

#include "symm_backoff.h"
#include "symm_engine.h"

/* The engine's state of one communicator (symm_engine_state). */
typedef struct {
  size_t slice_bytes; /* SYMM_HOST_SLICE_BYTES, the same on every rank */
  uint64_t left;      /* the last call this rank left (its pad's copy: cpu_coll.c) */
  uint64_t all_left;  /* every rank has left every call up to this one */
  /* What this rank last wrote in a slot of each parity (perhaps of a
   * scratch since retired): the guess its next arrival swaps from. */
  uint64_t flag_was[2];
  /* Every rank's collective pad of scratch pads_of (cpu_coll_attach, and
   * this rank's for call_end): a scratch lives as long as its
   * communicator, so its pointer names it for good, and the pads are
   * looked up once. */
  struct coll_pad **pads;
  const void *pads_of;
  int host_cpus;      /* CPUs this host's ranks run on together (cpu_engine.c) */
  /* Cross-memory attach (cpu_cma.c): */
  bool cma;           /* this rank reads every peer's memory with process_vm_readv */
  uint64_t cma_group; /* what a call that peers may read so publishes (cpu_coll.c) */
  uint64_t cma_nonce; /* random: a peer that reads it here can read this process */
  struct cpu_cma_card *cma_cards; /* the peers' cards until the probe (NULL: probed) */
  char *cma_bounce;   /* reads whose placement the kernel copies slowly go through it */
} cpu_state_t;

static inline cpu_state_t *cpu_state(const symm_comm_t *comm) {
  return (cpu_state_t *)symm_engine_state(comm);
}

/* A wait for rank `peer` within comm's timeout, backing off as this host's
 * ranks call for, and failing early if peer's process goes. */
static inline void cpu_backoff_start(symm_backoff_t *b, const symm_comm_t *comm, int peer) {
  symm_backoff_start(b, symm_comm_timeout_ms(comm), symm_comm_local_size(comm));
  symm_backoff_host_cpus(b, cpu_state(comm)->host_cpus);
  symm_backoff_watch(b, symm_comm_peer_pid(comm, peer));
}

/* What a rank publishes at init so that its peers can prove they read its
 * memory: its pid, and where it keeps which nonce. */
typedef struct cpu_cma_card {
  uint64_t pid, nonce_addr, nonce;
} cpu_cma_card_t;

/* Cross-memory attach (cpu_cma.c).  init: draws this rank's nonce and
 * fills its card.  startup: keeps the peers' cards (takes `cards`, a
 * malloc'd array of one per rank) for the probe, unless
 * SYMM_HOST_CMA=off or there are no peers; never fails.  ready: whether
 * this rank may read every peer's memory; the first time, the probe reads
 * every peer's nonce as its card says and turns cma on only if every read
 * returns it (else logs why, at INFO).  fini: frees what startup and the
 * reads kept.
 * read: len bytes at addr in rank peer's process into dst, whole; 0, or
 * the errno of the read that failed (ESRCH also where the peer's process
 * is gone since, its pid perhaps another's). */
void cpu_cma_init(cpu_state_t *st, cpu_cma_card_t *card);
void cpu_cma_startup(symm_comm_t *comm, cpu_cma_card_t *cards);
bool cpu_cma_ready(symm_comm_t *comm);
void cpu_cma_fini(cpu_state_t *st);
int cpu_cma_read(symm_comm_t *comm, int peer, void *dst, uint64_t addr, size_t len);
/* readv: n pieces at once, remote[i] (addresses in rank peer's process)
 * into local[i] (lengths equal), in as few system calls as the kernel
 * takes; 0 or errno as read.  Both read through comm's bounce buffer
 * where the kernel would copy slowly (made at the first need). */
struct iovec;
int cpu_cma_readv(symm_comm_t *comm, int peer, const struct iovec *local,
                  const struct iovec *remote, size_t n);

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static inline bool cpu_coll_overlap(const void *a, size_t an, const void *b, size_t bn) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}
/* memcpy (dst and src apart; n 0 copies nothing, either may be NULL),
 * at full speed also where dst lies a few bytes past src modulo the page,
 * which glibc's memcpy copies at a tenth of its speed on some CPUs
 * (cpu_memcpy.c): every bulk copy of the engine but the overlapping
 * ones (memmove). */
void cpu_memcpy(void *dst, const void *src, size_t n);
/* memmove where dst and src overlap, else cpu_memcpy. */
void cpu_memmove(void *dst, const void *src, size_t n);
/* Whether a copy of n bytes from src to dst, by memcpy or by the kernel,
 * has that placement (cpu_memcpy.c's top): dst 1 to 63 bytes past src
 * modulo the page, 2 KiB or more. */
static inline bool cpu_copy_slow_at(const void *dst, const void *src, size_t n) {
  const size_t gap = ((uintptr_t)dst - (uintptr_t)src) & 4095u;
  return n >= 2048 && gap && gap < 64;
}
/* Where a bounce buffer for copies from src starts in `room`, which holds
 * a page more than it bounces: half a page from src, so that neither the
 * copy into it nor the one out of it to such a dst has that placement. */
static inline char *cpu_bounce_in(char *room, const void *src) {
  return room + (((uintptr_t)src + 2048u - (uintptr_t)room) & 4095u);
}

/* Collectives (cpu_coll.c): synchronous; the protocol is described at the
 * top of cpu_coll.c. */
symm_result_t cpu_collective(symm_comm_t *comm, const symm_coll_args_t *args);
symm_result_t cpu_abstain(symm_comm_t *comm, const symm_coll_args_t *args);
void cpu_host_call(symm_comm_t *comm, uint64_t seq);
void cpu_call_end(symm_comm_t *comm, uint64_t last);
symm_algo_t cpu_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes);
symm_result_t cpu_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes);
/* Signals, run at once (cpu_signal.c). */
symm_result_t cpu_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                         int channel, void *stream);
/* out[i] = in[0][i] op in[1][i] op ... in[nin-1][i] for i < count, in that
 * order (cpu_reduce.c); avg divides the sum by nin.  Every dtype and op.
 * out must not overlap any input.  f16, bf16 and FP8 are reduced in f32
 * and rounded to nearest-even (FP8 saturating). */
void cpu_reduce(void *out, const void *const *in, int nin, size_t count, symm_dtype_t dtype,
                symm_redop_t op);

#endif /* SYMM_CPU_H */
