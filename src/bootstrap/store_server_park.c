/* The store server's parked requests (GET, WAIT, MGET whose keys are not
 * all there yet) and the lost ranks that fail them early. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_int.h"

/* Whether a loss recorded for communicator `lost` concerns a request of
 * communicator `asker`: the same one, or either is none (symmem-run's
 * symm_store_server_mark_lost and clients that named no communicator see
 * every loss, as before communicators were told apart). */
static bool srv_lost_applies(uint32_t lost, uint32_t asker) {
  return lost == SYMM_STORE_NO_COMM || asker == SYMM_STORE_NO_COMM || lost == asker;
}

/* Whether loss e concerns connection c's requests: as above, and a
 * process that is gone concerns the communicators numbered as the job's
 * that it did not join (store_server_proc.c). */
static bool srv_lost_concerns(const struct srv_lost *e, const srv_conn_t *c) {
  if (e->comm == SRV_JOB_COMM) return c->job_ranks && !srv_proc_member(e->proc, c->comm);
  return srv_lost_applies(e->comm, c->comm);
}

/* The first lost rank that concerns connection c's requests, or NULL. */
static const struct srv_lost *srv_lost_for(const symm_store_server_t *s, const srv_conn_t *c) {
  for (size_t i = 0; i < s->nlost; i++)
    if (srv_lost_concerns(&s->lost[i], c)) return &s->lost[i];
  return NULL;
}

/* Rank c->rank said HELLO again: it is back in its communicator (and no
 * longer lost to everyone; a HELLO naming no communicator clears them
 * all).  A process that says HELLO as the job's rank r (a rank started
 * again) is rank r of the job again. */
void srv_clear_lost(symm_store_server_t *s, const srv_conn_t *c) {
  size_t kept = 0;
  for (size_t i = 0; i < s->nlost; i++) {
    const struct srv_lost e = s->lost[i];
    const bool back = e.comm == SRV_JOB_COMM ? c->job_ranks : srv_lost_applies(e.comm, c->comm);
    if (e.rank == c->rank && back) {
      SYMM_INFO(STORE, "store: rank %d is back; no longer lost", c->rank);
      continue;
    }
    s->lost[kept++] = e;
  }
  s->nlost = kept;
}

bool srv_expected_gone(symm_store_server_t *s, int32_t pid) {
  if (pid <= 0) return false;
  pthread_mutex_lock(&s->lock);
  bool expected = false;
  for (size_t i = 0; i < s->nexpected && !expected; i++) expected = s->expected_gone[i] == pid;
  pthread_mutex_unlock(&s->lock);
  return expected;
}

/* Records rank as lost in communicator comm and fails every parked request
 * that it concerns: they cannot count on that rank any more.  Other
 * communicators served by this store go on. */
static void srv_record_lost(symm_store_server_t *s, uint32_t comm, int rank,
                            const srv_proc_t *proc, int32_t pid, const char *why) {
  for (size_t i = 0; i < s->nlost; i++)
    if (s->lost[i].rank == rank && s->lost[i].comm == comm && s->lost[i].proc == proc) return;
  if (s->nlost == s->lost_cap) {
    size_t cap = s->lost_cap ? s->lost_cap * 2 : 16;
    struct srv_lost *p = realloc(s->lost, cap * sizeof *p);
    if (!p) {
      /* Cannot remember it; still release the waiters below. */
      SYMM_WARN(STORE, "store: out of memory recording lost rank %d", rank);
    } else {
      s->lost = p;
      s->lost_cap = cap;
    }
  }
  const struct srv_lost e = {comm, rank, proc};
  if (s->nlost < s->lost_cap) s->lost[s->nlost++] = e;
  const char *where = comm == SYMM_STORE_NO_COMM ? ""
                      : comm == SRV_JOB_COMM     ? " in the communicators it did not join"
                                                 : " in its communicator";
  /* A process its launcher stops is no news to the launcher's user. */
  if (srv_expected_gone(s, pid))
    SYMM_INFO(STORE, "store: rank %d lost%s: %s (stopped by its launcher)", rank, where, why);
  else
    SYMM_WARN(STORE, "store: rank %d lost%s: %s", rank, where, why);
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->pending || !srv_lost_concerns(&e, c)) continue;
    srv_reply_status(c, c->pending->op, c->pending->id, SYMM_ERR_PEER_LOST, rank);
    srv_pending_free(s, c);
  }
}

void srv_mark_lost(symm_store_server_t *s, uint32_t comm, int rank, int32_t pid,
                   const char *why) {
  srv_record_lost(s, comm, rank, NULL, pid, why);
}

void srv_mark_process_lost(symm_store_server_t *s, const srv_proc_t *p, int32_t pid, int rank,
                           const char *why) {
  srv_record_lost(s, SRV_JOB_COMM, rank, p, pid, why);
}

/* npending is the thread's own; `parked` is its copy for other threads
 * (symm_store_server_wait_parked). */
static void srv_count_parked(symm_store_server_t *s, int delta) {
  s->npending = (size_t)((ptrdiff_t)s->npending + delta);
  pthread_mutex_lock(&s->lock);
  s->parked = s->npending;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

void srv_pending_free(symm_store_server_t *s, srv_conn_t *c) {
  if (!c->pending) return;
  free(c->pending->keys);
  free(c->pending->body);
  free(c->pending);
  c->pending = NULL;
  srv_count_parked(s, -1);
}

static bool srv_key_present(symm_store_server_t *s, const srv_keyref_t *k) {
  return srv_table_find(&s->table, k->key, k->len, k->hash) != NULL;
}

/* Moves next_missing past keys that exist; true when all do. */
static bool srv_pending_advance(symm_store_server_t *s, srv_pending_t *p) {
  while (p->next_missing < p->nkeys && srv_key_present(s, &p->keys[p->next_missing]))
    p->next_missing++;
  return p->next_missing == p->nkeys;
}

/* Answers a satisfied GET / WAIT / MGET with the current values. */
static void srv_answer_ready(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                             uint32_t id, const srv_keyref_t *keys,
                             uint32_t nkeys) {
  if (op == SYMM_OP_WAIT) {
    srv_reply_status(c, op, id, SYMM_SUCCESS, -1);
    return;
  }
  size_t total = SYMM_PROTO_REPLY_PREFIX + (op == SYMM_OP_MGET ? 4 : 0);
  for (uint32_t i = 0; i < nkeys; i++)
    total += 4 + srv_table_find(&s->table, keys[i].key, keys[i].len, keys[i].hash)->value_len;
  if (total > SYMM_PROTO_MAX_REPLY) {
    srv_reply_status(c, op, id, SYMM_ERR_INVALID_ARG, -1);
    return;
  }
  size_t at = srv_reply_begin(c, op, id, SYMM_SUCCESS, -1);
  if (op == SYMM_OP_MGET) symm_proto_put_u32(&c->out, nkeys);
  for (uint32_t i = 0; i < nkeys; i++) {
    const srv_entry_t *e = srv_table_find(&s->table, keys[i].key, keys[i].len, keys[i].hash);
    symm_proto_put_value(&c->out, e->value, e->value_len);
  }
  srv_reply_end(c, at);
}

/* After a write to key: answers the parked requests it completes. */
void srv_wake(symm_store_server_t *s, const char *key, uint16_t len, uint64_t hash) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    srv_pending_t *p = c->pending;
    if (c->dead || !p) continue;
    const srv_keyref_t *m = &p->keys[p->next_missing];
    if (m->hash != hash || m->len != len || memcmp(m->key, key, len) != 0) continue;
    if (!srv_pending_advance(s, p)) continue;
    srv_answer_ready(s, c, p->op, p->id, p->keys, p->nkeys);
    srv_pending_free(s, c); /* the loop sends the answer (srv_thread) */
  }
}

/* After key was deleted: a parked request that counted it present counts
 * from it again.  Only the keys before next_missing are looked at, by
 * their hashes first, and nothing is looked up in the table: a bootstrap
 * round, whose every rank deletes a key of an older round while its
 * peers wait in the new one, costs the server no more than its keys. */
void srv_rescan_pending(symm_store_server_t *s, const char *key, uint16_t len, uint64_t hash) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_pending_t *p = s->conns[i]->pending;
    if (s->conns[i]->dead || !p) continue;
    for (uint32_t k = 0; k < p->next_missing; k++) {
      const srv_keyref_t *m = &p->keys[k];
      if (m->hash == hash && m->len == len && memcmp(m->key, key, len) == 0) {
        p->next_missing = k;
        break;
      }
    }
  }
}

/* SYMM_ERR_TIMEOUT for a blocking request, with the indices of the keys
 * still absent (store_proto.h), so that the client can name what it
 * waited for without asking again (the store may be gone by then). */
static void srv_reply_timeout(symm_store_server_t *s, srv_conn_t *c, uint8_t op, uint32_t id,
                              const srv_keyref_t *keys, uint32_t nkeys) {
  uint32_t absent = 0;
  for (uint32_t i = 0; i < nkeys; i++) absent += !srv_key_present(s, &keys[i]);
  size_t at = srv_reply_begin(c, op, id, SYMM_ERR_TIMEOUT, -1);
  symm_proto_put_u32(&c->out, absent);
  for (uint32_t i = 0; i < nkeys; i++)
    if (!srv_key_present(s, &keys[i])) symm_proto_put_u32(&c->out, i);
  srv_reply_end(c, at);
}

void srv_expire_pending(symm_store_server_t *s, uint64_t now) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->pending || c->pending->deadline_ns > now) continue;
    const srv_pending_t *p = c->pending;
    srv_reply_timeout(s, c, p->op, p->id, p->keys, p->nkeys);
    srv_pending_free(s, c); /* the loop sends the answer (srv_thread) */
  }
}

/* Parks a request whose keys are not all there yet.  The body is copied
 * because the input buffer moves on. */
static void srv_park(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                     uint32_t id, const uint8_t *body, uint32_t body_len,
                     const srv_keyref_t *keys, uint32_t nkeys,
                     uint32_t next_missing, int32_t timeout_ms) {
  srv_pending_t *p = calloc(1, sizeof *p);
  if (!p) goto fail;
  p->body = malloc(body_len ? body_len : 1);
  p->keys = malloc(nkeys * sizeof *p->keys);
  if (!p->body || !p->keys) goto fail;
  memcpy(p->body, body, body_len);
  for (uint32_t i = 0; i < nkeys; i++) {
    p->keys[i] = keys[i];
    p->keys[i].key = (const char *)p->body + ((const uint8_t *)keys[i].key - body);
  }
  p->op = op;
  p->id = id;
  p->nkeys = nkeys;
  p->next_missing = next_missing;
  p->deadline_ns = symm_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  c->pending = p;
  srv_count_parked(s, 1);
  return;
fail:
  if (p) {
    free(p->body);
    free(p->keys);
    free(p);
  }
  srv_reply_status(c, op, id, SYMM_ERR_NO_MEMORY, -1);
}

/* GET, WAIT and MGET: answer now if possible, else fail fast for a lost
 * rank or a zero timeout, else park. */
static void srv_blocking(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                         uint32_t id, const uint8_t *body, uint32_t body_len,
                         srv_keyref_t *keys, uint32_t nkeys,
                         int32_t timeout_ms) {
  for (uint32_t i = 0; i < nkeys; i++)
    keys[i].hash = srv_hash(&s->table, keys[i].key, keys[i].len);
  uint32_t next = 0;
  while (next < nkeys && srv_key_present(s, &keys[next])) next++;
  const struct srv_lost *lost = next == nkeys ? NULL : srv_lost_for(s, c);
  if (next == nkeys)
    srv_answer_ready(s, c, op, id, keys, nkeys);
  else if (lost)
    srv_reply_status(c, op, id, SYMM_ERR_PEER_LOST, lost->rank);
  else if (timeout_ms == 0)
    srv_reply_timeout(s, c, op, id, keys, nkeys);
  else
    srv_park(s, c, op, id, body, body_len, keys, nkeys, next, timeout_ms);
}

/* Reads a keys field into a malloc'd array of references into the body. */
static srv_keyref_t *srv_read_keys(symm_proto_reader_t *r, uint32_t *n) {
  *n = symm_proto_get_count(r);
  if (r->err) return NULL;
  srv_keyref_t *keys = malloc(*n * sizeof *keys);
  if (!keys) {
    r->err = "out of memory for the key list";
    return NULL;
  }
  for (uint32_t i = 0; i < *n && !r->err; i++) {
    keys[i].key = symm_proto_get_key(r, &keys[i].len);
    keys[i].hash = 0;
  }
  return keys;
}

void srv_do_keys_op(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                    uint32_t id, const uint8_t *body, uint32_t body_len,
                    symm_proto_reader_t *r) {
  int32_t timeout_ms = op == SYMM_OP_CHECK ? 0 : symm_proto_get_i32(r);
  if (!r->err && timeout_ms < 0) r->err = "negative timeout";
  uint32_t n = 0;
  srv_keyref_t *keys = srv_read_keys(r, &n);
  if (!symm_proto_end(r)) { /* malformed: r->err, the dispatcher closes */
    free(keys);
    return;
  }
  if (op == SYMM_OP_CHECK) {
    bool all = true;
    for (uint32_t i = 0; i < n && all; i++)
      all = srv_table_find(&s->table, keys[i].key, keys[i].len,
                           srv_hash(&s->table, keys[i].key, keys[i].len)) != NULL;
    size_t at = srv_reply_begin(c, op, id, SYMM_SUCCESS, -1);
    symm_proto_put_u8(&c->out, all);
    srv_reply_end(c, at);
  } else {
    srv_blocking(s, c, op, id, body, body_len, keys, n, timeout_ms);
  }
  free(keys);
}

void srv_do_get(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                const uint8_t *body, uint32_t body_len,
                symm_proto_reader_t *r) {
  srv_keyref_t key = {0};
  key.key = symm_proto_get_key(r, &key.len);
  int32_t timeout_ms = symm_proto_get_i32(r);
  if (symm_proto_end(r) && timeout_ms < 0) r->err = "negative timeout";
  if (r->err) return; /* malformed: the dispatcher closes */
  srv_blocking(s, c, SYMM_OP_GET, id, body, body_len, &key, 1, timeout_ms);
}
