/* libFuzzer target: the store server's request handling.  The input is one
 * connection's byte stream.  A server made by srv_new (key table and
 * token, no thread) accepts the connection from a Unix socket through the
 * real srv_accept; the loop below then does what the server thread's loop
 * does for one connection (srv_read, srv_process, srv_flush) while the
 * client end sends the input and reads the replies.  A request that parks
 * (GET, WAIT, MGET on missing keys) is released the two ways the thread
 * releases it: its deadline passing, or a rank marked lost.
 *
 * Checked besides the sanitizers: every reply the server sends is framed
 * (magic, version, the reply flag on a known opcode, a body of at least
 * the status prefix and at most SYMM_PROTO_MAX_REPLY), and the connection
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

/* What the client end has read of the replies so far. */
typedef struct reply_reader {
  uint8_t head[SYMM_PROTO_HEADER_BYTES];
  size_t have;     /* bytes of the current header */
  uint64_t skip;   /* body bytes of the current reply still to come */
} reply_reader_t;

static void check_reply_header(const uint8_t *p) {
  symm_proto_header_t h;
  symm_proto_decode_header(p, &h);
  unsigned op = h.opcode & ~SYMM_PROTO_REPLY_FLAG;
  if (h.magic != SYMM_PROTO_MAGIC || h.version != SYMM_PROTO_VERSION || h.reserved != 0 ||
      !(h.opcode & SYMM_PROTO_REPLY_FLAG) || op == 0 || op >= SYMM_OP_COUNT_ ||
      op == SYMM_OP_BYE || h.body_len < SYMM_PROTO_REPLY_PREFIX ||
      h.body_len > SYMM_PROTO_MAX_REPLY) {
    fprintf(stderr, "fuzz-store: malformed reply header (opcode %#x, body %u)\n", h.opcode,
            h.body_len);
    __builtin_trap();
  }
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
      if (rr->have == SYMM_PROTO_HEADER_BYTES) {
        check_reply_header(rr->head);
        rr->skip = symm_proto_get32(rr->head + 12);
        rr->have = 0;
      }
    }
  }
}

/* Releases a parked request as the server thread would: by turns its
 * deadline passes, or a rank of its communicator is lost. */
static void release_parked(symm_store_server_t *s, srv_conn_t *c, unsigned round) {
  if (round % 2 == 0)
    srv_expire_pending(s, UINT64_MAX);
  else
    srv_mark_lost(s, c->comm, (int)(round / 2 % 4), "lost by the fuzzer");
}

static void serve(symm_store_server_t *s, srv_conn_t *c, int client, const uint8_t *data,
                  size_t size) {
  reply_reader_t rr = {{0}, 0, 0};
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
    bool was_pending = c->pending != NULL;
    if (srv_wants_input(s, c)) srv_read(s, c);
    if (!c->dead) srv_process(s, c);
    if (c->dead || c->in_len - c->in_start != before || was_pending != (c->pending != NULL))
      progress = true;
    if (drain_replies(client, &rr)) progress = true;
    if (progress) {
      stalls = 0;
      continue;
    }
    if (c->pending) {
      release_parked(s, c, releases++);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  symm_store_server_t *s = srv_new(FUZZ_TOKEN);
  if (!s) return 0;
  int client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0 || connect(client, (struct sockaddr *)&listen_addr, listen_len) != 0) abort();
  /* Replies must not fill the socket while the loop sends: the loop reads
   * them, but a big buffer keeps the rounds few. */
  int big = 1 << 20;
  setsockopt(client, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  s->listen_fd = listener;
  srv_accept(s);
  s->listen_fd = -1; /* the listener is this file's, not the server's */
  if (s->nconns != 1) abort();
  serve(s, s->conns[0], client, data, size);
  close(client);
  srv_remove_dead(s);
  srv_free(s);
  return 0;
}
