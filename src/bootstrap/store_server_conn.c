/* The store server's connections: accepting them (with the limit on those
 * that have not proved the token), the handshake that proves it (HELLO,
 * AUTH), reading and framing requests, dispatching them, and buffered
 * replies. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "symm_util.h" /* symm_fork_guard_add / _close */
#include "store_server_int.h"

/* The connections that have not proved the token are kept in a list in
 * the order accepted, so that counting them and finding the oldest cost
 * the same however many connections the server holds. */
static void srv_unauthed_link(symm_store_server_t *s, srv_conn_t *c) {
  c->unauthed_prev = s->unauthed_tail;
  c->unauthed_next = NULL;
  if (s->unauthed_tail)
    s->unauthed_tail->unauthed_next = c;
  else
    s->unauthed_head = c;
  s->unauthed_tail = c;
  c->unauthed_listed = true;
  s->nunauthed++;
}

static void srv_unauthed_unlink(symm_store_server_t *s, srv_conn_t *c) {
  if (!c->unauthed_listed) return;
  if (c->unauthed_prev)
    c->unauthed_prev->unauthed_next = c->unauthed_next;
  else
    s->unauthed_head = c->unauthed_next;
  if (c->unauthed_next)
    c->unauthed_next->unauthed_prev = c->unauthed_prev;
  else
    s->unauthed_tail = c->unauthed_prev;
  c->unauthed_prev = c->unauthed_next = NULL;
  c->unauthed_listed = false;
  s->nunauthed--;
}

/* Under s->lock: how many rank connections of communicator comm are open
 * (SYMM_STORE_NO_COMM: of every communicator, and of none). */
int srv_open_of(const symm_store_server_t *s, uint32_t comm) {
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
void srv_conn_close(symm_store_server_t *s, srv_conn_t *c, bool stopping) {
  if (c->dead) return;
  c->dead = true;
  /* A client that found this server's proof wrong (its token is not this
   * store's) closes after HELLO without a word: that is its refusal. */
  if (c->peer_closed && c->challenged && !c->authed && !c->auth_refused &&
      srv_refusal_logged(s, symm_now_ns()))
    SYMM_WARN(STORE, "store: %s (rank %d) closed before proving the token: another "
              "SYMM_TOKEN than this store's?", c->peer, (int)c->hello_rank);
  srv_unauthed_unlink(s, c);
  srv_pending_free(s, c);
  if (c->authed && c->rank >= 0) {
    srv_ranked_open_add(s, c, -1);
    if (!c->said_bye && !stopping)
      srv_mark_lost(s, c->comm, c->rank, c->hello_proc.pid, "its connection closed without BYE");
    srv_proc_left(s, c, c->said_bye, stopping);
  }
  /* Last: a client that sees its BYE answered by the close then finds
   * itself counted out (symm_store_server_ranks_open). */
  symm_fork_guard_close(c->fd);
  c->fd = -1;
  SYMM_TRACE(STORE, "store: closed %s (rank %d%s)", c->peer, c->rank,
             c->said_bye ? ", bye" : "");
}

void srv_conn_free(srv_conn_t *c) {
  free(c->in);
  symm_proto_buf_free(&c->out);
  free(c);
}

/* Drops c for a protocol violation: one WARN naming the peer and why (for
 * a connection without the token, within the limit of srv_refusal_logged). */
void srv_conn_reject(symm_store_server_t *s, srv_conn_t *c, const char *why) {
  if (c->authed || srv_refusal_logged(s, symm_now_ns()))
    SYMM_WARN(STORE, "store: malformed message from %s (rank %d): %s; closing",
              c->peer, c->rank, why);
  srv_conn_close(s, c, false);
}

/* Writes as much buffered output as the socket takes now. */
void srv_flush(symm_store_server_t *s, srv_conn_t *c) {
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
      atomic_fetch_add_explicit(&s->n_reply_bytes, (uint64_t)n, memory_order_relaxed);
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

bool srv_refusal_logged(symm_store_server_t *s, uint64_t now) {
  struct srv_refusals *r = &s->refusals;
  srv_refusals_summary(s, now, false);
  if (r->logged == 0) r->window_start = now;
  if (r->logged < SRV_REFUSALS_LOGGED) {
    r->logged++;
    return true;
  }
  r->quiet++;
  return false;
}

void srv_refusals_summary(symm_store_server_t *s, uint64_t now, bool stopping) {
  struct srv_refusals *r = &s->refusals;
  if (r->logged == 0 || (!stopping && now < r->window_start + SRV_REFUSALS_WINDOW_NS)) return;
  if (r->quiet)
    SYMM_WARN(STORE, "store: %lu more connections refused in %.1f s, not logged one by one",
              r->quiet, (double)(now - r->window_start) / 1e9);
  r->logged = 0;
  r->quiet = 0;
}

uint64_t srv_refusals_next(const symm_store_server_t *s) {
  return s->refusals.quiet ? s->refusals.window_start + SRV_REFUSALS_WINDOW_NS : UINT64_MAX;
}

/* Answers HELLO or AUTH with `code` and closes c once the answer is out, so
 * that the client says why instead of taking the close for a store
 * stopping. */
static void srv_refuse(srv_conn_t *c, uint8_t op, uint32_t id, symm_result_t code) {
  srv_reply_status(c, op, id, code, -1);
  c->closing = true;
  c->deadline_ns = symm_now_ns() + SRV_CLOSE_LINGER_NS;
}

/* The server's nonce of a handshake: random, or the fuzzer's fixed one. */
static void srv_new_nonce(const symm_store_server_t *s, uint8_t nonce[SYMM_PROTO_NONCE]) {
  if (s->fixed_nonce)
    memset(nonce, 0, SYMM_PROTO_NONCE);
  else
    symm_random_bytes(nonce, SYMM_PROTO_NONCE);
}

/* HELLO: the client's nonce and who it says it is, kept until its AUTH
 * proves the token; the answer is this server's nonce and proof. */
static void srv_do_hello(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                         symm_proto_reader_t *r) {
  const uint8_t *client_nonce = symm_proto_take(r, SYMM_PROTO_NONCE, "truncated nonce");
  const int32_t rank = symm_proto_get_i32(r);
  /* Optional: the client's communicator (so that draining one does not
   * wait for the connections of the next, served by the same store). */
  const uint32_t comm = r->err || r->left == 0 ? SYMM_STORE_NO_COMM : symm_proto_get_u32(r);
  srv_read_process(r, &c->hello_proc);
  if (symm_proto_end(r) && rank < -1) r->err = "rank below -1";
  if (r->err) { /* another symmem version, say */
    if (srv_refusal_logged(s, symm_now_ns()))
      SYMM_WARN(STORE, "store: malformed HELLO from %s: %s; closing", c->peer, r->err);
    srv_refuse(c, SYMM_OP_HELLO, id, SYMM_ERR_PROTOCOL);
    return;
  }
  uint8_t server_nonce[SYMM_PROTO_NONCE], proof[SYMM_PROTO_PROOF];
  srv_new_nonce(s, server_nonce);
  symm_proto_proof(s->token, s->token_len, SYMM_PROTO_SERVER_LABEL, server_nonce, client_nonce,
                   proof);
  symm_proto_proof(s->token, s->token_len, SYMM_PROTO_CLIENT_LABEL, server_nonce, client_nonce,
                   c->expect_proof);
  c->challenged = true;
  c->hello_rank = rank;
  c->hello_comm = comm;
  size_t at = srv_reply_begin(c, SYMM_OP_HELLO, id, SYMM_SUCCESS, -1);
  symm_proto_put_bytes(&c->out, server_nonce, sizeof server_nonce);
  symm_proto_put_bytes(&c->out, proof, sizeof proof);
  srv_reply_end(c, at);
}

/* AUTH: the client's proof of the token.  Only then does what its HELLO
 * said count. */
static void srv_do_auth(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                        symm_proto_reader_t *r) {
  const uint8_t *proof = symm_proto_take(r, SYMM_PROTO_PROOF, "truncated proof");
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  const int rank = c->hello_rank;
  if (!symm_secret_equal(proof, c->expect_proof, SYMM_PROTO_PROOF)) {
    /* Nothing about the job's ranks is taken from a connection without the
     * token: anybody who can reach the port can claim any rank, and must
     * not end the job's waits.  A rank of the job with a stale token fails
     * by itself, from this answer. */
    c->auth_refused = true;
    if (srv_refusal_logged(s, symm_now_ns()))
      SYMM_WARN(STORE, "store: wrong token from %s (rank %d); refusing the connection",
                c->peer, rank);
    srv_refuse(c, SYMM_OP_AUTH, id, SYMM_ERR_PERMISSION);
    return;
  }
  c->authed = true;
  atomic_fetch_add_explicit(&s->n_connections, 1, memory_order_relaxed);
  srv_unauthed_unlink(s, c);
  c->rank = rank;
  c->comm = rank >= 0 ? c->hello_comm : SYMM_STORE_NO_COMM;
  c->deadline_ns = 0;
  if (rank >= 0) {
    srv_ranked_open_add(s, c, 1);
    srv_proc_join(s, c, &c->hello_proc);
    srv_clear_lost(s, c);
  }
  SYMM_INFO(STORE, "store: %s connected as rank %d of communicator %d", c->peer, rank,
            c->comm == SYMM_STORE_NO_COMM ? -1 : (int)c->comm);
  srv_reply_status(c, SYMM_OP_AUTH, id, SYMM_SUCCESS, -1);
}

static void srv_dispatch(symm_store_server_t *s, srv_conn_t *c,
                         const symm_proto_header_t *h, const uint8_t *body) {
  symm_proto_reader_t r;
  symm_proto_reader_init(&r, body, h->body_len);
  SYMM_TRACE(STORE, "store: %s from %s (rank %d), %u bytes",
             symm_proto_op_name(h->opcode), c->peer, c->rank, h->body_len);
  switch (h->opcode) {
    case SYMM_OP_HELLO: srv_do_hello(s, c, h->id, &r); break;
    case SYMM_OP_AUTH: srv_do_auth(s, c, h->id, &r); break;
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
    case SYMM_OP_STATS: srv_do_stats(s, c, h->id); break;
    case SYMM_OP_BYE:
      c->said_bye = true;
      srv_conn_close(s, c, false);
      break;
    default: srv_conn_reject(s, c, "unknown opcode"); break;
  }
  /* A request handler (SET ... DEL) that found its message malformed left
   * the reason; HELLO and AUTH close for themselves. */
  if (h->opcode != SYMM_OP_HELLO && h->opcode != SYMM_OP_AUTH && r.err && !c->dead)
    srv_conn_reject(s, c, r.err);
}

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
  else if (h->opcode == SYMM_OP_HELLO && (c->challenged || c->authed))
    why = "second HELLO";
  else if (h->opcode == SYMM_OP_AUTH && (!c->challenged || c->authed))
    why = c->authed ? "second AUTH" : "AUTH before HELLO";
  else if (!c->authed && h->opcode != SYMM_OP_HELLO && h->opcode != SYMM_OP_AUTH)
    why = c->challenged ? "request before AUTH" : "request before HELLO";
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

bool srv_wants_input(symm_store_server_t *s, srv_conn_t *c) {
  return !c->dead && !c->closing && c->in_len - c->in_start < srv_in_limit(s, c);
}

/* Whether c may be served now and has a complete request buffered: not
 * parked on a blocking request, and its reader keeps up. */
bool srv_ready(symm_store_server_t *s, srv_conn_t *c, symm_proto_header_t *h, long *size) {
  if (c->dead || c->closing || c->pending ||
      c->out.len - c->out_start >= SRV_OUT_HIGH_WATER)
    return false;
  *size = srv_head_size(s, c, h);
  return *size > 0 && c->in_len - c->in_start >= (size_t)*size;
}

/* Serves complete buffered requests, in order, while srv_ready allows. */
void srv_process(symm_store_server_t *s, srv_conn_t *c) {
  symm_proto_header_t h;
  long size;
  while (srv_ready(s, c, &h, &size)) {
    const uint8_t *msg = c->in + c->in_start;
    c->in_start += (size_t)size;
    atomic_fetch_add_explicit(&s->n_requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->n_request_bytes, (uint64_t)size, memory_order_relaxed);
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

void srv_read(symm_store_server_t *s, srv_conn_t *c) {
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
  c->peer_closed = true;
  srv_conn_close(s, c, false);
}

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

/* The connections that have not proved the token: how many, and the one accepted
 * first (the backlog is in order: the one that connected first, nearly). */
static size_t srv_unauthed(const symm_store_server_t *s, srv_conn_t **oldest) {
  *oldest = s->unauthed_head;
  return s->nunauthed;
}

/* Whether a connection may be accepted now (SRV_MAX_UNAUTHED): below the
 * limit, or when the oldest connection that has not proved the token has
 * had its grace (it goes if the new one has not proved it at once either:
 * srv_admit).
 * Otherwise s->unauthed_wait_until says when to look again, and the
 * listening socket is not polled until then. */
bool srv_accept_room(symm_store_server_t *s, uint64_t now) {
  srv_conn_t *oldest;
  s->unauthed_wait_until = 0;
  if (srv_unauthed(s, &oldest) < SRV_MAX_UNAUTHED) return true;
  if (now >= oldest->connected_ns + SRV_UNAUTHED_GRACE_NS) return true;
  s->unauthed_wait_until = oldest->connected_ns + SRV_UNAUTHED_GRACE_NS;
  return false;
}

/* Closes the connection not authenticated yet that was accepted first, to
 * make room;
 * false if there is none. */
static bool srv_evict_oldest(symm_store_server_t *s, const char *why) {
  srv_conn_t *oldest;
  srv_unauthed(s, &oldest);
  if (!oldest) return false;
  if (!s->unauthed_warned)
    SYMM_WARN(STORE, "store: %s; closing the oldest connection that has not proved the token "
              "(from %s) to make room (logged once)", why, oldest->peer);
  s->unauthed_warned = true;
  SYMM_TRACE(STORE, "store: closing %s to make room: %s", oldest->peer, why);
  srv_conn_close(s, oldest, false);
  return true;
}

/* When the peer connected: a connection may wait in the listen backlog
 * long before accept() returns it, and its grace runs from then, so that
 * a backlog of connections that never speak drains at once instead of one
 * grace per SRV_MAX_UNAUTHED of them.  TCP_INFO's tcpi_last_data_recv is
 * the time since data last came, or since the connection was set up. */
static uint64_t srv_connected_ns(int fd, uint64_t now) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof ti.tcpi_last_data_recv)
    return now;
  const uint64_t age = (uint64_t)ti.tcpi_last_data_recv * 1000000ull;
  return age < now ? now - age : 0;
}

static srv_conn_t *srv_add_conn(symm_store_server_t *s, int fd,
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
  c->connected_ns = srv_connected_ns(fd, symm_now_ns());
  c->deadline_ns = c->connected_ns + s->handshake_ns;
  srv_format_peer(ss, len, c->peer, sizeof c->peer);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s->conns[s->nconns++] = c;
  srv_unauthed_link(s, c);
  SYMM_TRACE(STORE, "store: accepted %s", c->peer);
  return c;
fail:
  free(c);
  SYMM_WARN(STORE, "store: out of memory accepting a connection");
  symm_fork_guard_close(fd);
  return NULL;
}

/* A new connection's HELLO is answered at once when it is in already (a
 * rank sends it as soon as it is connected, usually before accept), so
 * that ranks never queue behind connections that say nothing; its AUTH
 * follows a round trip later.  Until then it counts against
 * SRV_MAX_UNAUTHED: past the limit, the connection not authenticated yet
 * that was accepted first goes (one that has had its grace: srv_accept_room). */
static void srv_admit(symm_store_server_t *s, srv_conn_t *c) {
  srv_read(s, c);
  srv_process(s, c);
  srv_conn_t *oldest;
  if (!c->dead && !c->authed && srv_unauthed(s, &oldest) > SRV_MAX_UNAUTHED)
    srv_evict_oldest(s, "too many connections that have not proved the token");
}

void srv_accept(symm_store_server_t *s) {
  /* At most SRV_ACCEPT_BATCH per pass, so that a stream of connections
   * does not keep the thread from those it has; the listening socket is
   * still readable on the next pass.  Connections closed here leave the
   * array at the end of the batch. */
  for (int i = 0; i < SRV_ACCEPT_BATCH && srv_accept_room(s, symm_now_ns()); i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      symm_fork_guard_add(fd);
      srv_conn_t *c = srv_add_conn(s, fd, &ss, len);
      if (c) srv_admit(s, c);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    /* Out of fds: those of connections not authenticated are the ones to
     * give up; with none, pause accept() rather than spin on it. */
    if ((errno == EMFILE || errno == ENFILE) && srv_evict_oldest(s, strerror(errno))) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      SYMM_WARN(STORE, "store: accept: %s; pausing new connections", strerror(errno));
      s->accept_paused_until = symm_now_ns() + SRV_ACCEPT_PAUSE_NS;
    }
    break;
  }
  srv_remove_dead(s);
}

void srv_remove_dead(symm_store_server_t *s) {
  size_t j = 0;
  for (size_t i = 0; i < s->nconns; i++) {
    if (s->conns[i]->dead)
      srv_conn_free(s->conns[i]);
    else
      s->conns[j++] = s->conns[i];
  }
  s->nconns = j;
}
