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
 * Checked besides the sanitizers: every reply the server sends is framed
 * (magic, version, the reply flag on a known opcode, a body of at least
 * the status prefix and at most SYMM_PROTO_MAX_REPLY) and carries a
 * known status, with a lost rank only for PEER_LOST or PERMISSION; the
 * replies answer the input's requests in order, one each (the server
 * serves a connection's requests one at a time); and the connection
 * always ends (a stall is reported as a crash). */
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

/* The requests of the input, as its headers frame it: what the replies
 * must answer, in this order. */
typedef struct request_list {
  const uint8_t *data;
  size_t size;
  size_t next; /* offset of the header of the next request to be answered */
} request_list_t;

/* What the client end has read of the replies so far: the header and the
 * status prefix of the current one, then the rest of its body. */
#define REPLY_HEAD (SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_REPLY_PREFIX)
typedef struct reply_reader {
  uint8_t head[REPLY_HEAD];
  size_t have;   /* bytes of head */
  uint64_t skip; /* body bytes of the current reply still to come */
  request_list_t *requests;
} reply_reader_t;

static void bad_reply(const char *what, const symm_proto_header_t *h) {
  fprintf(stderr, "fuzz-store: %s (reply opcode %#x, id %u, body %u bytes)\n", what, h->opcode,
          h->id, h->body_len);
  __builtin_trap();
}

static void check_reply(const uint8_t *p, request_list_t *rq) {
  symm_proto_header_t h;
  symm_proto_decode_header(p, &h);
  unsigned op = h.opcode & ~SYMM_PROTO_REPLY_FLAG;
  if (h.magic != SYMM_PROTO_MAGIC || h.version != SYMM_PROTO_VERSION || h.reserved != 0 ||
      !(h.opcode & SYMM_PROTO_REPLY_FLAG) || op == 0 || op >= SYMM_OP_COUNT_ ||
      op == SYMM_OP_BYE || h.body_len < SYMM_PROTO_REPLY_PREFIX ||
      h.body_len > SYMM_PROTO_MAX_REPLY)
    bad_reply("malformed reply header", &h);
  uint32_t status = symm_proto_get32(p + SYMM_PROTO_HEADER_BYTES);
  int32_t lost = (int32_t)symm_proto_get32(p + SYMM_PROTO_HEADER_BYTES + 4);
  if (status > SYMM_ERR_BACKEND_UNAVAILABLE) bad_reply("unknown status", &h);
  if (lost != -1 && status != SYMM_ERR_PEER_LOST && status != SYMM_ERR_PERMISSION)
    bad_reply("a lost rank without a loss", &h);
  if (status == SYMM_SUCCESS && h.body_len == SYMM_PROTO_REPLY_PREFIX &&
      (op == SYMM_OP_GET || op == SYMM_OP_ADD || op == SYMM_OP_CAS || op == SYMM_OP_MGET ||
       op == SYMM_OP_CHECK))
    bad_reply("success without its payload", &h);
  if (rq->next + SYMM_PROTO_HEADER_BYTES > rq->size) bad_reply("a reply to no request", &h);
  symm_proto_header_t req;
  symm_proto_decode_header(rq->data + rq->next, &req);
  if (req.opcode != op || req.id != h.id) bad_reply("a reply out of order", &h);
  rq->next += SYMM_PROTO_HEADER_BYTES + (size_t)req.body_len;
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
      if (rr->skip) {
        size_t k = (size_t)n - i < rr->skip ? (size_t)n - i : (size_t)rr->skip;
        rr->skip -= k;
        i += k;
        continue;
      }
      rr->head[rr->have++] = buf[i++];
      if (rr->have == SYMM_PROTO_HEADER_BYTES &&
          symm_proto_get32(rr->head + 12) < SYMM_PROTO_REPLY_PREFIX)
        check_reply(rr->head, rr->requests); /* fails: too short for a reply */
      if (rr->have == REPLY_HEAD) {
        check_reply(rr->head, rr->requests);
        rr->skip = symm_proto_get32(rr->head + 12) - SYMM_PROTO_REPLY_PREFIX;
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

static void helper_hello(helper_t *h) {
  symm_proto_buf_t b = {0};
  size_t at = symm_proto_begin(&b, SYMM_OP_HELLO, h->next_id++);
  symm_proto_put_key(&b, FUZZ_TOKEN, strlen(FUZZ_TOKEN));
  symm_proto_put_i32(&b, 1);
  symm_proto_finish(&b, at);
  helper_send(h, &b);
}

static void helper_set(helper_t *h, const char *key, uint16_t len) {
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
static void release_parked(symm_store_server_t *s, srv_conn_t *c, helper_t *h, unsigned round) {
  const srv_pending_t *p = c->pending;
  switch (round % 4) {
    case 0: srv_expire_pending(s, UINT64_MAX); break;
    case 1:
      if (h->fd >= 0 && h->conn->authed && !h->conn->dead) {
        helper_set(h, p->keys[p->next_missing].key, p->keys[p->next_missing].len);
        break;
      }
      /* fall through: no helper to write it */
    case 2: srv_mark_lost(s, c->comm, (int)(round / 4 % 4), "lost by the fuzzer"); break;
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
}

static void serve(symm_store_server_t *s, srv_conn_t *c, int client, helper_t *h,
                  const uint8_t *data, size_t size) {
  request_list_t requests = {data, size, 0};
  reply_reader_t rr = {{0}, 0, 0, &requests};
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
      release_parked(s, c, h, releases++);
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
  int client;
  srv_conn_t *c = connect_client(s, &client);
  helper_t h = {-1, NULL, 1};
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
