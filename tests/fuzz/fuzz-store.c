/* libFuzzer target: the store server's request handling.  The input is one
 * connection's byte stream.  A server made by srv_new (key table and
 * token, no thread) accepts the connection from a Unix socket through the
 * real srv_accept; the loop below then does what the server thread's loop
 * does for each connection (srv_read, srv_process, srv_flush) while the
 * client end sends the input and reads the replies.  A request that parks
 * (GET, WAIT, MGET on missing keys) is released the ways a live job
 * releases it: its deadline passing, another rank (a second connection
 * that the harness drives) writing the key, or a rank being lost.
 *
 * The server's challenges are all-zero nonces (fixed_nonce), so that an
 * input can carry a valid AUTH: the seeds (make-seeds.py) compute theirs
 * with FUZZ_TOKEN, and every HELLO answer's proof is checked here.
 *
 * Checked besides the sanitizers: every reply the server sends is framed
 * (magic, version, the reply flag on a known opcode, a body of at least
 * the status prefix and at most SYMM_PROTO_MAX_REPLY) and carries a
 * known status, with a lost rank only for PEER_LOST; the
 * replies answer the input's requests in order, one each (the server
 * serves a connection's requests one at a time); each agrees with a
 * model of the key table (the values of GET and MGET, ADD's sums, CAS,
 * DEL, WAIT and CHECK verdicts); and the connection always ends (a stall
 * is reported as a crash). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bootstrap/store_server_int.h"

#define FUZZ_TOKEN "fuzz-token"
/* Loop rounds without progress before the connection counts as stuck. */
#define FUZZ_STALL_ROUNDS 64

static int listener = -1;
static struct sockaddr_un listen_addr;
static socklen_t listen_len;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* An autobound abstract name: nothing on disk, nothing to clash with. */
  listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof(sa_family_t)) != 0 ||
      listen(listener, 16) != 0) {
    perror("fuzz-store: listener");
    abort();
  }
  listen_len = sizeof listen_addr;
  if (getsockname(listener, (struct sockaddr *)&listen_addr, &listen_len) != 0) abort();
  return 0;
}

/* ------------------------------------------------------------ the model
 * What the key table must hold: every reply is checked against it, and
 * every write the server acknowledges is applied to it. */
typedef struct model_key {
  uint8_t key[SYMM_STORE_MAX_KEY];
  uint16_t key_len;
  uint8_t *value;
  uint32_t value_len;
} model_key_t;

typedef struct model {
  model_key_t *keys;
  size_t n, cap;
} model_t;

static void bad_reply(const char *what, const symm_proto_header_t *h) {
  fprintf(stderr, "fuzz-store: %s (reply opcode %#x, id %u, body %u bytes)\n", what, h->opcode,
          h->id, h->body_len);
  __builtin_trap();
}

static model_key_t *model_find(model_t *m, const char *key, uint16_t len) {
  for (size_t i = 0; i < m->n; i++)
    if (m->keys[i].key_len == len && memcmp(m->keys[i].key, key, len) == 0) return &m->keys[i];
  return NULL;
}

static void model_set(model_t *m, const char *key, uint16_t len, const void *v, uint32_t vlen) {
  model_key_t *k = model_find(m, key, len);
  if (!k) {
    if (m->n == m->cap) {
      m->cap = m->cap ? 2 * m->cap : 16;
      m->keys = realloc(m->keys, m->cap * sizeof *m->keys);
      if (!m->keys) abort();
    }
    k = &m->keys[m->n++];
    memcpy(k->key, key, len);
    k->key_len = len;
  } else {
    free(k->value);
  }
  k->value = malloc(vlen ? vlen : 1);
  if (!k->value) abort();
  memcpy(k->value, v, vlen);
  k->value_len = vlen;
}

static void model_del(model_t *m, model_key_t *k) {
  free(k->value);
  *k = m->keys[--m->n];
}

static void model_free(model_t *m) {
  while (m->n) model_del(m, &m->keys[m->n - 1]);
  free(m->keys);
}

static bool same_value(const model_key_t *k, const uint8_t *v, uint32_t len) {
  return k && k->value_len == len && memcmp(k->value, v, len) == 0;
}

/* The counter a value holds, as the server reads one (decimal text). */
static bool model_counter(const model_key_t *k, int64_t *out) {
  char text[24];
  if (!k) return *out = 0, true;
  if (k->value_len == 0 || k->value_len >= sizeof text) return false;
  memcpy(text, k->value, k->value_len);
  text[k->value_len] = 0;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  const char *digits = text + (text[0] == '-');
  if (!*digits || errno || *end || strspn(digits, "0123456789") != strlen(digits)) return false;
  *out = v;
  return true;
}

/* The keys field of a request: whether all are in the model, and, for a
 * reply, that its values (r) are theirs in order. */
static bool model_keys(model_t *m, symm_proto_reader_t *q, symm_proto_reader_t *r,
                       const symm_proto_header_t *h) {
  uint32_t n = symm_proto_get_count(q);
  bool all = true;
  for (uint32_t i = 0; i < n; i++) {
    uint16_t len;
    const char *key = symm_proto_get_key(q, &len);
    model_key_t *k = key ? model_find(m, key, len) : NULL;
    all = all && k;
    if (r) {
      uint32_t vlen;
      const uint8_t *v = symm_proto_get_value(r, &vlen);
      if (!v || !same_value(k, v, vlen)) bad_reply("MGET value is not the key's", h);
    }
  }
  return all;
}

/* Checks a reply (status and payload, body[0..len)) against the model
 * and applies what its request (q, positioned at its body) wrote. */
static void model_reply(model_t *m, uint8_t op, symm_proto_reader_t *q, uint32_t status,
                        const uint8_t *body, size_t len, const symm_proto_header_t *h) {
  symm_proto_reader_t r;
  symm_proto_reader_init(&r, body, len);
  bool ok = status == SYMM_SUCCESS;
  uint16_t klen = 0;
  const char *key = op == SYMM_OP_HELLO || op == SYMM_OP_WAIT || op == SYMM_OP_MGET ||
                    op == SYMM_OP_CHECK || op == SYMM_OP_STATS ? NULL
                                                              : symm_proto_get_key(q, &klen);
  model_key_t *k = key ? model_find(m, key, klen) : NULL;
  if (status == SYMM_ERR_TIMEOUT && len) { /* the missing keys (check_reply) */
    uint32_t n = symm_proto_get_u32(&r);
    if (n == 0) bad_reply("a timeout that names no missing key", h);
    for (uint32_t i = 0; i < n; i++)
      if (symm_proto_get_u32(&r) != 0 && op == SYMM_OP_GET)
        bad_reply("a GET's missing key is not its only key", h);
  }
  switch (op) {
  case SYMM_OP_SET: {
    uint32_t vlen;
    const uint8_t *v = symm_proto_get_value(q, &vlen);
    if (!ok) bad_reply("SET failed", h);
    model_set(m, key, klen, v, vlen);
    break;
  }
  case SYMM_OP_GET:
    if (ok) {
      uint32_t vlen;
      const uint8_t *v = symm_proto_get_value(&r, &vlen);
      if (!v || !same_value(k, v, vlen)) bad_reply("GET value is not the key's", h);
    } else if (k) {
      bad_reply("GET of a present key failed", h);
    }
    break;
  case SYMM_OP_ADD: {
    int64_t delta = symm_proto_get_i64(q), cur, sum;
    bool valid = model_counter(k, &cur) && !__builtin_add_overflow(cur, delta, &sum);
    if (ok != valid) bad_reply("ADD verdict is not the model's", h);
    if (ok && symm_proto_get_i64(&r) != sum) bad_reply("ADD result is not the sum", h);
    if (ok) {
      char text[24];
      int n = snprintf(text, sizeof text, "%lld", (long long)sum);
      model_set(m, key, klen, text, (uint32_t)n);
    }
    break;
  }
  case SYMM_OP_CAS: {
    uint8_t expect_present = symm_proto_get_u8(q);
    uint32_t elen, dlen;
    const uint8_t *expected = symm_proto_get_value(q, &elen);
    const uint8_t *desired = symm_proto_get_value(q, &dlen);
    if (!ok) bad_reply("CAS failed", h);
    bool match = expect_present ? k && same_value(k, expected, elen) : !k;
    if (match) model_set(m, key, klen, desired, dlen);
    k = model_find(m, key, klen);
    uint8_t present = symm_proto_get_u8(&r);
    uint32_t vlen;
    const uint8_t *v = symm_proto_get_value(&r, &vlen);
    if (present != (k != NULL) || !v || (k && !same_value(k, v, vlen)) || (!k && vlen))
      bad_reply("CAS result is not the key's", h);
    break;
  }
  case SYMM_OP_DEL:
    if (ok != (k != NULL) || (!ok && status != SYMM_ERR_NOT_FOUND))
      bad_reply("DEL verdict is not the model's", h);
    if (k) model_del(m, k);
    break;
  case SYMM_OP_WAIT:
  case SYMM_OP_MGET: {
    symm_proto_get_i32(q);
    if (ok && op == SYMM_OP_MGET && symm_proto_get_u32(&r) != symm_proto_get32(q->p))
      bad_reply("MGET count is not the request's", h);
    bool all = model_keys(m, q, ok && op == SYMM_OP_MGET ? &r : NULL, h);
    if (ok != all) bad_reply("WAIT / MGET verdict is not the model's", h);
    break;
  }
  case SYMM_OP_CHECK:
    if (!ok || symm_proto_get_u8(&r) != model_keys(m, q, NULL, h))
      bad_reply("CHECK is not the model's", h);
    break;
  case SYMM_OP_STATS: /* four counters; this request counted */
    if (!ok) bad_reply("STATS failed", h);
    for (int i = 0; i < 4; i++) symm_proto_get_i64(&r);
    break;
  default: return; /* HELLO: nothing stored */
  }
  if (!symm_proto_end(&r)) bad_reply("reply payload does not parse", h);
}

/* ----------------------------------------------------------- the replies
 * The requests of the input, as its headers frame it, are what the
 * replies must answer, in this order. */
typedef struct request_list {
  const uint8_t *data;
  size_t size;
  size_t next; /* offset of the header of the next request to be answered */
  model_t model;
} request_list_t;

/* What the client end has read of the current reply. */
typedef struct reply_reader {
  uint8_t head[SYMM_PROTO_HEADER_BYTES];
  size_t have;      /* bytes of head */
  uint8_t *body;
  size_t body_have, body_cap;
  request_list_t *requests;
} reply_reader_t;

/* A HELLO answered with success carries the server's nonce (all zeros
 * here) and its proof of FUZZ_TOKEN for that nonce and the client's. */
static void check_challenge(const uint8_t *req_body, uint32_t req_len, uint32_t status,
                            const uint8_t *body, const symm_proto_header_t *h) {
  if (status != SYMM_SUCCESS) return;
  static const uint8_t zero[SYMM_PROTO_NONCE];
  if (h->body_len != SYMM_PROTO_REPLY_PREFIX + SYMM_PROTO_NONCE + SYMM_PROTO_PROOF ||
      req_len < SYMM_PROTO_NONCE)
    bad_reply("HELLO's answer is not a nonce and a proof", h);
  const uint8_t *nonce = body + SYMM_PROTO_REPLY_PREFIX;
  uint8_t proof[SYMM_PROTO_PROOF];
  symm_proto_proof(FUZZ_TOKEN, strlen(FUZZ_TOKEN), SYMM_PROTO_SERVER_LABEL, nonce, req_body,
                   proof);
  if (memcmp(nonce, zero, sizeof zero) != 0 ||
      memcmp(proof, nonce + SYMM_PROTO_NONCE, sizeof proof) != 0)
    bad_reply("HELLO's answer does not prove the token", h);
}

static void check_reply(const uint8_t *p, const uint8_t *body, request_list_t *rq) {
  symm_proto_header_t h;
  symm_proto_decode_header(p, &h);
  unsigned op = h.opcode & ~SYMM_PROTO_REPLY_FLAG;
  uint32_t status = symm_proto_get32(body);
  int32_t lost = (int32_t)symm_proto_get32(body + 4);
  if (status > SYMM_ERR_BACKEND_UNAVAILABLE) bad_reply("unknown status", &h);
  if (lost != -1 && status != SYMM_ERR_PEER_LOST) bad_reply("a lost rank without a loss", &h);
  /* A failure carries no payload, except the missing keys of a blocking
   * request that timed out (store_proto.h): u32 n, n u32 indices. */
  const bool blocking = op == SYMM_OP_GET || op == SYMM_OP_WAIT || op == SYMM_OP_MGET;
  if (status == SYMM_ERR_TIMEOUT && blocking && h.body_len != SYMM_PROTO_REPLY_PREFIX) {
    if (h.body_len < SYMM_PROTO_REPLY_PREFIX + 4 ||
        h.body_len != SYMM_PROTO_REPLY_PREFIX + 4 +
                          4 * (size_t)symm_proto_get32(body + SYMM_PROTO_REPLY_PREFIX))
      bad_reply("a timeout's missing keys do not parse", &h);
  } else if (status != SYMM_SUCCESS && h.body_len != SYMM_PROTO_REPLY_PREFIX) {
    bad_reply("a payload with a failure", &h);
  }
  if (rq->next + SYMM_PROTO_HEADER_BYTES > rq->size) bad_reply("a reply to no request", &h);
  symm_proto_header_t req;
  symm_proto_decode_header(rq->data + rq->next, &req);
  if (req.opcode != op || req.id != h.id) bad_reply("a reply out of order", &h);
  const uint8_t *req_body = rq->data + rq->next + SYMM_PROTO_HEADER_BYTES;
  if (req.body_len > rq->size - rq->next - SYMM_PROTO_HEADER_BYTES)
    bad_reply("a reply to a request not sent whole", &h);
  symm_proto_reader_t q;
  symm_proto_reader_init(&q, req_body, req.body_len);
  if (op == SYMM_OP_HELLO)
    check_challenge(req_body, req.body_len, status, body, &h);
  else if (op == SYMM_OP_AUTH && h.body_len != SYMM_PROTO_REPLY_PREFIX)
    bad_reply("a payload with AUTH's answer", &h);
  else if (op != SYMM_OP_AUTH)
    model_reply(&rq->model, (uint8_t)op, &q, status, body + SYMM_PROTO_REPLY_PREFIX,
                h.body_len - SYMM_PROTO_REPLY_PREFIX, &h);
  rq->next += SYMM_PROTO_HEADER_BYTES + (size_t)req.body_len;
}

static void check_reply_header(const uint8_t *p) {
  symm_proto_header_t h;
  symm_proto_decode_header(p, &h);
  unsigned op = h.opcode & ~SYMM_PROTO_REPLY_FLAG;
  if (h.magic != SYMM_PROTO_MAGIC || h.version != SYMM_PROTO_VERSION || h.reserved != 0 ||
      !(h.opcode & SYMM_PROTO_REPLY_FLAG) || op == 0 || op >= SYMM_OP_COUNT_ ||
      op == SYMM_OP_BYE || h.body_len < SYMM_PROTO_REPLY_PREFIX ||
      h.body_len > SYMM_PROTO_MAX_REPLY)
    bad_reply("malformed reply header", &h);
}

/* Reads what the server sent; true if anything came. */
static bool drain_replies(int fd, reply_reader_t *rr) {
  bool any = false;
  uint8_t buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return any;
    any = true;
    for (size_t i = 0; i < (size_t)n;) {
      if (rr->have < SYMM_PROTO_HEADER_BYTES) {
        rr->head[rr->have++] = buf[i++];
        if (rr->have < SYMM_PROTO_HEADER_BYTES) continue;
        check_reply_header(rr->head);
        size_t len = symm_proto_get32(rr->head + 12);
        if (len > rr->body_cap) {
          rr->body = realloc(rr->body, len);
          if (!rr->body) abort();
          rr->body_cap = len;
        }
        rr->body_have = 0;
      }
      size_t len = symm_proto_get32(rr->head + 12);
      size_t k = (size_t)n - i < len - rr->body_have ? (size_t)n - i : len - rr->body_have;
      memcpy(rr->body + rr->body_have, buf + i, k);
      rr->body_have += k;
      i += k;
      if (rr->body_have == len) {
        check_reply(rr->head, rr->body, rr->requests);
        rr->have = 0;
      }
    }
  }
}

/* A second connection, rank 1 of no communicator (so that its loss
 * concerns every request), that the harness drives: it writes the key a
 * parked request waits for, or goes away without BYE. */
typedef struct helper {
  int fd;          /* client end, -1 once gone */
  srv_conn_t *conn;
  uint32_t next_id;
} helper_t;

static void helper_send(helper_t *h, symm_proto_buf_t *b) {
  if (b->failed) abort();
  for (size_t at = 0; at < b->len;) {
    ssize_t n = send(h->fd, b->data + at, b->len - at, MSG_NOSIGNAL);
    if (n <= 0) abort();
    at += (size_t)n;
  }
  symm_proto_buf_free(b);
}

/* HELLO and AUTH at once: the server's nonce is known (all zeros). */
static void helper_hello(helper_t *h) {
  static const uint8_t zero[SYMM_PROTO_NONCE];
  uint8_t proof[SYMM_PROTO_PROOF];
  symm_proto_proof(FUZZ_TOKEN, strlen(FUZZ_TOKEN), SYMM_PROTO_CLIENT_LABEL, zero, zero, proof);
  symm_proto_buf_t b = {0};
  size_t at = symm_proto_begin(&b, SYMM_OP_HELLO, h->next_id++);
  symm_proto_put_bytes(&b, zero, sizeof zero);
  symm_proto_put_i32(&b, 1);
  symm_proto_finish(&b, at);
  at = symm_proto_begin(&b, SYMM_OP_AUTH, h->next_id++);
  symm_proto_put_bytes(&b, proof, sizeof proof);
  symm_proto_finish(&b, at);
  helper_send(h, &b);
}

static void helper_set(helper_t *h, const char *key, uint16_t len, model_t *m) {
  model_set(m, key, len, "set by the helper", 17);
  symm_proto_buf_t b = {0};
  size_t at = symm_proto_begin(&b, SYMM_OP_SET, h->next_id++);
  symm_proto_put_key(&b, key, len);
  symm_proto_put_value(&b, "set by the helper", 17);
  symm_proto_finish(&b, at);
  helper_send(h, &b);
}

/* Reads and drops what the server sent the helper (its framing is the
 * same code as the main connection's, checked there). */
static bool helper_drain(helper_t *h) {
  uint8_t buf[4096];
  bool any = false;
  while (h->fd >= 0 && recv(h->fd, buf, sizeof buf, MSG_DONTWAIT) > 0) any = true;
  return any;
}

/* Releases a parked request as a live job would, by turns: its deadline
 * passes, another rank writes the key it waits for, a rank is reported
 * lost (symmem-run's marks), or the helper rank's connection closes
 * without BYE. */
static void release_parked(symm_store_server_t *s, srv_conn_t *c, helper_t *h, model_t *m,
                           unsigned round) {
  const srv_pending_t *p = c->pending;
  switch (round % 4) {
    case 0: srv_expire_pending(s, UINT64_MAX); break;
    case 1:
      if (h->fd >= 0 && h->conn->authed && !h->conn->dead) {
        helper_set(h, p->keys[p->next_missing].key, p->keys[p->next_missing].len, m);
        break;
      }
      /* fall through: no helper to write it */
    case 2: srv_mark_lost(s, c->comm, (int)(round / 4 % 4), 0, "lost by the fuzzer"); break;
    case 3:
      if (h->fd >= 0) {
        close(h->fd);
        h->fd = -1;
      } else {
        srv_expire_pending(s, UINT64_MAX);
      }
      break;
  }
}

/* One round of what the server thread does for a connection. */
static void serve_conn(symm_store_server_t *s, srv_conn_t *c) {
  if (c->dead) return;
  if (srv_wants_input(s, c)) srv_read(s, c);
  if (!c->dead) srv_process(s, c);
  /* Answers to its parked request made while serving another connection. */
  if (!c->dead && c->out_start < c->out.len) srv_flush(s, c);
}

static void serve(symm_store_server_t *s, srv_conn_t *c, int client, helper_t *h,
                  const uint8_t *data, size_t size) {
  request_list_t requests = {.data = data, .size = size, .model = {NULL, 0, 0}};
  reply_reader_t rr = {.head = {0}, .requests = &requests};
  size_t sent = 0;
  bool shut = false;
  unsigned stalls = 0, releases = 0;
  while (!c->dead) {
    bool progress = false;
    if (sent < size) {
      ssize_t n = send(client, data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += (size_t)n;
        progress = true;
      }
    } else if (!shut) {
      shutdown(client, SHUT_WR);
      shut = progress = true;
    }
    size_t before = c->in_len - c->in_start;
    bool was_pending = c->pending != NULL, helper_was_dead = h->conn->dead;
    serve_conn(s, c);
    serve_conn(s, h->conn);
    if (c->dead || c->in_len - c->in_start != before || was_pending != (c->pending != NULL) ||
        helper_was_dead != h->conn->dead)
      progress = true;
    if (drain_replies(client, &rr)) progress = true;
    if (helper_drain(h)) progress = true;
    if (progress) {
      stalls = 0;
      continue;
    }
    if (c->pending) {
      release_parked(s, c, h, &requests.model, releases++);
      continue;
    }
    if (++stalls > FUZZ_STALL_ROUNDS) {
      fprintf(stderr, "fuzz-store: connection stuck (%zu of %zu bytes sent, %zu buffered, "
              "%zu unsent, closing %d)\n", sent, size, c->in_len - c->in_start,
              c->out.len - c->out_start, c->closing);
      __builtin_trap();
    }
  }
  drain_replies(client, &rr);
  free(rr.body);
  model_free(&requests.model);
}

/* Connects a client to the listener and has s accept it: the new
 * connection is s's last. */
static srv_conn_t *connect_client(symm_store_server_t *s, int *client) {
  *client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*client < 0 || connect(*client, (struct sockaddr *)&listen_addr, listen_len) != 0) abort();
  /* Replies are read by the loop, but a big buffer keeps the rounds few. */
  int big = 1 << 20;
  setsockopt(*client, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  size_t before = s->nconns;
  s->listen_fd = listener;
  srv_accept(s);
  s->listen_fd = -1; /* the listener is this file's, not the server's */
  if (s->nconns != before + 1) abort();
  return s->conns[before];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  symm_store_server_t *s = srv_new(FUZZ_TOKEN);
  if (!s) return 0;
  s->fixed_nonce = true;
  int client;
  srv_conn_t *c = connect_client(s, &client);
  helper_t h = {.fd = -1, .next_id = 1};
  h.conn = connect_client(s, &h.fd);
  helper_hello(&h);
  serve(s, c, client, &h, data, size);
  close(client);
  if (h.fd >= 0) close(h.fd);
  /* What is left goes as the server thread leaves it when stopped. */
  for (size_t i = 0; i < s->nconns; i++) srv_conn_close(s, s->conns[i], true);
  srv_remove_dead(s);
  srv_free(s);
  return 0;
}
