/* The CPU engine's table: init and startup (the ranks agree on how they
 * slice all-reduces, and learn the CPUs their waits weigh the ranks
 * against), zeroing, and the members cpu_coll.c and cpu_signal.c
 * implement. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

/* What a rank tells its peers at init: how it slices all-reduces, the
 * CPUs it may run on (a bit per CPU), and how they prove that they can
 * read its memory (cpu_cma.c). */
typedef struct {
  uint64_t slice_bytes;
  uint64_t cpus[CPU_SETSIZE / 64];
  cpu_cma_card_t cma;
} cpu_blob_t;

static symm_result_t cpu_init(symm_comm_t *comm, symm_blob_t *blob) {
  cpu_state_t *st = calloc(1, sizeof *st);
  cpu_blob_t *b = calloc(1, sizeof *b);
  if (!st || !b) {
    free(st);
    free(b);
    return symm_error(SYMM_ERR_NO_MEMORY, "CPU engine: out of memory");
  }
  st->slice_bytes = symm_settings()->SYMM_HOST_SLICE_BYTES;
  b->slice_bytes = st->slice_bytes;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set)) b->cpus[c / 64] |= UINT64_C(1) << (c % 64);
  cpu_cma_init(st, &b->cma);
  symm_engine_set_state(comm, st);
  *blob = (symm_blob_t){b, sizeof *b};
  return SYMM_SUCCESS;
}

/* The CPUs this host's ranks may run on together (ranks bound one to a
 * core each see a single CPU of their own, yet their peers run
 * meanwhile): waits weigh this host's ranks against them
 * (symm_backoff_host_cpus).  An unknown affinity (an empty set) adds none. */
static int host_cpus(const symm_comm_t *comm, const cpu_blob_t *all) {
  uint64_t both[CPU_SETSIZE / 64] = {0};
  int cpus = 0;
  for (int r = 0; r < symm_comm_size(comm); r++) {
    if (!symm_comm_peer_same_host(comm, r)) continue;
    for (size_t i = 0; i < CPU_SETSIZE / 64; i++) both[i] |= all[r].cpus[i];
  }
  for (size_t i = 0; i < CPU_SETSIZE / 64; i++) cpus += __builtin_popcountll(both[i]);
  return cpus;
}

/* Ranks must slice all-reduces alike (run_sliced pairs slices up by
 * position): SYMM_HOST_SLICE_BYTES is compared once, here.  Then each rank
 * keeps how to probe whether it can read its peers' memory (cpu_cma.c). */
static symm_result_t cpu_startup(symm_comm_t *comm, const symm_blob_t *all) {
  cpu_state_t *st = cpu_state(comm);
  const int w = symm_comm_size(comm);
  cpu_blob_t *blobs = calloc((size_t)w, sizeof *blobs);
  if (!blobs) return symm_error(SYMM_ERR_NO_MEMORY, "CPU engine: out of memory");
  for (int r = 0; r < w; r++) {
    if (all[r].len == sizeof *blobs) memcpy(&blobs[r], all[r].data, sizeof *blobs);
    if (all[r].len == sizeof *blobs && blobs[r].slice_bytes == st->slice_bytes) continue;
    const unsigned long long theirs = blobs[r].slice_bytes;
    free(blobs);
    return symm_error(SYMM_ERR_MISMATCH, "CPU collectives: SYMM_HOST_SLICE_BYTES is %llu on "
                      "rank %d and %llu on rank %d; it must be the same on every rank", theirs,
                      r, (unsigned long long)st->slice_bytes, symm_comm_rank(comm));
  }
  st->host_cpus = host_cpus(comm, blobs);
  cpu_cma_card_t *cards = calloc((size_t)w, sizeof *cards);
  for (int r = 0; cards && r < w; r++) cards[r] = blobs[r].cma;
  free(blobs);
  if (cards) cpu_cma_startup(comm, cards);
  else SYMM_INFO(COLL, "CPU engine: cross-memory attach off: out of memory");
  const int ranks = symm_comm_local_size(comm), cpus = st->host_cpus;
  const bool crowded = ranks > SYMM_BACKOFF_CROWDED_PER_CPU * cpus;
  SYMM_INFO(COLL, "CPU engine: %d ranks on %d CPUs here: waits %s", ranks, cpus,
            ranks <= cpus ? "spin, then yield"
            : crowded     ? "sleep (more than 4 ranks a CPU)"
                          : "yield at once (more ranks than CPUs)");
  return SYMM_SUCCESS;
}

static void cpu_fini(symm_comm_t *comm) {
  cpu_state_t *st = cpu_state(comm);
  if (st) {
    cpu_cma_fini(st);
    free(st->pads);
  }
  free(st);
  symm_engine_set_state(comm, NULL);
}

static symm_result_t cpu_zero(symm_comm_t *comm, void *ptr, size_t bytes) {
  (void)comm;
  memset(ptr, 0, bytes);
  return SYMM_SUCCESS;
}

static symm_result_t cpu_write32(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                                 void *stream) {
  (void)comm, (void)stream;
  _Atomic uint32_t *w = ptr;
  atomic_thread_fence(memory_order_release);
  for (size_t i = 0; i < count; i++) atomic_store_explicit(&w[i], value, memory_order_relaxed);
  return SYMM_SUCCESS;
}

static size_t cpu_scratch_fixed(symm_comm_t *comm) {
  (void)comm;
  return 0;
}

static symm_result_t cpu_copy(symm_comm_t *comm, void *dst, const void *src, size_t bytes,
                              void *stream) {
  (void)comm, (void)stream;
  cpu_memmove(dst, src, bytes);
  return SYMM_SUCCESS;
}

/* cpu_reduce takes every dtype with every op. */
static bool cpu_reduces(symm_comm_t *comm, symm_dtype_t dtype, symm_redop_t op) {
  (void)comm, (void)dtype, (void)op;
  return true;
}

const symm_engine_ops_t symm_cpu_engine = {
    .version = 5,
    .name = "cpu",
    .mem_kind = SYMM_MEM_HOST,
    .init = cpu_init,
    .startup = cpu_startup,
    .fini = cpu_fini,
    .scratch_fixed = cpu_scratch_fixed,
    .allreduce_algo = cpu_allreduce_algo,
    .scratch_bytes = cpu_scratch_bytes,
    .collective = cpu_collective,
    .abstain = cpu_abstain,
    .host_call = cpu_host_call,
    .signal = cpu_signal,
    .zero = cpu_zero,
    .call_end = cpu_call_end,
    .write32 = cpu_write32,
    .reduces = cpu_reduces,
    .copy = cpu_copy,
};
