/* The CPU engine's table: init and startup (the ranks agree on how they
 * slice all-reduces), zeroing, and the members cpu_coll.c and cpu_signal.c
 * implement. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

static symm_result_t cpu_init(symm_comm_t *comm, symm_blob_t *blob) {
  cpu_state_t *st = calloc(1, sizeof *st);
  uint64_t *slice = malloc(sizeof *slice);
  if (!st || !slice) {
    free(st);
    free(slice);
    return symm_error(SYMM_ERR_NO_MEMORY, "CPU engine: out of memory");
  }
  st->slice_bytes = symm_settings()->SYMM_HOST_SLICE_BYTES;
  *slice = st->slice_bytes;
  symm_engine_set_state(comm, st);
  *blob = (symm_blob_t){slice, sizeof *slice};
  return SYMM_SUCCESS;
}

/* Ranks must slice all-reduces alike (run_sliced pairs slices up by
 * position): SYMM_HOST_SLICE_BYTES is compared once, here. */
static symm_result_t cpu_startup(symm_comm_t *comm, const symm_blob_t *all) {
  const uint64_t mine = cpu_state(comm)->slice_bytes;
  for (int r = 0; r < symm_comm_size(comm); r++) {
    uint64_t theirs = 0;
    if (all[r].len == sizeof theirs) memcpy(&theirs, all[r].data, sizeof theirs);
    if (all[r].len != sizeof theirs || theirs != mine)
      return symm_error(SYMM_ERR_MISMATCH, "CPU collectives: SYMM_HOST_SLICE_BYTES is %llu on "
                        "rank %d and %llu on rank %d; it must be the same on every rank",
                        (unsigned long long)theirs, r, (unsigned long long)mine,
                        symm_comm_rank(comm));
  }
  return SYMM_SUCCESS;
}

static void cpu_fini(symm_comm_t *comm) {
  free(symm_engine_state(comm));
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
  if (bytes) memmove(dst, src, bytes);
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
