/*
 * Groups of the nccl backend (the seam's split members): symm_comm_split
 * makes each group's NCCL communicator with ncclCommSplit of the parent's,
 * not a new one from a new unique id.  ncclCommSplit is collective over the
 * parent: the core calls nccl_split on every rank of the parent, in the
 * split's call, ranks that join no group included (NCCL_SPLIT_NOCOLOR).  A
 * non-blocking parent makes a non-blocking split: NCCL answers in
 * progress, reports on the parent (ncclCommGetAsyncError) and writes the
 * new communicator when it is done; nccl_call waits for that within the
 * call's timeout, watching the peers and their published failures.  NCCL
 * cannot cancel a split but by aborting the parent, so a split that failed
 * anywhere leaves the parent's communicator aborted on every rank
 * (nccl_split_release).  The group's init takes the new communicator and
 * skips the unique id (nccl_init.c).
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>

#include "backends/nccl/nccl.h"

bool nccl_split_ready(symm_comm_t *comm, char *why, size_t len) {
  const nccl_state_t *st = symm_backend_state(comm);
  if (st && !st->lib->comm_split) {
    char v[32];
    nccl_version_text(st->lib->version, v, sizeof v);
    snprintf(why, len, "NCCL %s (%s) has no ncclCommSplit (NCCL 2.18 and later have it)", v,
             nccl_library_path());
    return false;
  }
  if (!st || !st->comm) {
    snprintf(why, len, "its NCCL communicator was aborted after an error");
    return false;
  }
  return true;
}

symm_result_t nccl_split(symm_comm_t *comm, int color, int key, void **child) {
  nccl_state_t *st = symm_backend_state(comm);
  *child = NULL;
  nccl_split_child_t *h = calloc(1, sizeof *h);
  if (!h) return symm_error(SYMM_ERR_NO_MEMORY, "nccl: out of memory");
  /* The group's communicator is made like its parent: non-blocking where
   * the parent is (the waits keep to the timeout), NVLS off (inherited
   * from the environment), its resources its own (splitShare left at 0:
   * a parent may be destroyed before its groups). */
  symm_nccl_config_t cfg;
  symm_nccl_config_init(&cfg);
  if (st->nonblocking) cfg.blocking = 0;
  cfg.comm_name = "symmem group";
  st->split_out = NULL;
  st->splits++;
  ncu_context saved;
  symm_result_t res = symm_gpu_enter(st->gpu, &saved);
  if (res == SYMM_SUCCESS) {
    int rc = st->lib->comm_split(st->comm, color >= 0 ? color : SYMM_NCCL_SPLIT_NOCOLOR, key,
                                 &st->split_out, &cfg);
    res = nccl_call(comm, st, rc, "ncclCommSplit");
    symm_gpu_leave(st->gpu, saved);
  }
  if (res == SYMM_SUCCESS && color >= 0 && !st->split_out) {
    res = symm_error(SYMM_ERR_BACKEND, "nccl: ncclCommSplit(color %d, key %d) succeeded on "
                     "rank %d without a communicator", color, key, st->rank);
    nccl_publish_failure(comm, res);
  }
  SYMM_INFO(BACKEND, "nccl: comm %d: ncclCommSplit #%llu (color %d, key %d) on rank %d: %s",
            symm_comm_index(comm), (unsigned long long)st->splits, color, key, st->rank,
            res == SYMM_SUCCESS ? (color >= 0 ? "done" : "done, no group") : "failed");
  if (res != SYMM_SUCCESS || color < 0) {
    free(h);
    return res;
  }
  h->comm = st->split_out;
  h->nonblocking = st->nonblocking;
  st->split_out = NULL;
  *child = h;
  return SYMM_SUCCESS;
}

void nccl_split_release(symm_comm_t *comm, void *child, bool failed) {
  nccl_state_t *st = symm_backend_state(comm);
  nccl_split_child_t *h = child;
  ncu_context saved = NULL;
  const bool entered = st && symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
  if (h && h->comm) {
    /* A communicator whose peers may never finish it: abort, never wait. */
    if (st->lib->comm_abort) st->lib->comm_abort(h->comm);
    else st->lib->comm_destroy(h->comm);
  }
  if (failed && st && st->comm) {
    SYMM_INFO(BACKEND, "nccl: comm %d: a failed ncclCommSplit: its NCCL communicator is "
              "aborted on every rank", symm_comm_index(comm));
    nccl_abort(st);
  }
  if (entered) symm_gpu_leave(st->gpu, saved);
  free(h);
}

symm_result_t nccl_split_check(symm_comm_t *comm, nccl_state_t *st) {
  /* Non-blocking: NCCL may still be finishing it. */
  SYMM_CHECK(nccl_call(comm, st, SYMM_NCCL_SUCCESS, "ncclCommSplit"));
  int rank = st->rank, size = st->size;
  if ((st->lib->comm_user_rank && st->lib->comm_user_rank(st->comm, &rank) != SYMM_NCCL_SUCCESS) ||
      (st->lib->comm_count && st->lib->comm_count(st->comm, &size) != SYMM_NCCL_SUCCESS))
    rank = size = -1;
  if (rank == st->rank && size == st->size) return SYMM_SUCCESS;
  symm_result_t err = symm_error(SYMM_ERR_PROTOCOL, "nccl: ncclCommSplit made rank %d of %d "
                                 "where symmem's group has rank %d of %d", rank, size, st->rank,
                                 st->size);
  nccl_publish_failure(comm, err);
  return err;
}
