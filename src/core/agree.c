/* The core's own collectives over the bootstrap, and the one sequence of
 * communicator-wide calls.
 *
 * Every communicator-wide call the user makes takes the next number of the
 * communicator (symm_call_begin), whichever channel it agrees through: the
 * engine's collectives through the scratch tensor's pads, the barrier,
 * rendezvous, collective alloc and free through the bootstrap.  Bootstrap
 * rounds are all-gathers tagged with the internal step, the call's number
 * and the user call's name, so that ranks in different calls (a barrier
 * and a rendezvous, an allocation and a free) get SYMM_ERR_MISMATCH naming
 * both calls as the user made them instead of exchanging garbage.  A host
 * call first says so on the pads (engine->host_call), where a peer's
 * collective of the same number sees it and joins the host call's round
 * (symm_comm_meet_host_call): the two channels meet, every rank fails at
 * once, and every rank has used up the same number and the same round.
 * An engine that cannot look at once (GPU: its collectives only enqueue)
 * has no host_call; host calls are numbered apart there, and a collective
 * may come before or after a peer's host call.  Also here: the agreement
 * of every rank on a local step's result, and the user-visible barrier. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "symm_fault.h"

/* What each internal step is, for the rare message where ranks are in
 * the same user call but at different steps of it. */
static const char *step_name(uint32_t op) {
  switch (op) {
    case SYMM_TAG_BARRIER: return "its synchronisation";
    case SYMM_TAG_RENDEZVOUS: return "its exchange of tensors";
    case SYMM_TAG_STATUS: return "its agreement on a result";
    case SYMM_TAG_STARTUP: return "its start-up round";
    case SYMM_TAG_ALLOC: return "its allocation";
    case SYMM_TAG_FREE: return "its free";
    case SYMM_TAG_COLLECTIVE: return "its collective";
    case SYMM_TAG_SPLIT: return "its exchange of colors";
    case SYMM_TAG_PROVIDER: return "its provider library's bootstrap round";
    case SYMM_TAG_REGISTER: return "its registration of the user's memory";
    default: return "an unknown step";
  }
}

/* The header of every contribution: the internal step and the user call
 * it belongs to.  Ranks match when all three of step, number and API name
 * agree; the arguments in brief are for the message only (each call
 * compares its own arguments). */
typedef struct {
  uint32_t op;
  uint32_t reserved;
  uint64_t seq;
  char fn[32];
  char desc[96];
} call_tag_t;

static void own_tag(symm_comm_t *comm, uint32_t op, call_tag_t *tag) {
  memset(tag, 0, sizeof *tag);
  tag->op = op;
  tag->seq = comm->call.depth ? comm->call.seq : 0;
  snprintf(tag->fn, sizeof tag->fn, "%s", comm->call.depth ? comm->call.fn : "symm_comm_init");
  snprintf(tag->desc, sizeof tag->desc, "%s", symm_call_desc(comm));
}

static bool same_fn(const call_tag_t *a, const call_tag_t *b) {
  return strncmp(a->fn, b->fn, sizeof a->fn) == 0;
}

/* Every rank sees the same table and compares it with rank 0's entry, so
 * every rank reaches the same verdict and the same message.  Ranks out of
 * step (the same call under different numbers: an earlier call that some
 * ranks gave up on) all continue from the highest number, so that the
 * next calls can pair up again; calls of different kinds may come from
 * different counters (host_seq), whose numbers say nothing of each other. */
static symm_result_t check_tags(symm_comm_t *comm, const call_tag_t *tags) {
  const call_tag_t *t0 = &tags[0];
  uint64_t most = t0->seq;
  for (int r = 1; r < comm->size; r++) {
    if (!same_fn(&tags[r], t0))
      return symm_error(SYMM_ERR_MISMATCH, "rank %d called %s while rank 0 called %s", r,
                        tags[r].desc, t0->desc);
    if (tags[r].seq > most) most = tags[r].seq;
  }
  for (int r = 1; r < comm->size; r++) {
    const call_tag_t *t = &tags[r];
    if (t->seq != t0->seq) {
      if (comm->call.depth && most > *comm->call.counter) *comm->call.counter = most;
      return symm_error(SYMM_ERR_MISMATCH, "rank %d called %s as its communicator call #%llu, "
                        "rank 0 as #%llu: the ranks are out of step (an earlier call failed on "
                        "some of them only)", r, t->desc, (unsigned long long)t->seq,
                        (unsigned long long)t0->seq);
    }
    if (t->op != t0->op)
      return symm_error(SYMM_ERR_MISMATCH, "rank %d and rank 0 are at different steps of %s "
                        "(%s; %s)", r, t0->desc, step_name(t->op), step_name(t0->op));
  }
  return SYMM_SUCCESS;
}

/* Takes the tags off values[] into tags[] (every contribution starts with
 * one, or the round is refused). */
static symm_result_t split_tags(const symm_comm_t *comm, void **values, size_t *lens,
                                call_tag_t *tags) {
  const size_t hdr = sizeof *tags;
  for (int r = 0; r < comm->size; r++) {
    if (lens[r] < hdr)
      return symm_error(SYMM_ERR_PROTOCOL, "bootstrap: rank %d sent %zu bytes, less than a "
                        "call's header", r, lens[r]);
    memcpy(&tags[r], values[r], hdr);
    tags[r].fn[sizeof tags[r].fn - 1] = tags[r].desc[sizeof tags[r].desc - 1] = '\0';
    lens[r] -= hdr;
    memmove(values[r], (uint8_t *)values[r] + hdr, lens[r]);
  }
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_allgatherv_op(symm_comm_t *comm, uint32_t op, const void *send,
                                      size_t len, void **values, size_t *lens) {
  const size_t hdr_len = sizeof(call_tag_t);
  uint8_t *mine = malloc(hdr_len + len);
  call_tag_t *tags = calloc((size_t)comm->size, sizeof *tags);
  symm_result_t res = SYMM_SUCCESS;
  if (!mine || !tags) {
    free(mine);
    free(tags);
    return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", symm_call_desc(comm));
  }
  call_tag_t own;
  own_tag(comm, op, &own);
  memcpy(mine, &own, hdr_len);
  if (len) memcpy(mine + hdr_len, send, len);
  res = comm->bootstrap->ops->allgatherv(comm->bootstrap, mine, hdr_len + len, values, lens);
  free(mine);
  if (res != SYMM_SUCCESS) {
    symm_error_context("%s", own.desc);
    free(tags);
    return res;
  }
  res = split_tags(comm, values, lens, tags);
  if (res == SYMM_SUCCESS) res = check_tags(comm, tags);
  free(tags);
  if (res != SYMM_SUCCESS)
    for (int r = 0; r < comm->size; r++) {
      free(values[r]);
      values[r] = NULL;
      lens[r] = 0;
    }
  return res;
}

symm_result_t symm_comm_allgather_op(symm_comm_t *comm, uint32_t op, const void *send,
                                     size_t len, void *recv) {
  void **values = calloc((size_t)comm->size, sizeof *values);
  size_t *lens = calloc((size_t)comm->size, sizeof *lens);
  symm_result_t res = SYMM_SUCCESS;
  if (!values || !lens) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", symm_call_desc(comm));
    goto out;
  }
  SYMM_CHECK_GOTO(symm_comm_allgatherv_op(comm, op, send, len, values, lens), res, out);
  for (int r = 0; r < comm->size; r++) {
    if (lens[r] != len) {
      res = symm_error(SYMM_ERR_MISMATCH, "rank %d called %s with %zu bytes in %s, rank %d "
                       "with %zu", r, symm_call_desc(comm),
                       lens[r], step_name(op), comm->rank, len);
      goto out;
    }
    if (recv && len) memcpy((uint8_t *)recv + (size_t)r * len, values[r], len);
  }
out:
  for (int r = 0; values && r < comm->size; r++) free(values[r]);
  free(values);
  free(lens);
  return res;
}

/* One rank's part in an agreement: its result and, on failure, the start
 * of its message, so that the other ranks can say why, not only where. */
typedef struct {
  int32_t code;
  char why[252];
} agree_vote_t;

symm_result_t symm_comm_agree(symm_comm_t *comm, symm_result_t mine, const char *what) {
  agree_vote_t *votes = calloc((size_t)comm->size, sizeof *votes);
  if (!votes) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", what);
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  agree_vote_t me;
  memset(&me, 0, sizeof me);
  me.code = (int32_t)mine;
  if (mine != SYMM_SUCCESS) snprintf(me.why, sizeof me.why, "%s", saved);
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_STATUS, &me, sizeof me, votes);
  if (res == SYMM_SUCCESS) {
    if (mine != SYMM_SUCCESS) {
      res = symm_error(mine, "%s", saved);
    } else {
      for (int r = 0; r < comm->size; r++)
        if (votes[r].code != SYMM_SUCCESS) {
          votes[r].why[sizeof votes[r].why - 1] = '\0';
          res = symm_error((symm_result_t)votes[r].code, "%s failed on rank %d (%s): %s", what,
                           r, symm_strerror((symm_result_t)votes[r].code), votes[r].why);
          break;
        }
    }
  }
  free(votes);
  return res;
}

/* A user-visible barrier is an agreed all-gather with its own tag, so that a
 * rank in a barrier and a rank in another collective see a mismatch. */
symm_result_t symm_comm_barrier(symm_comm_t *comm) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_barrier: comm is NULL");
  symm_call_begin(comm, true, "symm_comm_barrier", "symm_comm_barrier");
  symm_fault_point(SYMM_FAULT_BARRIER, comm->rank);
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_BARRIER, NULL, 0, NULL);
  symm_call_end(comm);
  return res;
}

symm_result_t symm_comm_provider_allgather(symm_comm_t *comm, const void *send, size_t len,
                                           void *recv) {
  return symm_comm_allgather_op(comm, SYMM_TAG_PROVIDER, send, len, recv);
}

symm_result_t symm_comm_meet_host_call(symm_comm_t *comm) {
  SYMM_TRACE(COLL, "%s #%llu: a peer is in a host call; meeting it", symm_call_desc(comm),
             (unsigned long long)comm->call.seq);
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_COLLECTIVE, NULL, 0, NULL);
  if (res != SYMM_SUCCESS) return res;
  return symm_error(SYMM_ERR_INTERNAL, "%s #%llu: a peer announced a host call, but every rank "
                    "was in a collective", symm_call_desc(comm),
                    (unsigned long long)comm->call.seq);
}

/* The outermost call's number and name; a step inside it changes nothing
 * but the depth (false). */
static bool enter(symm_comm_t *comm, bool host, const char *fn) {
  if (comm->call.depth++) return false;
  symm_call_t *c = &comm->call;
  c->counter = host && !comm->engine->host_call ? &comm->host_seq : &comm->coll_seq;
  c->seq = ++*c->counter;
  /* One deadline for everything the call waits for (the engine's gate and
   * rounds, the bootstrap rounds of a host call). */
  c->outer_deadline = symm_op_deadline_begin(comm->timeout_ms);
  c->fn = fn;
  c->coll = NULL;
  c->desc[0] = '\0';
  return true;
}

void symm_call_begin(symm_comm_t *comm, bool host, const char *fn, const char *fmt, ...) {
  if (!enter(comm, host, fn)) return;
  symm_call_t *c = &comm->call;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->desc, sizeof c->desc, fmt, ap);
  va_end(ap);
  if (host && comm->scratch && comm->engine->host_call) comm->engine->host_call(comm, c->seq);
}

void symm_call_begin_collective(symm_comm_t *comm, const char *fn, const symm_coll_args_t *args) {
  if (enter(comm, false, fn)) comm->call.coll = args;
}

/* The same words as the engine's mismatch messages, from the arguments as
 * passed (a refused call's too). */
const char *symm_call_desc(symm_comm_t *comm) {
  symm_call_t *c = &comm->call;
  if (!c->depth) return "symm_comm_init"; /* the core's only rounds outside a call */
  if (c->desc[0] || !c->coll) return c->desc;
  const symm_coll_args_t *a = c->coll;
  const char *dt = symm_dtype_name(a->dtype), *op = symm_redop_name(a->op);
  int n = snprintf(c->desc, sizeof c->desc, "%s(count %zu, %s", c->fn, a->count, dt ? dt : "?");
  size_t at = n > 0 && (size_t)n < sizeof c->desc ? (size_t)n : sizeof c->desc - 1;
  if (symm_coll_reduces(a->kind))
    snprintf(c->desc + at, sizeof c->desc - at, ", %s)", op ? op : "?");
  else if (a->kind == SYMM_COLL_BROADCAST)
    snprintf(c->desc + at, sizeof c->desc - at, ", root %d)", a->root);
  else
    snprintf(c->desc + at, sizeof c->desc - at, ")");
  return c->desc;
}

void symm_call_end(symm_comm_t *comm) {
  if (comm->call.depth <= 0) return;
  if (--comm->call.depth) return;
  if (comm->call.counter == &comm->coll_seq && SYMM_OPS_HAS(comm->engine, 2, call_end))
    comm->engine->call_end(comm, comm->coll_seq);
  symm_op_deadline_end(comm->call.outer_deadline);
}

