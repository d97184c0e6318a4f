/*
 * Waiting on NCCL without hanging.  The communicator is made non-blocking
 * where the library can (ncclCommInitRankConfig, blocking = 0): its
 * initialisation, window registrations and collectives may then return
 * ncclInProgress, and nccl_call polls ncclCommGetAsyncError until they are
 * done, within the communicator's timeout.  Between polls it watches the
 * peers (SYMM_ERR_PEER_LOST naming a rank gone: symm_comm_lost_rank) and
 * the bootstrap's note where a rank whose NCCL call failed says so (its
 * peers would otherwise wait in NCCL for it), on every bootstrap that
 * keeps notes: either way the communicator is aborted, since NCCL cannot
 * finish an operation a rank left.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nccl/nccl.h"
#include "symm_backoff.h"

#define NCCL_FAIL_NOTE "nccl-failed"
#define NCCL_LOOK_NS 20000000ull /* peers and the notes: every 20 ms */

const char *nccl_result_text(const nccl_state_t *st, int res) {
  static const char *const names[] = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
                                      "ncclInternalError", "ncclInvalidArgument",
                                      "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
                                      "ncclTimeout"};
  static __thread char buf[160];
  const char *text = st->lib->get_error_string ? st->lib->get_error_string(res) : NULL;
  snprintf(buf, sizeof buf, "%s (%s)",
           res >= 0 && res < (int)(sizeof names / sizeof names[0]) ? names[res] : "ncclResult?",
           text ? text : "no description");
  return buf;
}

void nccl_abort(nccl_state_t *st) {
  if (!st->comm) return;
  if (st->lib->comm_abort) st->lib->comm_abort(st->comm);
  else st->lib->comm_destroy(st->comm);
  st->comm = NULL;
  st->failed = true;
}

void nccl_publish_failure(symm_comm_t *comm, symm_result_t code) {
  char msg[768];
  snprintf(msg, sizeof msg, "%d:%s", (int)code, symm_last_error());
  /* Best effort: a peer that does not see it times out instead.  The
   * first failure stays: later ones are its consequences. */
  symm_comm_note_put(comm, NCCL_FAIL_NOTE, msg);
}

/* Another rank's published failure, if any: its code and message. */
static bool peer_failure(symm_comm_t *comm, symm_result_t *code, char *msg, size_t cap) {
  if (!symm_comm_note_get(comm, NCCL_FAIL_NOTE, msg, cap)) return false;
  char *colon = strchr(msg, ':');
  *code = colon ? (symm_result_t)atoi(msg) : SYMM_ERR_BACKEND;
  if (colon) memmove(msg, colon + 1, strlen(colon + 1) + 1);
  return true;
}

/* Polls an operation in progress to its end. */
static symm_result_t nccl_wait(symm_comm_t *comm, nccl_state_t *st, const char *what) {
  symm_backoff_t b;
  /* The ranks agree on the outcome afterwards (an allocation's
   * registration, init): a wait in vain ends early enough for this rank
   * to reach that agreement and say why, within the call's deadline. */
  symm_backoff_start_until(&b, symm_deadline_before_agreeing(symm_comm_timeout_ms(comm)),
                           symm_comm_local_size(comm));
  const uint64_t start = symm_now_ns();
  uint64_t next_look = symm_now_ns() + NCCL_LOOK_NS;
  for (;;) {
    int state = SYMM_NCCL_IN_PROGRESS;
    int res = st->lib->comm_get_async_error(st->comm, &state);
    if (res != SYMM_NCCL_SUCCESS) state = res;
    if (state == SYMM_NCCL_SUCCESS) return SYMM_SUCCESS;
    if (state != SYMM_NCCL_IN_PROGRESS) {
      const char *last = st->lib->get_last_error ? st->lib->get_last_error(st->comm) : NULL;
      symm_result_t err = symm_error(SYMM_ERR_BACKEND, "nccl: %s failed on rank %d: %s%s%s",
                                     what, st->rank, nccl_result_text(st, state),
                                     last && *last ? ": " : "", last ? last : "");
      nccl_abort(st);
      return err;
    }
    int peer = -1;
    char msg[768];
    if (symm_now_ns() >= next_look) {
      next_look = symm_now_ns() + NCCL_LOOK_NS;
      if ((peer = symm_comm_lost_rank(comm)) >= 0) {
        nccl_abort(st);
        return symm_error(SYMM_ERR_PEER_LOST, "nccl: rank %d is gone (exited or lost) while rank %d "
                          "waited in %s; the NCCL communicator is aborted", peer, st->rank, what);
      }
      symm_result_t code;
      if (peer_failure(comm, &code, msg, sizeof msg)) {
        nccl_abort(st);
        return symm_error(code, "%s (seen by rank %d in %s; its NCCL communicator is aborted)",
                          msg, st->rank, what);
      }
    }
    if (!symm_backoff_pause(&b)) {
      nccl_abort(st);
      return symm_error(SYMM_ERR_TIMEOUT, "nccl: %s did not finish on rank %d in %llu ms "
                        "(of the call's SYMM_TIMEOUT_MS, %d ms, the rest is kept for the ranks "
                        "to agree); the NCCL communicator is aborted", what, st->rank,
                        (unsigned long long)((symm_now_ns() - start) / 1000000u),
                        symm_comm_timeout_ms(comm));
    }
  }
}

symm_result_t nccl_call(symm_comm_t *comm, nccl_state_t *st, int res, const char *what) {
  if (res == SYMM_NCCL_IN_PROGRESS || (res == SYMM_NCCL_SUCCESS && st->nonblocking)) {
    symm_result_t err = st->comm ? nccl_wait(comm, st, what) : SYMM_SUCCESS;
    if (err != SYMM_SUCCESS) nccl_publish_failure(comm, err);
    return err;
  }
  if (res == SYMM_NCCL_SUCCESS) return SYMM_SUCCESS;
  /* NCCL keeps the last error per thread; a failed init has no comm. */
  const char *last = st->lib->get_last_error ? st->lib->get_last_error(st->comm) : NULL;
  symm_result_t err = symm_error(SYMM_ERR_BACKEND, "nccl: %s failed on rank %d: %s%s%s", what,
                                 st->rank, nccl_result_text(st, res), last && *last ? ": " : "",
                                 last ? last : "");
  nccl_abort(st);
  nccl_publish_failure(comm, err);
  return err;
}
