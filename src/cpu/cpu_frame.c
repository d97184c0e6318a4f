/* CPU engine: the frame every collective runs on, as cpu_coll.c's top
 * describes: the arrivals of a call and the waits for them (the gate,
 * the errors of a call given up), the descriptors and the mismatch check, the
 * scratch halves.  The collectives themselves are in cpu_coll.c and
 * cpu_coll_v.c. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_coll_int.h"

const char *cpu_coll_kind_name(int kind) {
  switch (kind) {
    case SYMM_COLL_ALL_REDUCE: return "all_reduce";
    case SYMM_COLL_ALL_GATHER: return "all_gather";
    case SYMM_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case SYMM_COLL_BROADCAST: return "broadcast";
    case SYMM_COLL_ALL_TO_ALL: return "all_to_all";
    case SYMM_COLL_ALL_TO_ALL_V: return "all_to_all_v";
  }
  return "?";
}

/* ------------------------------------------------------------- waiting */

static uint64_t flag_of(const coll_t *c, int r) {
  return atomic_load_explicit(&c->pads[r]->slot[c->h].flag, memory_order_acquire);
}

static uint64_t left_of(const coll_t *c, int r) {
  return atomic_load(&c->pads[r]->left);
}

/* Writes "rank, rank..." of the peers whose flag is below target into list. */
static int list_behind(const coll_t *c, uint64_t target, char *list, size_t cap) {
  size_t n = 0;
  int missing = 0;
  list[0] = '\0';
  for (int r = 0; r < c->w; r++) {
    if (r == c->me || flag_of(c, r) >= target) continue;
    if (n + 16 < cap) {
      int k = snprintf(list + n, cap - n, "%s%d", missing ? ", " : "", r);
      n += k > 0 ? (size_t)k : 0;
    } else if (n + 4 < cap) {
      n += (size_t)snprintf(list + n, cap - n, "...");
    }
    missing++;
  }
  return missing;
}

static symm_result_t timeout_error(const coll_t *c, uint64_t target, const char *what) {
  char list[200];
  int missing = list_behind(c, target, list, sizeof list);
  return symm_error(SYMM_ERR_TIMEOUT, "symm_%s #%llu: timed out after %d ms waiting for rank%s "
                    "%s to %s; the call is given up on every rank", cpu_coll_kind_name(c->a->kind),
                    (unsigned long long)c->seq, symm_comm_timeout_ms(c->comm),
                    missing > 1 ? "s" : "", missing ? list : "(none left)", what);
}

/* This call was given up by a peer before every rank arrived:
 * `late`, this rank arrived after that (it was slow, or stopped; a peer
 * whose process is gone without leaving the call makes it PEER_LOST:
 * that loss is why the others gave up, or ends the job anyway; one that
 * left the call and then exited is not lost); else a peer stopped
 * waiting while this rank waited too, for the ranks still behind, and a
 * rank behind whose process is gone makes it PEER_LOST. */
static symm_result_t given_up_error(const coll_t *c, bool late, uint64_t flag_target) {
  for (int r = 0; late && r < c->w; r++) {
    int32_t pid = symm_comm_peer_pid(c->comm, r);
    if (r != c->me && left_of(c, r) < c->seq && pid > 0 && symm_process_gone(pid))
      return symm_error(SYMM_ERR_PEER_LOST, "symm_%s #%llu: rank %d (pid %d) is gone; the call "
                        "was given up, and fails on every rank", cpu_coll_kind_name(c->a->kind),
                        (unsigned long long)c->seq, r, (int)pid);
  }
  char who[200] = "", behind[200];
  size_t n = 0;
  for (int r = 0; r < c->w; r++)
    if (r != c->me && left_of(c, r) >= c->seq && n + 16 < sizeof who)
      n += (size_t)snprintf(who + n, sizeof who - n, "%s%d", n ? ", " : "", r);
  const char *name = cpu_coll_kind_name(c->a->kind);
  const unsigned long long seq = (unsigned long long)c->seq;
  if (late)
    return symm_error(SYMM_ERR_TIMEOUT, "symm_%s #%llu: %s%s gave this call up before every rank "
                      "arrived (this rank came late: slow, or stopped); it fails on every rank",
                      name, seq, n ? "rank " : "a peer", who);
  int missing = list_behind(c, flag_target, behind, sizeof behind);
  for (int r = 0; r < c->w; r++) {
    int32_t pid = symm_comm_peer_pid(c->comm, r);
    if (r != c->me && flag_of(c, r) < flag_target && pid > 0 && symm_process_gone(pid))
      return symm_error(SYMM_ERR_PEER_LOST, "symm_%s #%llu: rank %d (pid %d) is gone; it did not "
                        "arrive, and the call is given up on every rank", name, seq, r, (int)pid);
  }
  return symm_error(SYMM_ERR_TIMEOUT, "symm_%s #%llu: timed out waiting for rank%s %s (%s%s gave "
                    "the call up after %d ms); it fails on every rank", name, seq,
                    missing > 1 ? "s" : "", missing ? behind : "(none left)",
                    n ? "rank " : "a peer", who, symm_comm_timeout_ms(c->comm));
}

static void start_backoff(const coll_t *c, symm_backoff_t *b, int watch) {
  /* Its deadline, taken at its first clock reading, is the call's: every
   * call runs within its operation's (symm_op_deadline_begin at entry). */
  symm_backoff_start(b, symm_comm_timeout_ms(c->comm), symm_comm_local_size(c->comm));
  symm_backoff_host_cpus(b, cpu_state(c->comm)->host_cpus);
  symm_backoff_watch(b, watch >= 0 ? symm_comm_peer_pid(c->comm, watch) : 0);
}

/* The flag that says call seq was given up: below every arrival at it,
 * above every flag of the calls before. */
static uint64_t given_up_flag(const coll_t *c) { return c->seq * PHASES + PHASE_GIVEN_UP; }

/* This rank arrives at `phase` of the call: its flag, after what it
 * published, unless a peer marked the call given up first. */
symm_result_t cpu_coll_arrive(coll_t *c, int phase) {
  _Atomic uint64_t *flag = &c->pads[c->me]->slot[c->h].flag;
  const uint64_t now = c->seq * PHASES + (uint64_t)phase;
  /* The first try expects what this rank wrote there last rather than
   * reading the line first: the peers read it since, and a read here
   * could cost a miss of its own before the swap's.  A wrong guess (a
   * new scratch, a mark) fails the swap, which returns what is there;
   * no guess equals this call's mark, below every flag of this call and
   * above every earlier one. */
  uint64_t *guess = &cpu_state(c->comm)->flag_was[c->h], was = *guess;
  while (!atomic_compare_exchange_weak_explicit(flag, &was, now, memory_order_release,
                                                memory_order_relaxed))
    if (was == given_up_flag(c)) return given_up_error(c, true, 0);
  *guess = now;
  return SYMM_SUCCESS;
}

/* Waits until rank r arrived at `target` (or later).  At the deadline, or
 * with r's process gone, it marks r's flag given up, which succeeds only
 * while r has not arrived: then r can no longer arrive, no rank can see
 * every arrival, and the call fails on every rank.  A rank that left the
 * call without arriving will not arrive: its `left` says so. */
static symm_result_t wait_rank(coll_t *c, int r, uint64_t target, const char *what) {
  _Atomic uint64_t *flag = &c->pads[r]->slot[c->h].flag;
  symm_backoff_t b;
  start_backoff(c, &b, r);
  for (unsigned polls = 1;; polls++) {
    uint64_t f = atomic_load_explicit(flag, memory_order_acquire);
    if (f >= target) return SYMM_SUCCESS;
    if (f == given_up_flag(c)) return given_up_error(c, false, target);
    if (symm_backoff_pause(&b)) {
      /* left before the flag: a rank leaves after its last arrival. */
      if ((polls & 255) == 0 && left_of(c, r) >= c->seq && flag_of(c, r) < target)
        return given_up_error(c, false, target);
      continue;
    }
    if (!atomic_compare_exchange_strong(flag, &f, given_up_flag(c))) continue; /* it moved */
    if (b.lost)
      return symm_error(SYMM_ERR_PEER_LOST, "symm_%s #%llu: rank %d (pid %d) is gone; it did not "
                        "%s", cpu_coll_kind_name(c->a->kind), (unsigned long long)c->seq, r,
                        (int)symm_comm_peer_pid(c->comm, r), what);
    return timeout_error(c, target, what);
  }
}

/* Waits until every rank arrived at `phase`: one cache line per peer,
 * read where it is already there, waited for where it is not. */
symm_result_t cpu_coll_wait(coll_t *c, int phase, const char *what) {
  const uint64_t target = c->seq * PHASES + (uint64_t)phase;
  for (int k = 1; k < c->w; k++) {
    const int r = (c->me + k) % c->w;
    if (flag_of(c, r) < target) SYMM_CHECK(wait_rank(c, r, target, what));
  }
  /* Every rank arrived at this call, so every rank has left the one before. */
  cpu_state_t *cs = cpu_state(c->comm);
  if (cs->all_left < c->seq - 1) cs->all_left = c->seq - 1;
  return SYMM_SUCCESS;
}

symm_result_t cpu_coll_sync(coll_t *c, int phase, const char *what) {
  SYMM_CHECK(cpu_coll_arrive(c, phase));
  return cpu_coll_wait(c, phase, what);
}

/* Waits until every peer has left call seq - 2, whose slot and scratch
 * half this call reuses.  A peer that already left this call gave it up
 * without arriving: it fails here at once. */
static symm_result_t gate(coll_t *c) {
  cpu_state_t *cs = cpu_state(c->comm);
  if (c->seq <= cs->all_left + 2) return SYMM_SUCCESS;
  const uint64_t need = c->seq - 2;
  symm_backoff_t b;
  bool started = false;
  for (;;) {
    uint64_t least = c->seq - 1; /* this rank's own */
    int slow = -1;
    for (int r = 0; r < c->w; r++) {
      if (r == c->me) continue;
      uint64_t l = left_of(c, r);
      if (l >= c->seq) return given_up_error(c, true, 0);
      if (l < least) least = l, slow = r;
    }
    if (least >= need) {
      if (least > cs->all_left) cs->all_left = least;
      return SYMM_SUCCESS;
    }
    if (!started) start_backoff(c, &b, slow);
    started = true;
    symm_backoff_watch(&b, symm_comm_peer_pid(c->comm, slow));
    if (symm_backoff_pause(&b)) continue;
    if (b.lost)
      return symm_error(SYMM_ERR_PEER_LOST, "symm_%s #%llu: rank %d (pid %d) is gone; it did "
                        "not finish call #%llu", cpu_coll_kind_name(c->a->kind), (unsigned long long)c->seq,
                        slow, (int)symm_comm_peer_pid(c->comm, slow),
                        (unsigned long long)least + 1);
    return symm_error(SYMM_ERR_TIMEOUT, "symm_%s #%llu: timed out after %d ms waiting for rank "
                      "%d to leave call #%llu, which it came to late (slow, or stopped); this "
                      "call is given up on every rank", cpu_coll_kind_name(c->a->kind),
                      (unsigned long long)c->seq, symm_comm_timeout_ms(c->comm), slow,
                      (unsigned long long)least + 1);
  }
}

/* --------------------------------------------- descriptors, mismatches */

void cpu_coll_publish(coll_t *c, uint64_t group, uint64_t offset) {
  const symm_coll_args_t *a = c->a;
  coll_pad_t *p = c->pads[c->me];
  p->slot[c->h].brief = (coll_brief_t){c->sig, group, offset};
  p->detail[c->h] = (coll_detail_t){c->whole->count, (int32_t)a->kind, (int32_t)a->dtype,
                                    (int32_t)a->op, (int32_t)a->root, (int32_t)a->algo};
}

/* The call of detail d; with `algo`, the all-reduce algorithm too. */
static void describe(const coll_detail_t *d, bool algo, char *out, size_t cap) {
  const char *dt = symm_dtype_name((symm_dtype_t)d->dtype);
  int n = snprintf(out, cap, "symm_%s(count %llu, %s", cpu_coll_kind_name(d->kind),
                   (unsigned long long)d->count, dt ? dt : "?");
  if (n < 0 || (size_t)n >= cap) return;
  const char *op = symm_redop_name((symm_redop_t)d->op);
  const char *an = symm_algo_name((symm_algo_t)d->algo);
  if (d->kind == SYMM_COLL_ALL_REDUCE && algo)
    snprintf(out + n, cap - (size_t)n, ", %s, algorithm %s)", op ? op : "?", an ? an : "?");
  else if (symm_coll_reduces(d->kind))
    snprintf(out + n, cap - (size_t)n, ", %s)", op ? op : "?");
  else if (d->kind == SYMM_COLL_BROADCAST)
    snprintf(out + n, cap - (size_t)n, ", root %d)", d->root);
  else if (d->kind == SYMM_COLL_ALL_TO_ALL_V)
    snprintf(out + n, cap - (size_t)n, ", %s)", d->root == SYMM_V_HOST ? "host counts"
                                                : d->root == SYMM_V_DEV ? "device splits"
                                                : d->root == SYMM_V_DEV_2D ? "2-D device splits"
                                                                           : "2-D combine");
  else
    snprintf(out + n, cap - (size_t)n, ")");
}

/* Whether some rank arrived in a host call of this number (cpu_host_call)
 * rather than a collective: every rank sees the same table once all
 * arrived, so every rank in a collective decides alike and meets it. */
bool cpu_coll_peer_in_host_call(const coll_t *c) {
  for (int r = 0; r < c->w; r++)
    if (cpu_coll_brief(c, r)->sig == SYMM_COLL_SIG_HOST_CALL) return true;
  return false;
}

/* Every rank compares the same table against rank 0, so every rank reaches
 * the same verdict and the same message. */
symm_result_t cpu_coll_check_match(const coll_t *c) {
  if (cpu_coll_peer_in_host_call(c)) return symm_comm_meet_host_call(c->comm);
  for (int r = 0; r < c->w; r++) {
    if (cpu_coll_brief(c, r)->sig != SYMM_COLL_SIG_REFUSED) continue;
    return symm_error(SYMM_ERR_MISMATCH, "collective #%llu: rank %d's symm_%s failed its "
                      "argument checks there (SYMM_ERR_INVALID_ARG); no rank ran the call",
                      (unsigned long long)c->seq, r, cpu_coll_kind_name(c->pads[r]->detail[c->h].kind));
  }
  uint64_t sig0 = cpu_coll_brief(c, 0)->sig;
  for (int r = 1; r < c->w; r++) {
    if (cpu_coll_brief(c, r)->sig == sig0) continue;
    const coll_detail_t *d = &c->pads[r]->detail[c->h], *d0 = &c->pads[0]->detail[c->h];
    char mine[160], theirs[160];
    const bool algo = d->algo != d0->algo;
    describe(d, algo, theirs, sizeof theirs);
    describe(d0, algo, mine, sizeof mine);
    return symm_error(SYMM_ERR_MISMATCH, "collective #%llu: rank %d called %s, rank 0 called %s%s",
                      (unsigned long long)c->seq, r, theirs, mine,
                      algo ? " (set the same SYMM_ALLREDUCE_ALGO or "
                             "symm_comm_set_allreduce_algo on every rank)"
                           : "");
  }
  return SYMM_SUCCESS;
}

/* The halves sit at fixed places (not at multiples of this call's need),
 * so that a call of another size never lands on the half the previous call
 * may still be read from. */
size_t cpu_coll_half_capacity(const symm_tensor_t *s) {
  return symm_tensor_nbytes(s) / 2 & ~(size_t)(SCRATCH_ALIGN - 1);
}

char *cpu_coll_half(const coll_t *c, int r) {
  return (char *)symm_tensor_peer_data(c->scratch)[r] + (size_t)c->h * c->half_stride;
}

/* Works on scratch s from now on: its pads (after the gate).  `grown`:
 * the ranks just made s together inside this call, so every rank has left
 * the calls before it. */
symm_result_t cpu_coll_attach(coll_t *c, symm_tensor_t *s, bool grown) {
  cpu_state_t *cs = cpu_state(c->comm);
  c->scratch = s;
  c->half_stride = cpu_coll_half_capacity(s);
  if (cs->pads_of != s) {
    if (!cs->pads && !(cs->pads = malloc(sizeof *cs->pads * (size_t)c->w)))
      return symm_error(SYMM_ERR_NO_MEMORY, "CPU collectives: out of memory");
    cs->pads_of = NULL;
    for (int r = 0; r < c->w; r++) {
      void *p;
      SYMM_CHECK(symm_tensor_signal_pad(s, r, &p));
      cs->pads[r] = p;
    }
    cs->pads_of = s;
  }
  c->pads = cs->pads;
  if (atomic_load(&c->pads[c->me]->left) < cs->left) atomic_store(&c->pads[c->me]->left, cs->left);
  if (grown && cs->all_left < c->seq - 1) cs->all_left = c->seq - 1;
  return gate(c);
}

symm_result_t cpu_coll_grow(coll_t *c, size_t bytes, symm_tensor_t **s) {
  /* Halves are whole cache lines: a request that is not would get halves
   * short of it, and data staged to its end would run into the other half,
   * where the next call writes. */
  return symm_comm_scratch(c->comm, symm_round_up(bytes, 2 * SCRATCH_ALIGN), s);
}

symm_tensor_t *cpu_coll_own_tensor(const coll_t *c, const void *ptr, size_t bytes, size_t *off) {
  symm_tensor_t *t;
  int rank;
  if (!symm_tensor_find(ptr, &t, &rank, off) || symm_tensor_comm(t) != c->comm ||
      !symm_tensor_is_rendezvoused(t) || rank != c->me)
    return NULL;
  const size_t nbytes = symm_tensor_nbytes(t);
  return *off <= nbytes && bytes <= nbytes - *off ? t : NULL;
}

/* ------------------------------------------------- cross-memory attach */

/* Each rank publishes the failure of its reads (if any), then arrives at
 * phase 3; every rank reads every rank's mark only once all arrived, so
 * all of them see the same marks and fail alike, the first mark naming
 * the failure. */
symm_result_t cpu_coll_cma_finish(coll_t *c) {
  coll_detail_t *mine = &c->pads[c->me]->detail[c->h];
  mine->read_errno = c->read_errno;
  mine->read_peer = c->read_peer;
  SYMM_CHECK(cpu_coll_sync(c, PHASE_DONE, "finish reading"));
  for (int r = 0; r < c->w; r++) {
    const coll_detail_t *d = &c->pads[r]->detail[c->h];
    const int err = d->read_errno, peer = d->read_peer;
    if (!err) continue;
    return symm_error(err == ESRCH ? SYMM_ERR_PEER_LOST : SYMM_ERR_SYSTEM,
                      "symm_%s #%llu: rank %d could not read rank %d's send data in its "
                      "process (process_vm_readv: %s); the call fails on every rank",
                      cpu_coll_kind_name(c->a->kind), (unsigned long long)c->seq, r, peer,
                      strerror(err));
  }
  return SYMM_SUCCESS;
}
