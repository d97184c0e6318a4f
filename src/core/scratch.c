/* The collectives' scratch tensor: reserved on first use or with
 * symm_comm_reserve_scratch, grown geometrically, never freed before its
 * communicator. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

symm_result_t symm_comm_scratch(symm_comm_t *comm, size_t bytes, symm_tensor_t **out) {
  if (comm->scratch && comm->scratch->nbytes >= bytes) {
    *out = comm->scratch;
    return SYMM_SUCCESS;
  }
  /* Collective: the callers make every rank ask for the same size at the
   * same call (the engines say what happens when they do not). */
  /* The setting is what staging gets: the backend's fixed areas (its
   * need, `bytes`, includes them) come on top. */
  size_t want = symm_settings()->SYMM_SCRATCH_BYTES;
  const size_t fixed = comm->engine->scratch_fixed ? comm->engine->scratch_fixed(comm) : 0;
  want = want > SIZE_MAX - fixed ? SIZE_MAX : want + fixed;
  if (want < bytes) want = bytes;
  /* At least double: retired scratches are kept (see below), so growth must
   * be geometric to bound what they hold to the size of the current one. */
  if (comm->scratch && want < 2 * comm->scratch->nbytes) want = 2 * comm->scratch->nbytes;
  if (want < 4096) want = 4096;
  int64_t n = (int64_t)want;
  symm_tensor_t *t;
  bool alone;
  symm_result_t res = symm_tensor_alloc_step(comm, &n, 1, SYMM_DTYPE_U8, &t, &alone);
  /* Growing is one step of a collective: peers whose allocation succeeded
   * go on to the rendezvous, where this rank's failure must meet them. */
  if (res != SYMM_SUCCESS && alone) res = symm_rendezvous_refused(comm, &n, 1, SYMM_DTYPE_U8, res);
  if (res == SYMM_SUCCESS) {
    t->internal = true;
    res = symm_tensor_rendezvous(t);
    if (res != SYMM_SUCCESS) symm_tensor_free(t);
  }
  if (res != SYMM_SUCCESS) {
    symm_error_context("reserving %zu bytes of collective scratch", want);
    return res;
  }
  /* The old scratch is not freed: GPU work enqueued on streams we cannot
   * see may still read it, and freed memory could be handed to the next
   * allocation at once.  It stays a live tensor of the communicator (freed
   * with it); growth at least doubles, so all retired ones together are
   * smaller than the current one. */
  if (comm->scratch) SYMM_INFO(COLL, "collective scratch grows from %zu to %zu bytes per rank",
                               comm->scratch->nbytes, want);
  comm->scratch = t;
  *out = t;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_reserve_scratch(symm_comm_t *comm, size_t bytes) {
  static const char fn[] = "symm_comm_reserve_scratch";
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  symm_tensor_t *t = symm_comm_scratch_current(comm);
  /* Enough already is the same answer on every rank: no round, no number. */
  if (t && symm_tensor_nbytes(t) >= bytes) return SYMM_SUCCESS;
  symm_call_begin(comm, true, fn, "%s(%zu bytes)", fn, bytes);
  symm_result_t res = symm_comm_scratch(comm, bytes, &t);
  symm_call_end(comm);
  return res;
}
