/*
 * The store server: one thread running a poll() loop over non-blocking
 * sockets.  Each connection has its own input and output buffer, so a slow
 * or stuck peer never blocks the others.  Blocking requests (GET, WAIT,
 * MGET) park on their connection with a deadline and are answered when a
 * SET/ADD/CAS makes them satisfiable, when the deadline passes (TIMEOUT) or
 * when a rank is lost (PEER_LOST).  The wire format is in store_proto.h.
 *
 * Only the server thread touches connections and keys.  Other threads talk
 * to it through `lock` (stop flag, queue of ranks to mark lost, count of
 * open rank connections for drain) and the wake pipe.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store_proto.h"

/* Input bytes buffered ahead of the message being served; a peer that
 * pipelines more is held back by TCP flow control instead. */
#define SRV_IN_CHUNK (64u << 10)
/* A connection whose unsent output exceeds this gets no new requests served
 * until it reads; its output is thus bounded by one reply plus this. */
#define SRV_OUT_HIGH_WATER (256u << 10)
/* Buffers grown past this for one big message are freed once empty. */
#define SRV_BUF_KEEP (1u << 20)
/* How long a refused connection gets to read its PERMISSION reply. */
#define SRV_CLOSE_LINGER_NS (1000ull * 1000000ull)
/* Pause of accept() after EMFILE/ENFILE, so the loop does not spin. */
#define SRV_ACCEPT_PAUSE_NS (100ull * 1000000ull)
#define SRV_INITIAL_BUCKETS 1024u
/* Connections that have not presented the token yet, at most, so that
 * anybody who can reach the port but lacks the token cannot use up this
 * process's fds (each would otherwise hold one until its handshake
 * deadline).  At the limit the server accepts no more; once the oldest of
 * them has waited SRV_UNAUTHED_GRACE_NS (a rank sends its HELLO at once)
 * it is closed to make room.  Ranks that connect together thus wait in
 * the kernel's backlog instead of being closed unread, and a held flood
 * delays a rank behind it by a grace period per SRV_MAX_UNAUTHED of it. */
#define SRV_MAX_UNAUTHED 64
#define SRV_UNAUTHED_GRACE_NS (200ull * 1000000ull)

/* ---------------------------------------------------------------- types */
typedef struct srv_entry {
  struct srv_entry *next;
  uint64_t hash;
  uint8_t *value; /* NULL when value_len == 0 */
  uint32_t value_len;
  uint16_t key_len;
  char key[];
} srv_entry_t;

typedef struct srv_table {
  srv_entry_t **buckets;
  size_t nbuckets; /* power of two */
  size_t count;
  uint64_t seed;
} srv_table_t;

typedef struct srv_keyref {
  const char *key; /* points into srv_pending_t.body */
  uint16_t len;
  uint64_t hash;
} srv_keyref_t;

/* A parked GET / WAIT / MGET.  keys[0..next_missing) are known present;
 * only a write to keys[next_missing] can move it forward. */
typedef struct srv_pending {
  uint8_t op;
  uint32_t id;
  uint64_t deadline_ns;
  uint32_t nkeys, next_missing;
  srv_keyref_t *keys;
  uint8_t *body; /* private copy of the request body the keys point into */
} srv_pending_t;

typedef struct srv_conn {
  int fd;
  char peer[80];       /* "addr:port" for log lines */
  int rank;            /* from HELLO; -1 for tools and before HELLO */
  uint32_t comm;       /* from HELLO: the client's communicator, or SYMM_STORE_NO_COMM */
  bool comm_counted;   /* counted in its communicator's open connections */
  bool authed;         /* valid HELLO received */
  bool said_bye;
  bool closing;        /* flush output, then close; read nothing more */
  bool dead;           /* closed; removed from the array after the poll pass */
  uint64_t deadline_ns;/* handshake or closing linger; 0 = none */
  uint64_t accepted_ns;
  uint8_t *in;
  size_t in_start, in_len, in_cap;
  symm_proto_buf_t out;
  size_t out_start;
  srv_pending_t *pending;
} srv_conn_t;

struct symm_store_server {
  int listen_fd;
  int wake_rd, wake_wr;
  int port;
  char *token;
  size_t token_len;
  uint64_t handshake_ns;
  pthread_t thread;
  bool thread_started;

  /* Owned by the server thread. */
  srv_conn_t **conns;
  size_t nconns, conns_cap;
  struct pollfd *pfds;
  size_t pfds_cap;
  srv_table_t table;
  struct srv_lost { /* lost ranks, oldest first, each of its communicator */
    uint32_t comm;   /* SYMM_STORE_NO_COMM: of every communicator */
    int rank;
  } *lost;
  size_t nlost, lost_cap;
  size_t npending;
  uint64_t accept_paused_until;
  uint64_t unauthed_wait_until; /* at SRV_MAX_UNAUTHED: when the oldest may go */
  bool unauthed_warned; /* the SRV_MAX_UNAUTHED warning is given once */

  /* Shared with other threads, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t cond; /* signalled when ranked_open changes or on stop */
  bool stop;
  /* symm_store_server_stop_if_idle asks the thread (IDLE_ASKED), which
   * answers IDLE_STOP or IDLE_SERVE, not counting the connections of
   * communicators up to idle_upto. */
  enum { IDLE_NONE, IDLE_ASKED, IDLE_STOP, IDLE_SERVE } idle;
  uint32_t idle_upto;
  int *lost_queue;
  size_t nqueue, queue_cap;
  int ranked_open;
  /* Open rank connections per communicator (those whose HELLO named one),
   * for symm_store_server_drain_comm. */
  struct srv_comm_open {
    uint32_t comm;
    int open;
  } *comm_open;
  size_t ncomm_open, comm_open_cap;
};

/* ---------------------------------------------------------------- keys */
static uint64_t srv_hash(const srv_table_t *t, const char *key, size_t len) {
  /* FNV-1a has weak low bits for short keys; mix before masking. */
  uint64_t h = symm_hash64(key, len, t->seed);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

static int srv_table_init(srv_table_t *t) {
  t->buckets = calloc(SRV_INITIAL_BUCKETS, sizeof *t->buckets);
  if (!t->buckets) return -1;
  t->nbuckets = SRV_INITIAL_BUCKETS;
  t->count = 0;
  symm_random_bytes(&t->seed, sizeof t->seed);
  return 0;
}

static void srv_table_free(srv_table_t *t) {
  for (size_t i = 0; t->buckets && i < t->nbuckets; i++) {
    srv_entry_t *e = t->buckets[i];
    while (e) {
      srv_entry_t *next = e->next;
      free(e->value);
      free(e);
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = NULL;
}

static srv_entry_t **srv_table_slot(srv_table_t *t, const char *key,
                                    uint16_t len, uint64_t hash) {
  srv_entry_t **slot = &t->buckets[hash & (t->nbuckets - 1)];
  for (; *slot; slot = &(*slot)->next)
    if ((*slot)->hash == hash && (*slot)->key_len == len &&
        memcmp((*slot)->key, key, len) == 0)
      break;
  return slot;
}

static srv_entry_t *srv_table_find(srv_table_t *t, const char *key,
                                   uint16_t len, uint64_t hash) {
  return *srv_table_slot(t, key, len, hash);
}

/* Doubling keeps chains short at any key count; a failed grow only costs
 * speed. */
static void srv_table_grow(srv_table_t *t) {
  size_t n = t->nbuckets * 2;
  srv_entry_t **b = calloc(n, sizeof *b);
  if (!b) return;
  for (size_t i = 0; i < t->nbuckets; i++) {
    srv_entry_t *e = t->buckets[i];
    while (e) {
      srv_entry_t *next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = n;
}

/* Sets key to a copy of value.  Returns SYMM_ERR_NO_MEMORY and leaves the
 * old value in place if memory runs out. */
static symm_result_t srv_table_set(srv_table_t *t, const char *key,
                                   uint16_t len, uint64_t hash,
                                   const uint8_t *value, uint32_t vlen) {
  uint8_t *copy = NULL;
  if (vlen) {
    copy = malloc(vlen);
    if (!copy) return SYMM_ERR_NO_MEMORY;
    memcpy(copy, value, vlen);
  }
  srv_entry_t **slot = srv_table_slot(t, key, len, hash);
  srv_entry_t *e = *slot;
  if (!e) {
    e = malloc(sizeof *e + len);
    if (!e) {
      free(copy);
      return SYMM_ERR_NO_MEMORY;
    }
    e->next = NULL;
    e->hash = hash;
    e->key_len = len;
    memcpy(e->key, key, len);
    e->value = NULL;
    *slot = e;
    if (++t->count > t->nbuckets) srv_table_grow(t);
  }
  free(e->value);
  e->value = copy;
  e->value_len = vlen;
  return SYMM_SUCCESS;
}

static bool srv_table_remove(srv_table_t *t, const char *key, uint16_t len,
                             uint64_t hash) {
  srv_entry_t **slot = srv_table_slot(t, key, len, hash);
  srv_entry_t *e = *slot;
  if (!e) return false;
  *slot = e->next;
  free(e->value);
  free(e);
  t->count--;
  return true;
}

/* Parses a counter ("-12"); false if the value is not one. */
static bool srv_parse_counter(const uint8_t *v, uint32_t len, int64_t *out) {
  char text[24];
  if (len == 0 || len >= sizeof text) return false;
  memcpy(text, v, len);
  text[len] = 0;
  const char *p = text[0] == '-' ? text + 1 : text;
  if (!*p) return false;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return false;
  errno = 0;
  char *end;
  long long x = strtoll(text, &end, 10);
  if (errno || *end) return false;
  *out = x;
  return true;
}

/* ------------------------------------------------------------- replies */
/* Starts a reply to (op, id) in c's output: header + status + lost rank.
 * Returns the header offset for srv_reply_end. */
static size_t srv_reply_begin(srv_conn_t *c, uint8_t op, uint32_t id,
                              symm_result_t status, int lost_rank) {
  size_t at = symm_proto_begin(&c->out, (uint8_t)(op | SYMM_PROTO_REPLY_FLAG), id);
  symm_proto_put_u32(&c->out, (uint32_t)status);
  symm_proto_put_i32(&c->out, lost_rank);
  return at;
}

static void srv_reply_end(srv_conn_t *c, size_t at) {
  symm_proto_finish(&c->out, at);
  if (c->out.failed) {
    SYMM_WARN(STORE, "store: out of memory replying to %s; closing", c->peer);
    c->closing = true; /* srv_flush closes it: nothing valid to send */
  }
}

static void srv_reply_status(srv_conn_t *c, uint8_t op, uint32_t id,
                             symm_result_t status, int lost_rank) {
  srv_reply_end(c, srv_reply_begin(c, op, id, status, lost_rank));
}

/* ---------------------------------------------------------- connections */
static void srv_pending_free(symm_store_server_t *s, srv_conn_t *c) {
  if (!c->pending) return;
  free(c->pending->keys);
  free(c->pending->body);
  free(c->pending);
  c->pending = NULL;
  s->npending--;
}

static void srv_mark_lost(symm_store_server_t *s, uint32_t comm, int rank, const char *why);

/* Under s->lock: how many rank connections of communicator comm are open
 * (SYMM_STORE_NO_COMM: of every communicator, and of none). */
static int srv_open_of(const symm_store_server_t *s, uint32_t comm) {
  if (comm == SYMM_STORE_NO_COMM) return s->ranked_open;
  for (size_t i = 0; i < s->ncomm_open; i++)
    if (s->comm_open[i].comm == comm) return s->comm_open[i].open;
  return 0;
}

/* Counts c's rank connection in (delta 1) or out (-1); a connection that
 * could not be counted in its communicator (no memory) counts in the total
 * only, and leaves it the same way. */
static void srv_ranked_open_add(symm_store_server_t *s, srv_conn_t *c, int delta) {
  const uint32_t comm = c->comm;
  pthread_mutex_lock(&s->lock);
  s->ranked_open += delta;
  if (comm != SYMM_STORE_NO_COMM && (delta > 0 || c->comm_counted)) {
    size_t i = 0;
    while (i < s->ncomm_open && s->comm_open[i].comm != comm) i++;
    if (i == s->ncomm_open && delta > 0) {
      if (s->ncomm_open == s->comm_open_cap) {
        size_t cap = s->comm_open_cap ? 2 * s->comm_open_cap : 8;
        struct srv_comm_open *p = realloc(s->comm_open, cap * sizeof *p);
        if (p) {
          s->comm_open = p;
          s->comm_open_cap = cap;
        }
      }
      /* Without memory the connection counts in the total only: a drain of
       * its communicator then does not wait for it. */
      if (i < s->comm_open_cap) s->comm_open[s->ncomm_open++] = (struct srv_comm_open){comm, 0};
    }
    if (i < s->ncomm_open) {
      s->comm_open[i].open += delta;
      c->comm_counted = delta > 0;
      if (s->comm_open[i].open <= 0) s->comm_open[i] = s->comm_open[--s->ncomm_open];
    }
  }
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

/* Closes c.  A rank connection that goes away without BYE means the rank is
 * gone (crashed, killed, abandoned), unless the whole server is stopping. */
static void srv_conn_close(symm_store_server_t *s, srv_conn_t *c,
                           bool stopping) {
  if (c->dead) return;
  c->dead = true;
  symm_fork_guard_close(c->fd);
  c->fd = -1;
  srv_pending_free(s, c);
  if (c->authed && c->rank >= 0) {
    srv_ranked_open_add(s, c, -1);
    if (!c->said_bye && !stopping)
      srv_mark_lost(s, c->comm, c->rank, "its connection closed without BYE");
  }
  SYMM_TRACE(STORE, "store: closed %s (rank %d%s)", c->peer, c->rank,
             c->said_bye ? ", bye" : "");
}

static void srv_conn_free(srv_conn_t *c) {
  free(c->in);
  symm_proto_buf_free(&c->out);
  free(c);
}

/* Drops c for a protocol violation: one WARN naming the peer and why. */
static void srv_conn_reject(symm_store_server_t *s, srv_conn_t *c,
                            const char *why) {
  SYMM_WARN(STORE, "store: malformed message from %s (rank %d): %s; closing",
            c->peer, c->rank, why);
  srv_conn_close(s, c, false);
}

/* Writes as much buffered output as the socket takes now. */
static void srv_flush(symm_store_server_t *s, srv_conn_t *c) {
  if (c->dead) return;
  if (c->out.failed) {
    srv_conn_close(s, c, false);
    return;
  }
  while (c->out_start < c->out.len) {
    ssize_t n = send(c->fd, c->out.data + c->out_start,
                     c->out.len - c->out_start, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_start += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    SYMM_INFO(STORE, "store: send to %s failed: %s", c->peer, strerror(errno));
    srv_conn_close(s, c, false);
    return;
  }
  c->out_start = 0;
  c->out.len = 0;
  if (c->out.cap > SRV_BUF_KEEP) symm_proto_buf_free(&c->out);
  if (c->closing) srv_conn_close(s, c, false);
}

/* ---------------------------------------------------------- lost ranks */
/* Whether a loss recorded for communicator `lost` concerns a request of
 * communicator `asker`: the same one, or either is none (symmem-run's
 * symm_store_server_mark_lost and clients that named no communicator see
 * every loss, as before communicators were told apart). */
static bool srv_lost_applies(uint32_t lost, uint32_t asker) {
  return lost == SYMM_STORE_NO_COMM || asker == SYMM_STORE_NO_COMM || lost == asker;
}

/* The first lost rank that concerns connection c's requests, or -1. */
static int srv_lost_for(const symm_store_server_t *s, const srv_conn_t *c) {
  for (size_t i = 0; i < s->nlost; i++)
    if (srv_lost_applies(s->lost[i].comm, c->comm)) return s->lost[i].rank;
  return -1;
}

/* A rank said HELLO again: it is back in its communicator (and no longer
 * lost to everyone; a HELLO naming no communicator clears them all). */
static void srv_clear_lost(symm_store_server_t *s, uint32_t comm, int rank) {
  size_t kept = 0;
  for (size_t i = 0; i < s->nlost; i++) {
    const struct srv_lost e = s->lost[i];
    if (e.rank == rank && srv_lost_applies(e.comm, comm)) {
      SYMM_INFO(STORE, "store: rank %d is back; no longer lost", rank);
      continue;
    }
    s->lost[kept++] = e;
  }
  s->nlost = kept;
}

/* Records rank as lost in communicator comm and fails every parked request
 * that it concerns: they cannot count on that rank any more.  Other
 * communicators served by this store go on. */
static void srv_mark_lost(symm_store_server_t *s, uint32_t comm, int rank, const char *why) {
  for (size_t i = 0; i < s->nlost; i++)
    if (s->lost[i].rank == rank && s->lost[i].comm == comm) return;
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
  if (s->nlost < s->lost_cap) s->lost[s->nlost++] = (struct srv_lost){comm, rank};
  SYMM_WARN(STORE, "store: rank %d lost%s: %s", rank,
            comm == SYMM_STORE_NO_COMM ? "" : " in its communicator", why);
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->pending || !srv_lost_applies(comm, c->comm)) continue;
    srv_reply_status(c, c->pending->op, c->pending->id, SYMM_ERR_PEER_LOST, rank);
    srv_pending_free(s, c);
  }
}

/* ------------------------------------------------------ blocking requests */
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
static void srv_wake(symm_store_server_t *s, const char *key, uint16_t len,
                     uint64_t hash) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    srv_pending_t *p = c->pending;
    if (c->dead || !p) continue;
    const srv_keyref_t *m = &p->keys[p->next_missing];
    if (m->hash != hash || m->len != len || memcmp(m->key, key, len) != 0) continue;
    if (!srv_pending_advance(s, p)) continue;
    srv_answer_ready(s, c, p->op, p->id, p->keys, p->nkeys);
    srv_pending_free(s, c);
    srv_flush(s, c);
  }
}

/* After a delete: keys once seen may be gone, so recount from the start. */
static void srv_rescan_pending(symm_store_server_t *s) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_pending_t *p = s->conns[i]->pending;
    if (s->conns[i]->dead || !p) continue;
    p->next_missing = 0;
    srv_pending_advance(s, p);
  }
}

static void srv_expire_pending(symm_store_server_t *s, uint64_t now) {
  for (size_t i = 0; i < s->nconns && s->npending; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->pending || c->pending->deadline_ns > now) continue;
    srv_reply_status(c, c->pending->op, c->pending->id, SYMM_ERR_TIMEOUT, -1);
    srv_pending_free(s, c);
    srv_flush(s, c);
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
  s->npending++;
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
  const int lost = next == nkeys ? -1 : srv_lost_for(s, c);
  if (next == nkeys)
    srv_answer_ready(s, c, op, id, keys, nkeys);
  else if (lost >= 0)
    srv_reply_status(c, op, id, SYMM_ERR_PEER_LOST, lost);
  else if (timeout_ms == 0)
    srv_reply_status(c, op, id, SYMM_ERR_TIMEOUT, -1);
  else
    srv_park(s, c, op, id, body, body_len, keys, nkeys, next, timeout_ms);
}

/* ------------------------------------------------------------- requests */
/* Equal-time comparison: the time taken depends only on the expected
 * token's length, never on how many leading bytes a guess got right. */
static bool srv_token_ok(const symm_store_server_t *s, const char *tok,
                         size_t len) {
  if (s->token_len == 0) return true;
  volatile unsigned diff = (unsigned)(len != s->token_len);
  for (size_t i = 0; i < s->token_len; i++) {
    unsigned char got = i < len ? (unsigned char)tok[i] : 0;
    diff |= (unsigned)(got ^ (unsigned char)s->token[i]);
  }
  return diff == 0;
}

/* Answers HELLO with `code` and closes c once the answer is out, so that
 * the client says why instead of taking the close for a store stopping. */
static void srv_refuse_hello(srv_conn_t *c, uint32_t id, symm_result_t code) {
  srv_reply_status(c, SYMM_OP_HELLO, id, code, -1);
  c->closing = true;
  c->deadline_ns = symm_now_ns() + SRV_CLOSE_LINGER_NS;
}

static void srv_do_hello(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                         symm_proto_reader_t *r) {
  uint16_t tlen = 0;
  const uint8_t *lp = symm_proto_take(r, 2, "truncated token length");
  const char *tok = NULL;
  if (lp) {
    tlen = symm_proto_get16(lp);
    if (tlen > SYMM_PROTO_MAX_TOKEN)
      r->err = "token over SYMM_PROTO_MAX_TOKEN";
    else
      tok = (const char *)symm_proto_take(r, tlen, "truncated token");
  }
  int32_t rank = symm_proto_get_i32(r);
  /* Optional: the client's communicator (so that draining one does not
   * wait for the connections of the next, served by the same store). */
  uint32_t comm = r->err || r->left == 0 ? SYMM_STORE_NO_COMM : symm_proto_get_u32(r);
  if (symm_proto_end(r) && rank < -1) r->err = "rank below -1";
  if (r->err) { /* another symmem version, say */
    SYMM_WARN(STORE, "store: malformed HELLO from %s: %s; closing", c->peer, r->err);
    srv_refuse_hello(c, id, SYMM_ERR_PROTOCOL);
    return;
  }
  if (!srv_token_ok(s, tok, tlen)) {
    SYMM_WARN(STORE, "store: wrong token from %s (rank %d); refusing the connection",
              c->peer, (int)rank);
    srv_refuse_hello(c, id, SYMM_ERR_PERMISSION);
    return;
  }
  c->authed = true;
  c->rank = rank;
  c->comm = rank >= 0 ? comm : SYMM_STORE_NO_COMM;
  c->deadline_ns = 0;
  if (rank >= 0) {
    srv_ranked_open_add(s, c, 1);
    srv_clear_lost(s, c->comm, rank);
  }
  SYMM_INFO(STORE, "store: %s connected as rank %d of communicator %d", c->peer, (int)rank,
            c->comm == SYMM_STORE_NO_COMM ? -1 : (int)c->comm);
  srv_reply_status(c, SYMM_OP_HELLO, id, SYMM_SUCCESS, -1);
}

static void srv_do_set(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                       symm_proto_reader_t *r) {
  uint16_t klen;
  uint32_t vlen;
  const char *key = symm_proto_get_key(r, &klen);
  const uint8_t *val = symm_proto_get_value(r, &vlen);
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  uint64_t h = srv_hash(&s->table, key, klen);
  symm_result_t res = srv_table_set(&s->table, key, klen, h, val, vlen);
  srv_reply_status(c, SYMM_OP_SET, id, res, -1);
  if (res == SYMM_SUCCESS) srv_wake(s, key, klen, h);
}

static void srv_do_add(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                       symm_proto_reader_t *r) {
  uint16_t klen;
  const char *key = symm_proto_get_key(r, &klen);
  int64_t delta = symm_proto_get_i64(r);
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  uint64_t h = srv_hash(&s->table, key, klen);
  const srv_entry_t *e = srv_table_find(&s->table, key, klen, h);
  int64_t cur = 0, sum;
  if ((e && !srv_parse_counter(e->value, e->value_len, &cur)) ||
      __builtin_add_overflow(cur, delta, &sum)) {
    srv_reply_status(c, SYMM_OP_ADD, id, SYMM_ERR_INVALID_ARG, -1);
    return;
  }
  char text[24];
  int n = snprintf(text, sizeof text, "%lld", (long long)sum);
  symm_result_t res = srv_table_set(&s->table, key, klen, h, (const uint8_t *)text, (uint32_t)n);
  if (res != SYMM_SUCCESS) {
    srv_reply_status(c, SYMM_OP_ADD, id, res, -1);
    return;
  }
  size_t at = srv_reply_begin(c, SYMM_OP_ADD, id, SYMM_SUCCESS, -1);
  symm_proto_put_i64(&c->out, sum);
  srv_reply_end(c, at);
  srv_wake(s, key, klen, h);
}

static void srv_do_cas(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                       symm_proto_reader_t *r) {
  uint16_t klen;
  uint32_t elen, dlen;
  const char *key = symm_proto_get_key(r, &klen);
  uint8_t expect_present = symm_proto_get_u8(r);
  const uint8_t *expected = symm_proto_get_value(r, &elen);
  const uint8_t *desired = symm_proto_get_value(r, &dlen);
  if (symm_proto_end(r) && (expect_present > 1 || (!expect_present && elen)))
    r->err = "CAS expects absence but carries an expected value";
  if (r->err) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  uint64_t h = srv_hash(&s->table, key, klen);
  const srv_entry_t *e = srv_table_find(&s->table, key, klen, h);
  bool match = expect_present ? e && e->value_len == elen &&
                                   (elen == 0 || memcmp(e->value, expected, elen) == 0)
                             : e == NULL;
  if (match) {
    symm_result_t res = srv_table_set(&s->table, key, klen, h, desired, dlen);
    if (res != SYMM_SUCCESS) {
      srv_reply_status(c, SYMM_OP_CAS, id, res, -1);
      return;
    }
    e = srv_table_find(&s->table, key, klen, h);
  }
  size_t at = srv_reply_begin(c, SYMM_OP_CAS, id, SYMM_SUCCESS, -1);
  symm_proto_put_u8(&c->out, e != NULL);
  symm_proto_put_value(&c->out, e ? e->value : NULL, e ? e->value_len : 0);
  srv_reply_end(c, at);
  if (match) srv_wake(s, key, klen, h);
}

static void srv_do_del(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                       symm_proto_reader_t *r) {
  uint16_t klen;
  const char *key = symm_proto_get_key(r, &klen);
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  bool found = srv_table_remove(&s->table, key, klen, srv_hash(&s->table, key, klen));
  srv_reply_status(c, SYMM_OP_DEL, id, found ? SYMM_SUCCESS : SYMM_ERR_NOT_FOUND, -1);
  if (found && s->npending) srv_rescan_pending(s);
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

static void srv_do_keys_op(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                           uint32_t id, const uint8_t *body, uint32_t body_len,
                           symm_proto_reader_t *r) {
  int32_t timeout_ms = op == SYMM_OP_CHECK ? 0 : symm_proto_get_i32(r);
  if (!r->err && timeout_ms < 0) r->err = "negative timeout";
  uint32_t n = 0;
  srv_keyref_t *keys = srv_read_keys(r, &n);
  if (!symm_proto_end(r)) {
    free(keys);
    srv_conn_reject(s, c, r->err);
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

static void srv_do_get(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                       const uint8_t *body, uint32_t body_len,
                       symm_proto_reader_t *r) {
  srv_keyref_t key = {0};
  key.key = symm_proto_get_key(r, &key.len);
  int32_t timeout_ms = symm_proto_get_i32(r);
  if (symm_proto_end(r) && timeout_ms < 0) r->err = "negative timeout";
  if (r->err) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  srv_blocking(s, c, SYMM_OP_GET, id, body, body_len, &key, 1, timeout_ms);
}

static void srv_dispatch(symm_store_server_t *s, srv_conn_t *c,
                         const symm_proto_header_t *h, const uint8_t *body) {
  symm_proto_reader_t r;
  symm_proto_reader_init(&r, body, h->body_len);
  SYMM_TRACE(STORE, "store: %s from %s (rank %d), %u bytes",
             symm_proto_op_name(h->opcode), c->peer, c->rank, h->body_len);
  switch (h->opcode) {
    case SYMM_OP_HELLO:
      if (c->authed)
        srv_conn_reject(s, c, "second HELLO");
      else
        srv_do_hello(s, c, h->id, &r);
      break;
    case SYMM_OP_SET: srv_do_set(s, c, h->id, &r); break;
    case SYMM_OP_GET: srv_do_get(s, c, h->id, body, h->body_len, &r); break;
    case SYMM_OP_ADD: srv_do_add(s, c, h->id, &r); break;
    case SYMM_OP_CAS: srv_do_cas(s, c, h->id, &r); break;
    case SYMM_OP_WAIT:
    case SYMM_OP_MGET:
    case SYMM_OP_CHECK:
      srv_do_keys_op(s, c, h->opcode, h->id, body, h->body_len, &r);
      break;
    case SYMM_OP_DEL: srv_do_del(s, c, h->id, &r); break;
    case SYMM_OP_BYE:
      c->said_bye = true;
      srv_conn_close(s, c, false);
      break;
    default: srv_conn_reject(s, c, "unknown opcode"); break;
  }
}

/* ---------------------------------------------------------------- input */
/* Size of the message at the head of c's input: 0 if its header is not
 * complete yet, -1 (connection closed) if the header is invalid.  Checked as
 * soon as 16 bytes are in, so a bogus length is never waited for. */
static long srv_head_size(symm_store_server_t *s, srv_conn_t *c,
                          symm_proto_header_t *h) {
  if (c->in_len - c->in_start < SYMM_PROTO_HEADER_BYTES) return 0;
  symm_proto_decode_header(c->in + c->in_start, h);
  const char *why = NULL;
  if (h->magic != SYMM_PROTO_MAGIC)
    why = "bad magic";
  else if (h->version != SYMM_PROTO_VERSION)
    why = "unsupported protocol version";
  else if (h->reserved != 0)
    why = "reserved header bits set";
  else if (h->opcode == 0 || h->opcode >= SYMM_OP_COUNT_)
    why = "unknown opcode";
  else if (!c->authed && h->opcode != SYMM_OP_HELLO)
    why = "request before HELLO";
  else if (h->body_len > symm_proto_max_body(h->opcode))
    why = "body length over the limit of its opcode";
  if (why) {
    srv_conn_reject(s, c, why);
    return -1;
  }
  return (long)(SYMM_PROTO_HEADER_BYTES + h->body_len);
}

/* How many unprocessed bytes c may hold: one chunk, or the whole message at
 * the head when that is bigger. */
static size_t srv_in_limit(symm_store_server_t *s, srv_conn_t *c) {
  symm_proto_header_t h;
  long need = srv_head_size(s, c, &h);
  return need > (long)SRV_IN_CHUNK ? (size_t)need : SRV_IN_CHUNK;
}

static bool srv_wants_input(symm_store_server_t *s, srv_conn_t *c) {
  return !c->dead && !c->closing && c->in_len - c->in_start < srv_in_limit(s, c);
}

/* Whether c may be served now and has a complete request buffered: not
 * parked on a blocking request, and its reader keeps up. */
static bool srv_ready(symm_store_server_t *s, srv_conn_t *c,
                      symm_proto_header_t *h, long *size) {
  if (c->dead || c->closing || c->pending ||
      c->out.len - c->out_start >= SRV_OUT_HIGH_WATER)
    return false;
  *size = srv_head_size(s, c, h);
  return *size > 0 && c->in_len - c->in_start >= (size_t)*size;
}

/* Serves complete buffered requests, in order, while srv_ready allows. */
static void srv_process(symm_store_server_t *s, srv_conn_t *c) {
  symm_proto_header_t h;
  long size;
  while (srv_ready(s, c, &h, &size)) {
    const uint8_t *msg = c->in + c->in_start;
    c->in_start += (size_t)size;
    srv_dispatch(s, c, &h, msg + SYMM_PROTO_HEADER_BYTES);
  }
  /* Check the next header now rather than while building the poll set,
   * where closing a connection could queue replies to others unseen. */
  if (!c->dead && !c->closing) srv_head_size(s, c, &h);
  if (c->in_start == c->in_len) {
    c->in_start = c->in_len = 0;
    if (c->in_cap > SRV_BUF_KEEP) {
      free(c->in);
      c->in = NULL;
      c->in_cap = 0;
    }
  }
  srv_flush(s, c);
}

static void srv_read(symm_store_server_t *s, srv_conn_t *c) {
  size_t limit = srv_in_limit(s, c);
  if (c->dead) return;
  if (c->in_start > 0) {
    memmove(c->in, c->in + c->in_start, c->in_len - c->in_start);
    c->in_len -= c->in_start;
    c->in_start = 0;
  }
  if (c->in_len >= limit) return;
  if (c->in_cap < limit) {
    uint8_t *p = realloc(c->in, limit);
    if (!p) {
      SYMM_WARN(STORE, "store: out of memory reading from %s; closing", c->peer);
      srv_conn_close(s, c, false);
      return;
    }
    c->in = p;
    c->in_cap = limit;
  }
  ssize_t n = recv(c->fd, c->in + c->in_len, limit - c->in_len, MSG_DONTWAIT);
  if (n > 0) {
    c->in_len += (size_t)n;
    srv_head_size(s, c, &(symm_proto_header_t){0}); /* reject bad headers early */
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n < 0) SYMM_INFO(STORE, "store: recv from %s: %s", c->peer, strerror(errno));
  srv_conn_close(s, c, false);
}

/* ---------------------------------------------------------------- accept */
static void srv_format_peer(const struct sockaddr_storage *ss, socklen_t len,
                            char *out, size_t cap) {
  char host[INET6_ADDRSTRLEN + 1] = "?", serv[16] = "?";
  getnameinfo((const struct sockaddr *)ss, len, host, sizeof host, serv, sizeof serv,
              NI_NUMERICHOST | NI_NUMERICSERV);
  if (ss->ss_family == AF_INET6)
    snprintf(out, cap, "[%s]:%s", host, serv);
  else
    snprintf(out, cap, "%s:%s", host, serv);
}

static void srv_remove_dead(symm_store_server_t *s);

/* The connections without a valid HELLO: how many, and the oldest (the
 * array is in the order of accept). */
static size_t srv_unauthed(const symm_store_server_t *s, srv_conn_t **oldest) {
  size_t n = 0;
  *oldest = NULL;
  for (size_t i = 0; i < s->nconns; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || c->authed) continue;
    if (!n++) *oldest = c;
  }
  return n;
}

/* Whether a connection may be accepted now (SRV_MAX_UNAUTHED): below the
 * limit, or after closing the oldest connection without HELLO once its
 * grace is over.  Otherwise s->unauthed_wait_until says when to look
 * again, and the listening socket is not polled until then. */
static bool srv_accept_room(symm_store_server_t *s, uint64_t now, bool may_close) {
  srv_conn_t *oldest;
  s->unauthed_wait_until = 0;
  if (srv_unauthed(s, &oldest) < SRV_MAX_UNAUTHED) return true;
  if (now < oldest->accepted_ns + SRV_UNAUTHED_GRACE_NS) {
    s->unauthed_wait_until = oldest->accepted_ns + SRV_UNAUTHED_GRACE_NS;
    return false;
  }
  if (!may_close) return true;
  if (!s->unauthed_warned)
    SYMM_WARN(STORE, "store: %d connections without a valid HELLO for %llu ms (the oldest "
              "from %s); closing the oldest of them to accept more (logged once)",
              SRV_MAX_UNAUTHED, (unsigned long long)(SRV_UNAUTHED_GRACE_NS / 1000000ull),
              oldest->peer);
  s->unauthed_warned = true;
  SYMM_TRACE(STORE, "store: closing %s: too many connections without HELLO", oldest->peer);
  srv_conn_close(s, oldest, false);
  return true;
}

static void srv_add_conn(symm_store_server_t *s, int fd,
                         const struct sockaddr_storage *ss, socklen_t len) {
  srv_conn_t *c = NULL;
  if (s->nconns == s->conns_cap) {
    size_t cap = s->conns_cap ? s->conns_cap * 2 : 64;
    srv_conn_t **p = realloc(s->conns, cap * sizeof *p);
    if (!p) goto fail;
    s->conns = p;
    s->conns_cap = cap;
  }
  c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->fd = fd;
  c->rank = -1;
  c->comm = SYMM_STORE_NO_COMM;
  c->accepted_ns = symm_now_ns();
  c->deadline_ns = c->accepted_ns + s->handshake_ns;
  srv_format_peer(ss, len, c->peer, sizeof c->peer);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s->conns[s->nconns++] = c;
  SYMM_TRACE(STORE, "store: accepted %s", c->peer);
  return;
fail:
  SYMM_WARN(STORE, "store: out of memory accepting a connection");
  symm_fork_guard_close(fd);
}

static void srv_accept(symm_store_server_t *s) {
  /* Called after the poll results are used: connections closed here for
   * room leave the array at once, so a flood of thousands does not pile
   * up closed entries. */
  while (srv_accept_room(s, symm_now_ns(), true)) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      symm_fork_guard_add(fd);
      srv_add_conn(s, fd, &ss, len);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      SYMM_WARN(STORE, "store: accept: %s; pausing new connections", strerror(errno));
      s->accept_paused_until = symm_now_ns() + SRV_ACCEPT_PAUSE_NS;
    }
    break;
  }
  srv_remove_dead(s);
}

/* ------------------------------------------------------------- the loop */
/* Takes requests from other threads; returns true when asked to stop. */
static bool srv_control(symm_store_server_t *s) {
  char drain[64];
  while (read(s->wake_rd, drain, sizeof drain) > 0) {
  }
  int ranks[64];
  size_t n;
  bool stop;
  do {
    pthread_mutex_lock(&s->lock);
    /* Decided here, by the thread that serves HELLOs: none is accepted
     * between the count and the stop. */
    if (s->idle == IDLE_ASKED) {
      int others = s->ranked_open;
      if (s->idle_upto != SYMM_STORE_NO_COMM)
        for (size_t i = 0; i < s->ncomm_open; i++)
          if (s->comm_open[i].comm <= s->idle_upto) others -= s->comm_open[i].open;
      s->idle = others == 0 ? IDLE_STOP : IDLE_SERVE;
      if (s->idle == IDLE_STOP) s->stop = true;
      pthread_cond_broadcast(&s->cond);
    }
    stop = s->stop;
    n = s->nqueue < 64 ? s->nqueue : 64;
    if (n) {
      memcpy(ranks, s->lost_queue, n * sizeof *ranks);
      memmove(s->lost_queue, s->lost_queue + n, (s->nqueue - n) * sizeof *ranks);
      s->nqueue -= n;
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
      srv_mark_lost(s, SYMM_STORE_NO_COMM, ranks[i], "reported by symm_store_server_mark_lost");
  } while (n > 0);
  return stop;
}

static void srv_check_deadlines(symm_store_server_t *s, uint64_t now) {
  for (size_t i = 0; i < s->nconns; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->deadline_ns || c->deadline_ns > now) continue;
    if (!c->authed && !c->closing)
      SYMM_WARN(STORE, "store: %s sent no valid HELLO within %llu ms; closing",
                c->peer, (unsigned long long)(s->handshake_ns / 1000000ull));
    srv_conn_close(s, c, false);
  }
  if (s->npending) srv_expire_pending(s, now);
}

static int srv_poll_timeout(const symm_store_server_t *s, uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < s->nconns; i++) {
    const srv_conn_t *c = s->conns[i];
    if (c->deadline_ns && c->deadline_ns < next) next = c->deadline_ns;
    if (c->pending && c->pending->deadline_ns < next) next = c->pending->deadline_ns;
  }
  if (s->accept_paused_until > now && s->accept_paused_until < next)
    next = s->accept_paused_until;
  if (s->unauthed_wait_until && s->unauthed_wait_until < next) next = s->unauthed_wait_until;
  if (next == UINT64_MAX) return -1;
  int ms = symm_ms_until(next);
  return ms > 60000 ? 60000 : ms;
}

static void srv_remove_dead(symm_store_server_t *s) {
  size_t j = 0;
  for (size_t i = 0; i < s->nconns; i++) {
    if (s->conns[i]->dead)
      srv_conn_free(s->conns[i]);
    else
      s->conns[j++] = s->conns[i];
  }
  s->nconns = j;
}

static bool srv_build_pollfds(symm_store_server_t *s, uint64_t now, bool *busy) {
  size_t need = s->nconns + 2;
  if (need > s->pfds_cap) {
    struct pollfd *p = realloc(s->pfds, need * 2 * sizeof *p);
    if (!p) return false;
    s->pfds = p;
    s->pfds_cap = need * 2;
  }
  *busy = false;
  s->pfds[0] = (struct pollfd){.fd = s->wake_rd, .events = POLLIN};
  const bool accepting = s->accept_paused_until <= now && srv_accept_room(s, now, false);
  s->pfds[1] = (struct pollfd){.fd = accepting ? s->listen_fd : -1, .events = POLLIN};
  for (size_t i = 0; i < s->nconns; i++) {
    srv_conn_t *c = s->conns[i];
    short ev = POLLRDHUP;
    symm_proto_header_t h;
    long size;
    /* Requests can become servable without socket activity (a parked
     * request answered, output flushed): serve them before sleeping. */
    if (srv_ready(s, c, &h, &size)) *busy = true;
    if (srv_wants_input(s, c)) ev |= POLLIN;
    if (c->out_start < c->out.len) ev |= POLLOUT;
    s->pfds[i + 2] = (struct pollfd){.fd = c->dead ? -1 : c->fd, .events = ev};
  }
  return true;
}

static void srv_handle_events(symm_store_server_t *s, size_t npolled) {
  for (size_t i = 0; i < npolled; i++) {
    srv_conn_t *c = s->conns[i];
    short re = s->pfds[i + 2].revents;
    if (c->dead || !re) continue;
    if (re & POLLOUT) srv_flush(s, c);
    if (c->dead) continue;
    if (re & POLLIN)
      srv_read(s, c);
    else if (re & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
      srv_conn_close(s, c, false); /* gone while we were not reading */
  }
}

static void *srv_thread(void *arg) {
  symm_store_server_t *s = arg;
  for (;;) {
    if (srv_control(s)) break;
    uint64_t now = symm_now_ns();
    srv_check_deadlines(s, now);
    for (size_t i = 0; i < s->nconns; i++) srv_process(s, s->conns[i]);
    srv_remove_dead(s);
    bool busy;
    if (!srv_build_pollfds(s, now, &busy)) {
      SYMM_WARN(STORE, "store: out of memory for the poll set; retrying");
      struct timespec ts = {0, 10 * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    size_t npolled = s->nconns;
    int rc = poll(s->pfds, npolled + 2, busy ? 0 : srv_poll_timeout(s, now));
    if (rc < 0) {
      if (errno != EINTR) SYMM_WARN(STORE, "store: poll: %s", strerror(errno));
      continue;
    }
    srv_handle_events(s, npolled);
    if (s->pfds[1].revents & POLLIN) srv_accept(s);
  }
  for (size_t i = 0; i < s->nconns; i++) srv_conn_close(s, s->conns[i], true);
  srv_remove_dead(s);
  return NULL;
}

/* ----------------------------------------------------------- public API */
static void srv_wake_thread(symm_store_server_t *s) {
  char b = 1;
  /* A full pipe already guarantees a wake-up, so EAGAIN is fine. */
  while (write(s->wake_wr, &b, 1) < 0 && errno == EINTR) {
  }
}

static symm_result_t srv_listen(symm_store_server_t *s, const char *bind_host,
                                int port) {
  char host[256], serv[16];
  const char *h = bind_host && *bind_host ? bind_host : "127.0.0.1";
  size_t hl = strlen(h);
  if (hl >= sizeof host)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: bind address too long");
  if (h[0] == '[' && hl > 2 && h[hl - 1] == ']')
    snprintf(host, sizeof host, "%.*s", (int)(hl - 2), h + 1);
  else
    snprintf(host, sizeof host, "%s", h);
  snprintf(serv, sizeof serv, "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host, serv, &hints, &res);
  if (gai != 0)
    return symm_error(SYMM_ERR_SYSTEM, "store: cannot resolve bind address %s: %s",
                      host, gai_strerror(gai));
  int err = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      s->listen_fd = fd;
      symm_fork_guard_add(fd);
      break;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  if (s->listen_fd < 0) {
    errno = err;
    return symm_error_errno("store: cannot listen on %s port %d", host, port);
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &len) != 0)
    return symm_error_errno("store: getsockname");
  s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  return SYMM_SUCCESS;
}

static void srv_free(symm_store_server_t *s) {
  if (s->listen_fd >= 0) symm_fork_guard_close(s->listen_fd);
  if (s->wake_rd >= 0) close(s->wake_rd);
  if (s->wake_wr >= 0) close(s->wake_wr);
  srv_table_free(&s->table);
  free(s->conns);
  free(s->pfds);
  free(s->lost);
  free(s->lost_queue);
  free(s->comm_open);
  free(s->token);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

symm_result_t symm_store_server_start(const char *bind_host, int port,
                                      const char *token,
                                      symm_store_server_t **server) {
  symm_result_t res = SYMM_SUCCESS;
  if (!server) return symm_error(SYMM_ERR_INVALID_ARG, "store: server is NULL");
  *server = NULL;
  if (port < 0 || port > 65535)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: port %d out of range", port);
  if (token && strlen(token) > SYMM_PROTO_MAX_TOKEN)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: token longer than %d bytes",
                      SYMM_PROTO_MAX_TOKEN);
  symm_store_server_t *s = calloc(1, sizeof *s);
  if (!s) return symm_error(SYMM_ERR_NO_MEMORY, "store: out of memory");
  s->listen_fd = s->wake_rd = s->wake_wr = -1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  s->token = strdup(token ? token : "");
  if (!s->token || srv_table_init(&s->table) != 0) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "store: out of memory");
    goto fail;
  }
  s->token_len = strlen(s->token);
  int64_t hs = symm_settings()->SYMM_STORE_HANDSHAKE_MS;
  s->handshake_ns = (uint64_t)(hs > 0 ? hs : 5000) * 1000000ull;
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    res = symm_error_errno("store: pipe");
    goto fail;
  }
  s->wake_rd = fds[0];
  s->wake_wr = fds[1];
  SYMM_CHECK_GOTO(srv_listen(s, bind_host, port), res, fail);
  int rc = pthread_create(&s->thread, NULL, srv_thread, s);
  if (rc != 0) {
    errno = rc;
    res = symm_error_errno("store: cannot start the server thread");
    goto fail;
  }
  s->thread_started = true;
  if (s->token_len == 0)
    SYMM_WARN(STORE, "store: serving port %d without a token: any process that "
              "can reach it may connect", s->port);
  SYMM_INFO(STORE, "store: serving on %s port %d",
            bind_host && *bind_host ? bind_host : "127.0.0.1", s->port);
  *server = s;
  return SYMM_SUCCESS;
fail:
  srv_free(s);
  return res;
}

int symm_store_server_port(const symm_store_server_t *server) {
  return server ? server->port : -1;
}

symm_result_t symm_store_server_drain_comm(symm_store_server_t *server, uint32_t comm,
                                           int timeout_ms) {
  if (!server) return symm_error(SYMM_ERR_INVALID_ARG, "store: server is NULL");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  int64_t ms = timeout_ms < 0 ? 0 : timeout_ms;
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&server->lock);
  while (srv_open_of(server, comm) > 0 && !server->stop) {
    if (pthread_cond_timedwait(&server->cond, &server->lock, &until) == ETIMEDOUT) break;
  }
  int open = srv_open_of(server, comm);
  pthread_mutex_unlock(&server->lock);
  if (open > 0)
    res = symm_error(SYMM_ERR_TIMEOUT, "store: %d rank connection%s still open after %d ms",
                     open, open == 1 ? "" : "s", timeout_ms);
  return res;
}

symm_result_t symm_store_server_drain(symm_store_server_t *server, int timeout_ms) {
  return symm_store_server_drain_comm(server, SYMM_STORE_NO_COMM, timeout_ms);
}

int symm_store_server_ranks_open(symm_store_server_t *server) {
  if (!server) return 0;
  pthread_mutex_lock(&server->lock);
  int open = server->ranked_open;
  pthread_mutex_unlock(&server->lock);
  return open;
}

void symm_store_server_mark_lost(symm_store_server_t *server, int rank) {
  if (!server || rank < 0) return;
  pthread_mutex_lock(&server->lock);
  if (server->nqueue == server->queue_cap) {
    size_t cap = server->queue_cap ? server->queue_cap * 2 : 16;
    int *p = realloc(server->lost_queue, cap * sizeof *p);
    if (p) {
      server->lost_queue = p;
      server->queue_cap = cap;
    }
  }
  bool queued = server->nqueue < server->queue_cap;
  if (queued) server->lost_queue[server->nqueue++] = rank;
  pthread_mutex_unlock(&server->lock);
  if (queued)
    srv_wake_thread(server);
  else
    SYMM_WARN(STORE, "store: out of memory marking rank %d lost", rank);
}

bool symm_store_server_stop_if_idle(symm_store_server_t *server, uint32_t upto_comm) {
  if (!server) return true;
  pthread_mutex_lock(&server->lock);
  server->idle = IDLE_ASKED;
  server->idle_upto = upto_comm;
  pthread_mutex_unlock(&server->lock);
  srv_wake_thread(server);
  pthread_mutex_lock(&server->lock);
  while (server->idle == IDLE_ASKED) pthread_cond_wait(&server->cond, &server->lock);
  const bool stopping = server->idle == IDLE_STOP;
  server->idle = IDLE_NONE;
  pthread_mutex_unlock(&server->lock);
  if (stopping) symm_store_server_stop(server);
  return stopping;
}

void symm_store_server_stop(symm_store_server_t *server) {
  if (!server) return;
  pthread_mutex_lock(&server->lock);
  server->stop = true;
  pthread_cond_broadcast(&server->cond);
  pthread_mutex_unlock(&server->lock);
  if (server->thread_started) {
    srv_wake_thread(server);
    pthread_join(server->thread, NULL);
  }
  srv_free(server);
}
