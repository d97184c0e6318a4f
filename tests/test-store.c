/* Tests of the embedded key-value store: client API semantics, timeouts,
 * lost ranks, and a server that survives malformed and hostile peers. */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "bootstrap/store_proto.h"
#include "harness.h"

static const char *const k_token = "store-test-token-0123456789";

/* ---------------------------------------------------------------- fixture */
typedef struct fixture {
  symm_store_server_t *server;
  int port;
  char addr[64];
} fixture_t;

static void fx_start(fixture_t *f) {
  ASSERT_OK(symm_store_server_start("127.0.0.1", 0, k_token, &f->server));
  f->port = symm_store_server_port(f->server);
  ASSERT_GT(f->port, 0);
  snprintf(f->addr, sizeof f->addr, "127.0.0.1:%d", f->port);
}

static void fx_stop(fixture_t *f) {
  symm_store_server_stop(f->server);
  f->server = NULL;
}

static symm_store_t *fx_client(const fixture_t *f, int rank) {
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(f->addr, k_token, rank, 5000, &s));
  ASSERT(s != NULL);
  return s;
}

/* A fresh well-behaved client can still do a round trip. */
static void fx_check_alive(const fixture_t *f) {
  static int n;
  char key[64], val[64], got[64];
  snprintf(key, sizeof key, "alive/%d", n);
  snprintf(val, sizeof val, "value-%d", n++);
  symm_store_t *s = fx_client(f, -1);
  ASSERT_OK(symm_store_set(s, key, val, strlen(val)));
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, key, got, sizeof got, &len, 1000));
  ASSERT_EQ(len, strlen(val));
  ASSERT(memcmp(got, val, len) == 0);
  symm_store_close(s);
}

/* Waits until the server has n requests parked: a test orders the write
 * that answers a blocking request after that request is parked. */
static void wait_parked(const fixture_t *f, int n) {
  ASSERT_OK(symm_store_server_wait_parked(f->server, n, 10000));
}

static void get_str(symm_store_t *s, const char *key, const char *expect) {
  char buf[256];
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, key, buf, sizeof buf, &len, 1000));
  ASSERT_EQ(len, strlen(expect));
  ASSERT(memcmp(buf, expect, len) == 0);
}

/* ------------------------------------------------------------ raw sockets */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Sends what the socket takes; a server that already hung up is fine. */
static void raw_send(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    b += k;
    n -= (size_t)k;
  }
}

/* Milliseconds until the server closes fd (EOF or reset), discarding what
 * it sends; -1 if still open after timeout_ms. */
static int raw_wait_closed(int fd, int timeout_ms) {
  uint64_t start = test_now_ms();
  for (;;) {
    int left = timeout_ms - (int)(test_now_ms() - start);
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) continue;
    char sink[4096];
    ssize_t n = recv(fd, sink, sizeof sink, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      return (int)(test_now_ms() - start);
  }
}

/* The server closes fd (within 3 s); then ours goes too. */
static void raw_expect_hangup(int fd) {
  ASSERT_GE(raw_wait_closed(fd, 3000), 0);
  close(fd);
}

/* Encodes a message with an arbitrary body into out; returns its size. */
static size_t raw_msg(uint8_t *out, uint8_t op, const void *body, uint32_t len) {
  symm_proto_encode_header(out, op, 7, len);
  if (len) memcpy(out + SYMM_PROTO_HEADER_BYTES, body, len);
  return SYMM_PROTO_HEADER_BYTES + len;
}

/* The client nonce of every raw handshake. */
static const uint8_t k_raw_nonce[SYMM_PROTO_NONCE] = {0x11, 0x22, 0x33};

/* HELLO as rank `rank` (no communicator), with k_raw_nonce. */
static size_t raw_hello_msg(uint8_t *out, int rank) {
  uint8_t body[SYMM_PROTO_NONCE + 4];
  memcpy(body, k_raw_nonce, SYMM_PROTO_NONCE);
  symm_proto_put32(body + SYMM_PROTO_NONCE, (uint32_t)rank);
  return raw_msg(out, SYMM_OP_HELLO, body, (uint32_t)sizeof body);
}

/* AUTH answering the challenge server_nonce with the proof made from token. */
static size_t raw_auth_msg(uint8_t *out, const char *token,
                           const uint8_t server_nonce[SYMM_PROTO_NONCE]) {
  uint8_t proof[SYMM_PROTO_PROOF];
  symm_proto_proof(token, strlen(token), SYMM_PROTO_CLIENT_LABEL, server_nonce, k_raw_nonce,
                   proof);
  return raw_msg(out, SYMM_OP_AUTH, proof, sizeof proof);
}

static void raw_recv_all(int fd, void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    ASSERT_GT(poll(&pf, 1, 5000), 0);
    ssize_t k = recv(fd, p, n, 0);
    ASSERT_GT(k, 0);
    p += k;
    n -= (size_t)k;
  }
}

/* Reads one reply; returns its status, body (after status/lost rank)
 * length in *len, copying at most cap bytes of it. */
static uint32_t raw_reply(int fd, uint8_t op, void *payload, size_t cap, size_t *len) {
  uint8_t hdr[SYMM_PROTO_HEADER_BYTES];
  raw_recv_all(fd, hdr, sizeof hdr);
  symm_proto_header_t h;
  symm_proto_decode_header(hdr, &h);
  ASSERT_EQ(h.magic, SYMM_PROTO_MAGIC);
  ASSERT_EQ(h.opcode, op | SYMM_PROTO_REPLY_FLAG);
  ASSERT_GE(h.body_len, SYMM_PROTO_REPLY_PREFIX);
  uint8_t prefix[SYMM_PROTO_REPLY_PREFIX];
  raw_recv_all(fd, prefix, sizeof prefix);
  size_t rest = h.body_len - SYMM_PROTO_REPLY_PREFIX;
  if (len) *len = rest;
  uint8_t sink[4096];
  while (rest > 0) {
    size_t take = rest < sizeof sink ? rest : sizeof sink;
    raw_recv_all(fd, sink, take);
    if (payload && cap) {
      size_t c = take < cap ? take : cap;
      memcpy(payload, sink, c);
      payload = (uint8_t *)payload + c;
      cap -= c;
    }
    rest -= take;
  }
  return symm_proto_get32(prefix);
}

/* Reads the answer to a HELLO sent on fd: its challenge into
 * server_nonce, after checking that the server proved token. */
static void raw_challenge(int fd, const char *token, uint8_t server_nonce[SYMM_PROTO_NONCE]) {
  uint8_t payload[SYMM_PROTO_NONCE + SYMM_PROTO_PROOF], proof[SYMM_PROTO_PROOF];
  size_t len = 0;
  ASSERT_EQ(raw_reply(fd, SYMM_OP_HELLO, payload, sizeof payload, &len), SYMM_SUCCESS);
  ASSERT_EQ(len, sizeof payload);
  memcpy(server_nonce, payload, SYMM_PROTO_NONCE);
  symm_proto_proof(k_token, strlen(k_token), SYMM_PROTO_SERVER_LABEL, server_nonce, k_raw_nonce,
                   proof);
  ASSERT(memcmp(proof, payload + SYMM_PROTO_NONCE, sizeof proof) == 0);
  (void)token;
}

/* The whole handshake on fd as rank `rank`, proving `token`; returns the
 * answer to AUTH. */
static uint32_t raw_handshake(int fd, const char *token, int rank) {
  uint8_t msg[128], nonce[SYMM_PROTO_NONCE];
  raw_send(fd, msg, raw_hello_msg(msg, rank));
  raw_challenge(fd, token, nonce);
  raw_send(fd, msg, raw_auth_msg(msg, token, nonce));
  return raw_reply(fd, SYMM_OP_AUTH, NULL, 0, NULL);
}

/* A raw connection that has proved the token as a tool. */
static int raw_authed(const fixture_t *f) {
  int fd = raw_connect(f->port);
  ASSERT_EQ(raw_handshake(fd, k_token, -1), SYMM_SUCCESS);
  return fd;
}

/* Reads one message from fd into hdr/body (cap bytes); false at EOF. */
static bool fake_read_msg(int fd, symm_proto_header_t *h, uint8_t *body, size_t cap) {
  uint8_t hdr[SYMM_PROTO_HEADER_BYTES];
  size_t got = 0;
  while (got < sizeof hdr) {
    ssize_t k = recv(fd, hdr + got, sizeof hdr - got, 0);
    if (k <= 0) return false;
    got += (size_t)k;
  }
  symm_proto_decode_header(hdr, h);
  ASSERT_LE(h->body_len, cap);
  raw_recv_all(fd, body, h->body_len);
  return true;
}

/* Sends a reply to (op, id) with status and payload. */
static void fake_reply(int fd, uint8_t op, uint32_t id, uint32_t status, const void *payload,
                       size_t len) {
  uint8_t msg[SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_REPLY_PREFIX + 128];
  symm_proto_encode_header(msg, op | SYMM_PROTO_REPLY_FLAG, id,
                           (uint32_t)(SYMM_PROTO_REPLY_PREFIX + len));
  symm_proto_put32(msg + SYMM_PROTO_HEADER_BYTES, status);
  symm_proto_put32(msg + SYMM_PROTO_HEADER_BYTES + 4, (uint32_t)-1);
  if (len) memcpy(msg + SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_REPLY_PREFIX, payload, len);
  raw_send(fd, msg, SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_REPLY_PREFIX + len);
}

/* A store's side of the handshake on fd, by a test's listener: answers
 * HELLO with a nonce and a proof made from `token` (NULL: random bytes, as
 * one who does not know it must), then takes the AUTH that follows, if
 * any, as good.  Every byte the client sent is appended to seen (cap
 * bytes; NULL: not kept).  false if the client hung up instead of AUTH. */
static bool fake_store_handshake(int fd, const char *token, uint8_t *seen, size_t cap) {
  symm_proto_header_t h;
  uint8_t body[512];
  ASSERT(fake_read_msg(fd, &h, body, sizeof body));
  ASSERT_EQ(h.opcode, SYMM_OP_HELLO);
  ASSERT_GE(h.body_len, SYMM_PROTO_NONCE);
  size_t kept = 0;
  if (seen) {
    ASSERT_LE(SYMM_PROTO_HEADER_BYTES + h.body_len, cap);
    symm_proto_encode_header(seen, h.opcode, h.id, h.body_len);
    memcpy(seen + SYMM_PROTO_HEADER_BYTES, body, h.body_len);
    kept = SYMM_PROTO_HEADER_BYTES + h.body_len;
  }
  uint8_t answer[SYMM_PROTO_NONCE + SYMM_PROTO_PROOF];
  symm_random_bytes(answer, sizeof answer);
  if (token)
    symm_proto_proof(token, strlen(token), SYMM_PROTO_SERVER_LABEL, answer, body,
                     answer + SYMM_PROTO_NONCE);
  fake_reply(fd, SYMM_OP_HELLO, h.id, SYMM_SUCCESS, answer, sizeof answer);
  if (!fake_read_msg(fd, &h, body, sizeof body)) return false;
  if (seen && kept + SYMM_PROTO_HEADER_BYTES + h.body_len <= cap) {
    symm_proto_encode_header(seen + kept, h.opcode, h.id, h.body_len);
    memcpy(seen + kept + SYMM_PROTO_HEADER_BYTES, body, h.body_len);
  }
  ASSERT_EQ(h.opcode, SYMM_OP_AUTH);
  fake_reply(fd, SYMM_OP_AUTH, h.id, SYMM_SUCCESS, NULL, 0);
  return true;
}

/* Body of a GET: key, timeout. */
static uint32_t raw_get_body(uint8_t *b, const char *key, int32_t timeout) {
  size_t kl = strlen(key);
  symm_proto_put16(b, (uint16_t)kl);
  memcpy(b + 2, key, kl);
  symm_proto_put32(b + 2 + kl, (uint32_t)timeout);
  return (uint32_t)(2 + kl + 4);
}

/* ------------------------------------------------------------ threads */
/* Sets (or deletes) key once the waiting request is parked. */
typedef struct setter_arg {
  const fixture_t *f;
  const char *key;
  const char *value; /* NULL: delete the key instead */
} setter_arg_t;

static void *setter_thread(void *p) {
  setter_arg_t *a = p;
  symm_store_t *s = fx_client(a->f, -1);
  wait_parked(a->f, 1);
  if (a->value)
    ASSERT_OK(symm_store_set(s, a->key, a->value, strlen(a->value)));
  else
    ASSERT_OK(symm_store_delete(s, a->key));
  symm_store_close(s);
  return NULL;
}

/* Writes a byte to fd once the server has a request parked: for a process
 * of the test that must act after the test's own request is parked. */
typedef struct parked_note {
  const fixture_t *f;
  int fd;
} parked_note_t;

static void *parked_note_thread(void *p) {
  parked_note_t *a = p;
  wait_parked(a->f, 1);
  ASSERT_EQ(write(a->fd, "p", 1), 1);
  return NULL;
}

typedef struct getter_arg {
  symm_store_t *s;
  const char *key;
  int timeout_ms;
  symm_result_t res;
  uint64_t elapsed_ms;
  char err[512];
} getter_arg_t;

static void *getter_thread(void *p) {
  getter_arg_t *a = p;
  char buf[64];
  size_t len;
  uint64_t t0 = test_now_ms();
  a->res = symm_store_get(a->s, a->key, buf, sizeof buf, &len, a->timeout_ms);
  a->elapsed_ms = test_now_ms() - t0;
  snprintf(a->err, sizeof a->err, "%s", symm_last_error());
  return NULL;
}

/* ------------------------------------------------------------------ tests */
TEST_IMPL(store_parse_addr) {
  char host[64];
  int port = 0;
  ASSERT_OK(symm_store_parse_addr("10.1.2.3:29500", host, sizeof host, &port));
  ASSERT_STR_CONTAINS(host, "10.1.2.3");
  ASSERT_EQ(port, 29500);
  ASSERT_OK(symm_store_parse_addr("[fe80::1]:80", host, sizeof host, &port));
  ASSERT_EQ(strcmp(host, "fe80::1"), 0);
  ASSERT_EQ(port, 80);
  ASSERT_OK(symm_store_parse_addr("::1:1234", host, sizeof host, &port));
  ASSERT_EQ(strcmp(host, "::1"), 0);
  ASSERT_EQ(port, 1234);
  ASSERT_OK(symm_store_parse_addr("node-7.cluster:65535", host, sizeof host, &port));
  ASSERT_EQ(strcmp(host, "node-7.cluster"), 0);
  ASSERT_RES(symm_store_parse_addr("nohost", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr(":80", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("h:", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("h:0", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("h:65536", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("h:12x", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("[::1]80", host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr("abcdefgh:1", host, 4, &port), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_parse_addr(NULL, host, sizeof host, &port), SYMM_ERR_INVALID_ARG);
  return 0;
}

TEST_IMPL(store_bad_args) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, -1);
  char key256[257], key255[256], buf[8];
  memset(key256, 'k', 256);
  key256[256] = 0;
  memset(key255, 'k', 255);
  key255[255] = 0;
  size_t len;
  int present;
  const char *keys[1] = {NULL};

  ASSERT_RES(symm_store_set(NULL, "k", "v", 1), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_set(s, NULL, "v", 1), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_set(s, "", "v", 1), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_set(s, key256, "v", 1), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "key length");
  ASSERT_RES(symm_store_set(s, "k", NULL, 5), SYMM_ERR_INVALID_ARG);
  /* symm/ is the library's own prefix: no write from the application. */
  ASSERT_RES(symm_store_set(s, "symm/c0/x", "v", 1), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "symmem's own prefix");
  ASSERT_RES(symm_store_add(s, "symm/c0/n", 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_compare_set(s, "symm/c0/x", NULL, 0, "v", 1, NULL, 0, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_delete(s, "symm/c0/x"), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_store_set(s, "symmetric/x", "v", 1)); /* only the prefix itself */
  ASSERT_OK(symm_store_set(s, key255, "v", 1));
  get_str(s, key255, "v");
  ASSERT_RES(symm_store_get(s, "k", NULL, 5, &len, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_get(s, "k", buf, sizeof buf, NULL, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_wait(s, NULL, 1, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_wait(s, keys, 1, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_wait(s, keys, SYMM_STORE_MAX_KEYS + 1, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_check(s, keys, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_check(s, keys, 1, &present), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_multi_get(s, keys, 1, NULL, NULL, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_compare_set(s, "k", NULL, 3, "d", 1, NULL, 0, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_add(s, NULL, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_delete(s, ""), SYMM_ERR_INVALID_ARG);
  /* Argument errors never reach the server, so the handle stays usable. */
  get_str(s, key255, "v");

  symm_store_t *out = (symm_store_t *)&f; /* must be reset to NULL */
  ASSERT_RES(symm_store_connect("127.0.0.1", k_token, 0, 100, &out), SYMM_ERR_INVALID_ARG);
  ASSERT(out == NULL);
  ASSERT_RES(symm_store_connect(f.addr, k_token, -2, 100, &out), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_connect(f.addr, k_token, 0, 100, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_server_start(NULL, 0, k_token, NULL), SYMM_ERR_INVALID_ARG);
  symm_store_server_t *srv = NULL;
  ASSERT_RES(symm_store_server_start(NULL, 70000, k_token, &srv), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_store_server_start("127.0.0.1", f.port, k_token, &srv), SYMM_ERR_SYSTEM);
  ASSERT(srv == NULL);
  symm_store_close(NULL);
  symm_store_abandon(NULL);
  symm_store_server_stop(NULL);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_set_get) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  char buf[64];
  size_t len = 99;

  ASSERT_RES(symm_store_get(s, "missing", buf, sizeof buf, &len, 0), SYMM_ERR_TIMEOUT);
  ASSERT_OK(symm_store_set(s, "a", "hello", 5));
  get_str(s, "a", "hello");
  ASSERT_OK(symm_store_set(s, "a", "a much longer value", 19));
  get_str(s, "a", "a much longer value");
  ASSERT_OK(symm_store_set(s, "a", "x", 1));
  get_str(s, "a", "x");

  const uint8_t bin[6] = {0, 1, 0, 255, 0, 7};
  ASSERT_OK(symm_store_set(s, "bin", bin, sizeof bin));
  ASSERT_OK(symm_store_get(s, "bin", buf, sizeof bin, &len, 0)); /* exact fit */
  ASSERT_EQ(len, sizeof bin);
  ASSERT(memcmp(buf, bin, sizeof bin) == 0);

  memset(buf, 'Z', sizeof buf);
  ASSERT_RES(symm_store_get(s, "bin", buf, 5, &len, 0), SYMM_ERR_NO_MEMORY);
  ASSERT_EQ(len, sizeof bin);
  ASSERT_EQ(buf[0], 'Z'); /* nothing copied */
  ASSERT_RES(symm_store_get(s, "bin", NULL, 0, &len, 0), SYMM_ERR_NO_MEMORY);

  ASSERT_OK(symm_store_set(s, "empty", NULL, 0));
  len = 99;
  ASSERT_OK(symm_store_get(s, "empty", NULL, 0, &len, 0));
  ASSERT_EQ(len, 0);
  symm_store_close(s);

  /* Values outlive the connection that set them. */
  s = fx_client(&f, 1);
  get_str(s, "a", "x");
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_add) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  int64_t v = 0;
  ASSERT_OK(symm_store_add(s, "ctr", 5, &v));
  ASSERT_EQ(v, 5);
  ASSERT_OK(symm_store_add(s, "ctr", -7, &v));
  ASSERT_EQ(v, -2);
  ASSERT_OK(symm_store_add(s, "ctr", 0, NULL));
  get_str(s, "ctr", "-2"); /* counters are decimal text */

  ASSERT_OK(symm_store_set(s, "ten", "10", 2));
  ASSERT_OK(symm_store_add(s, "ten", 32, &v));
  ASSERT_EQ(v, 42);

  ASSERT_OK(symm_store_set(s, "txt", "abc", 3));
  ASSERT_RES(symm_store_add(s, "txt", 1, &v), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "integer");
  get_str(s, "txt", "abc");
  ASSERT_OK(symm_store_set(s, "empty", NULL, 0));
  ASSERT_RES(symm_store_add(s, "empty", 1, &v), SYMM_ERR_INVALID_ARG);

  ASSERT_OK(symm_store_set(s, "max", "9223372036854775807", 19));
  ASSERT_RES(symm_store_add(s, "max", 1, &v), SYMM_ERR_INVALID_ARG);
  get_str(s, "max", "9223372036854775807");
  ASSERT_OK(symm_store_add(s, "max", -1, &v));
  ASSERT_EQ(v, INT64_MAX - 1);
  ASSERT_OK(symm_store_add(s, "min", INT64_MIN, &v));
  ASSERT_EQ(v, INT64_MIN);
  ASSERT_RES(symm_store_add(s, "min", -1, &v), SYMM_ERR_INVALID_ARG);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_compare_set) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  char buf[64];
  size_t len = 0;
  int present = -1;

  /* Absent expected: creates. */
  ASSERT_OK(symm_store_compare_set(s, "k", NULL, 0, "v1", 2, buf, sizeof buf, &len));
  ASSERT_EQ(len, 2);
  ASSERT(memcmp(buf, "v1", 2) == 0);
  /* Absent expected but present: no swap, current value returned. */
  ASSERT_OK(symm_store_compare_set(s, "k", NULL, 0, "v2", 2, buf, sizeof buf, &len));
  ASSERT(len == 2 && memcmp(buf, "v1", 2) == 0);
  ASSERT_OK(symm_store_compare_set(s, "k", "wrong", 5, "v3", 2, buf, sizeof buf, &len));
  ASSERT(len == 2 && memcmp(buf, "v1", 2) == 0);
  /* Matching: swapped. */
  ASSERT_OK(symm_store_compare_set(s, "k", "v1", 2, "value3", 6, buf, sizeof buf, &len));
  ASSERT(len == 6 && memcmp(buf, "value3", 6) == 0);
  get_str(s, "k", "value3");
  /* Small buffer: NO_MEMORY, but the swap happened. */
  ASSERT_RES(symm_store_compare_set(s, "k", "value3", 6, "v4", 2, buf, 1, &len),
             SYMM_ERR_NO_MEMORY);
  ASSERT_EQ(len, 2);
  get_str(s, "k", "v4");
  /* No buffer wanted. */
  ASSERT_OK(symm_store_compare_set(s, "k", "v4", 2, "v5", 2, NULL, 0, NULL));
  get_str(s, "k", "v5");
  /* Expected bytes on an absent key: nothing happens, *len 0. */
  len = 9;
  ASSERT_OK(symm_store_compare_set(s, "nokey", "x", 1, "y", 1, buf, sizeof buf, &len));
  ASSERT_EQ(len, 0);
  const char *keys[] = {"nokey"};
  ASSERT_OK(symm_store_check(s, keys, 1, &present));
  ASSERT_EQ(present, 0);
  /* An empty expected value (non-NULL, 0 bytes) matches an empty value,
   * not absence. */
  ASSERT_OK(symm_store_compare_set(s, "nokey", "", 0, "y", 1, NULL, 0, NULL));
  ASSERT_OK(symm_store_check(s, keys, 1, &present));
  ASSERT_EQ(present, 0);
  ASSERT_OK(symm_store_set(s, "e", "", 0));
  ASSERT_OK(symm_store_compare_set(s, "e", "", 0, "full", 4, buf, sizeof buf, &len));
  ASSERT(len == 4 && memcmp(buf, "full", 4) == 0);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_delete_check) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  int present = -1;
  char buf[8];
  size_t len;
  ASSERT_OK(symm_store_set(s, "k1", "1", 1));
  ASSERT_OK(symm_store_set(s, "k2", "2", 1));
  const char *both[] = {"k1", "k2"}, *mixed[] = {"k1", "k3"}, *one[] = {"k1"};
  ASSERT_OK(symm_store_check(s, both, 2, &present));
  ASSERT_EQ(present, 1);
  ASSERT_OK(symm_store_check(s, mixed, 2, &present));
  ASSERT_EQ(present, 0);
  ASSERT_OK(symm_store_delete(s, "k1"));
  ASSERT_RES(symm_store_delete(s, "k1"), SYMM_ERR_NOT_FOUND);
  ASSERT_STR_CONTAINS(symm_last_error(), "no such key");
  ASSERT_OK(symm_store_check(s, one, 1, &present));
  ASSERT_EQ(present, 0);
  ASSERT_RES(symm_store_get(s, "k1", buf, sizeof buf, &len, 0), SYMM_ERR_TIMEOUT);
  present = 0;
  ASSERT_OK(symm_store_check(s, NULL, 0, &present));
  ASSERT_EQ(present, 1);
  /* A deleted key can be set again. */
  ASSERT_OK(symm_store_set(s, "k1", "again", 5));
  get_str(s, "k1", "again");
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

/* Up to three writes (a NULL value deletes, a NULL key skips) made in
 * order once a wait is parked; parked_after[i]: requests still parked
 * after write i, which the server has handled when the write returns. */
typedef struct ws_arg {
  const fixture_t *f;
  struct {
    const char *key, *value;
  } step[3];
  int parked_after[3];
} ws_arg_t;

static void *wait_steps_thread(void *p) {
  ws_arg_t *a = p;
  symm_store_t *s = fx_client(a->f, -1);
  wait_parked(a->f, 1);
  for (int i = 0; i < 3; i++) {
    if (!a->step[i].key) continue;
    if (a->step[i].value)
      ASSERT_OK(symm_store_set(s, a->step[i].key, a->step[i].value, strlen(a->step[i].value)));
    else
      ASSERT_OK(symm_store_delete(s, a->step[i].key));
    a->parked_after[i] = symm_store_server_parked(a->f->server);
  }
  symm_store_close(s);
  return NULL;
}

TEST_IMPL(store_wait) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  ASSERT_OK(symm_store_set(s, "a", "1", 1));
  ASSERT_OK(symm_store_set(s, "b", "2", 1));
  const char *ab[] = {"a", "b"}, *xy[] = {"x", "y"}, *pq[] = {"p", "q"};
  uint64_t t0 = test_now_ms();
  ASSERT_OK(symm_store_wait(s, ab, 2, 5000));
  ASSERT_LT(test_now_ms() - t0, 1000);
  ASSERT_OK(symm_store_wait(s, NULL, 0, 0));

  t0 = test_now_ms();
  ASSERT_RES(symm_store_wait(s, xy, 2, 300), SYMM_ERR_TIMEOUT);
  ASSERT_GE(test_now_ms() - t0, 280);

  /* Keys set by others after the wait is parked: one does not end it. */
  pthread_t tx;
  ws_arg_t ax = {.f = &f, .step = {{.key = "x", .value = "X"}, {0}, {.key = "y", .value = "Y"}}};
  pthread_create(&tx, NULL, wait_steps_thread, &ax);
  ASSERT_OK(symm_store_wait(s, xy, 2, 5000));
  pthread_join(tx, NULL);
  ASSERT_EQ(ax.parked_after[0], 1); /* still parked after x alone */

  /* A key seen present and then deleted while the wait is parked must be
   * waited for again: q appearing after p went must not end the wait. */
  ASSERT_OK(symm_store_set(s, "p", "1", 1));
  ws_arg_t ap = {.f = &f,
                 .step = {{.key = "p"}, {.key = "q", .value = "Q"}, {.key = "p", .value = "P"}}};
  pthread_create(&tx, NULL, wait_steps_thread, &ap);
  ASSERT_OK(symm_store_wait(s, pq, 2, 5000));
  pthread_join(tx, NULL);
  ASSERT_EQ(ap.parked_after[0], 1);
  ASSERT_EQ(ap.parked_after[1], 1); /* q came while p was gone */
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_get_waits_thread) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  pthread_t t;
  setter_arg_t a = {.f = &f, .key = "later", .value = "arrived"};
  pthread_create(&t, NULL, setter_thread, &a);
  char buf[32];
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, "later", buf, sizeof buf, &len, 5000));
  ASSERT_EQ(len, 7);
  ASSERT(memcmp(buf, "arrived", 7) == 0);
  pthread_join(t, NULL);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_get_waits_process) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  int parked[2];
  ASSERT_EQ(pipe(parked), 0);
  pid_t pid = test_fork();
  if (pid == 0) {
    symm_store_t *c = NULL;
    char b;
    if (symm_store_connect(f.addr, k_token, 1, 5000, &c) != SYMM_SUCCESS) _exit(3);
    if (read(parked[0], &b, 1) != 1) _exit(5); /* the parent's GET is parked */
    int rc = symm_store_set(c, "from-child", "hi parent", 9) == SYMM_SUCCESS ? 0 : 4;
    symm_store_close(c);
    _exit(rc);
  }
  pthread_t note;
  parked_note_t pn = {.f = &f, .fd = parked[1]};
  pthread_create(&note, NULL, parked_note_thread, &pn);
  char buf[32];
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, "from-child", buf, sizeof buf, &len, 10000));
  pthread_join(note, NULL);
  close(parked[0]);
  close(parked[1]);
  ASSERT_EQ(len, 9);
  ASSERT(memcmp(buf, "hi parent", 9) == 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_timeouts) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  char buf[8];
  size_t len;
  const char *keys[] = {"nope"};
  void *vals[1];
  size_t lens[1];

  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_get(s, "nope", buf, sizeof buf, &len, 300), SYMM_ERR_TIMEOUT);
  uint64_t el = test_now_ms() - t0;
  ASSERT_GE(el, 290);
  ASSERT_LT(el, 1300);
  ASSERT_STR_CONTAINS(symm_last_error(), "nope");

  t0 = test_now_ms();
  ASSERT_RES(symm_store_wait(s, keys, 1, 300), SYMM_ERR_TIMEOUT);
  el = test_now_ms() - t0;
  ASSERT_GE(el, 290);
  ASSERT_LT(el, 1300);

  t0 = test_now_ms();
  ASSERT_RES(symm_store_multi_get(s, keys, 1, vals, lens, 300), SYMM_ERR_TIMEOUT);
  el = test_now_ms() - t0;
  ASSERT_GE(el, 290);
  ASSERT_LT(el, 1300);
  ASSERT(vals[0] == NULL);

  t0 = test_now_ms();
  ASSERT_RES(symm_store_get(s, "nope", buf, sizeof buf, &len, 0), SYMM_ERR_TIMEOUT);
  ASSERT_LT(test_now_ms() - t0, 300);

  /* Negative: the handle's default. */
  symm_store_set_timeout(s, 400);
  t0 = test_now_ms();
  ASSERT_RES(symm_store_get(s, "nope", buf, sizeof buf, &len, -1), SYMM_ERR_TIMEOUT);
  el = test_now_ms() - t0;
  ASSERT_GE(el, 390);
  ASSERT_LT(el, 1400);

  /* A server-side timeout leaves the connection in sync and usable. */
  ASSERT_OK(symm_store_set(s, "nope", "now", 3));
  get_str(s, "nope", "now");
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_multi_get) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  ASSERT_OK(symm_store_set(s, "a", "alpha", 5));
  ASSERT_OK(symm_store_set(s, "b", "bb", 2));
  ASSERT_OK(symm_store_set(s, "c", NULL, 0));
  const char *keys[] = {"a", "b", "c", "a"};
  void *vals[4];
  size_t lens[4];
  ASSERT_OK(symm_store_multi_get(s, keys, 4, vals, lens, 0));
  ASSERT(lens[0] == 5 && memcmp(vals[0], "alpha", 5) == 0);
  ASSERT(lens[1] == 2 && memcmp(vals[1], "bb", 2) == 0);
  ASSERT_EQ(lens[2], 0);
  ASSERT(vals[2] != NULL);
  ASSERT(lens[3] == 5 && memcmp(vals[3], "alpha", 5) == 0);
  for (int i = 0; i < 4; i++) free(vals[i]);

  const char *late[] = {"a", "late", "b"};
  pthread_t t;
  setter_arg_t arg = {.f = &f, .key = "late", .value = "finally"};
  pthread_create(&t, NULL, setter_thread, &arg);
  ASSERT_OK(symm_store_multi_get(s, late, 3, vals, lens, 5000));
  ASSERT(lens[1] == 7 && memcmp(vals[1], "finally", 7) == 0);
  ASSERT(lens[2] == 2 && memcmp(vals[2], "bb", 2) == 0);
  for (int i = 0; i < 3; i++) free(vals[i]);
  pthread_join(t, NULL);

  const char *missing[] = {"a", "zzz"};
  vals[0] = vals[1] = (void *)1;
  ASSERT_RES(symm_store_multi_get(s, missing, 2, vals, lens, 100), SYMM_ERR_TIMEOUT);
  ASSERT(vals[0] == NULL && vals[1] == NULL); /* nothing allocated on error */
  ASSERT_STR_CONTAINS(symm_last_error(), "1 more key");
  ASSERT_OK(symm_store_multi_get(s, NULL, 0, NULL, NULL, 0));
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_max_sizes) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  size_t max = SYMM_STORE_MAX_VALUE;
  uint8_t *big = malloc(max + 1), *back = malloc(max + 1);
  ASSERT(big && back);
  for (size_t i = 0; i <= max; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);

  ASSERT_OK(symm_store_set(s, "big", big, max));
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, "big", back, max + 1, &len, 0));
  ASSERT_EQ(len, max);
  ASSERT(memcmp(big, back, max) == 0);
  ASSERT_RES(symm_store_set(s, "big", big, max + 1), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "limit");
  ASSERT_RES(symm_store_compare_set(s, "big", big, max + 1, "x", 1, NULL, 0, NULL),
             SYMM_ERR_INVALID_ARG);

  /* Two maximal values in one CAS request (the largest request). */
  big[0] ^= 0xff;
  ASSERT_OK(symm_store_compare_set(s, "big", back, max, big, max, back, max, &len));
  ASSERT_EQ(len, max);
  ASSERT(memcmp(big, back, max) == 0);

  /* Two maximal values in one MGET reply. */
  ASSERT_OK(symm_store_set(s, "big2", big, max));
  const char *keys[] = {"big", "big2"};
  void *vals[2];
  size_t lens[2];
  ASSERT_OK(symm_store_multi_get(s, keys, 2, vals, lens, 0));
  ASSERT(lens[0] == max && lens[1] == max);
  ASSERT(memcmp(vals[0], big, max) == 0 && memcmp(vals[1], big, max) == 0);
  free(vals[0]);
  free(vals[1]);

  /* A reply past SYMM_PROTO_MAX_REPLY (256 MiB): 17 maximal values.  The
   * server refuses it, and the connection stays usable. */
  const char *seventeen[17];
  void *v17[17];
  size_t l17[17];
  for (int i = 0; i < 17; i++) seventeen[i] = "big";
  ASSERT_RES(symm_store_multi_get(s, seventeen, 17, v17, l17, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "exceed the reply limit");
  /* 16 would need 256 MiB plus framing: 15 is the most that fits. */
  ASSERT_RES(symm_store_multi_get(s, seventeen, 16, v17, l17, 0), SYMM_ERR_INVALID_ARG);
  /* The keys exist: a long timeout only keeps a loaded machine from
   * failing the call while 240 MiB are being sent. */
  ASSERT_OK(symm_store_multi_get(s, seventeen, 15, v17, l17, 30000));
  for (int i = 0; i < 15; i++) {
    ASSERT_EQ(l17[i], max);
    free(v17[i]);
  }
  ASSERT_OK(symm_store_get(s, "big", back, max + 1, &len, 0));

  /* The maximal key count. */
  const char **many = malloc(SYMM_STORE_MAX_KEYS * sizeof *many);
  ASSERT(many);
  for (int i = 0; i < SYMM_STORE_MAX_KEYS; i++) many[i] = "big";
  int present = 0;
  ASSERT_OK(symm_store_check(s, many, SYMM_STORE_MAX_KEYS, &present));
  ASSERT_EQ(present, 1);
  free(many);
  free(big);
  free(back);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

typedef struct worker_arg {
  const fixture_t *f;
  symm_store_t *shared; /* NULL: own connection */
  int id, ops;
  int failures;
} worker_arg_t;

static void *worker_thread(void *p) {
  worker_arg_t *a = p;
  symm_store_t *s = a->shared ? a->shared : fx_client(a->f, -1);
  for (int i = 0; i < a->ops; i++) {
    char key[64], val[64], got[64];
    snprintf(key, sizeof key, "w%d/%d", a->id, i % 50);
    int n = snprintf(val, sizeof val, "worker %d op %d", a->id, i);
    size_t len = 0;
    switch (i % 3) {
      case 0:
        if (symm_store_add(s, "counter", 1, NULL) != SYMM_SUCCESS) a->failures++;
        break;
      case 1:
        if (symm_store_set(s, key, val, (size_t)n) != SYMM_SUCCESS) a->failures++;
        if (symm_store_get(s, key, got, sizeof got, &len, 0) != SYMM_SUCCESS ||
            len != (size_t)n || memcmp(got, val, len) != 0)
          a->failures++;
        break;
      default: {
        const char *keys[] = {key};
        int present = 0;
        if (symm_store_check(s, keys, 1, &present) != SYMM_SUCCESS) a->failures++;
      }
    }
  }
  if (!a->shared) symm_store_close(s);
  return NULL;
}

static int64_t run_workers(const fixture_t *f, symm_store_t *shared, int nthreads,
                           int ops) {
  pthread_t t[16];
  worker_arg_t args[16];
  for (int i = 0; i < nthreads; i++) {
    args[i] = (worker_arg_t){f, shared, i, ops, 0};
    ASSERT_EQ(pthread_create(&t[i], NULL, worker_thread, &args[i]), 0);
  }
  int failures = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    failures += args[i].failures;
  }
  ASSERT_EQ(failures, 0);
  symm_store_t *s = fx_client(f, -1);
  int64_t counter = 0;
  ASSERT_OK(symm_store_add(s, "counter", 0, &counter));
  ASSERT_OK(symm_store_delete(s, "counter"));
  symm_store_close(s);
  return counter;
}

TEST_IMPL(store_concurrent_clients) {
  fixture_t f;
  fx_start(&f);
  int ops = 500;
  int64_t counter = run_workers(&f, NULL, 16, ops);
  ASSERT_EQ(counter, 16 * ((ops + 2) / 3));
  fx_stop(&f);
  return 0;
}

/* One handle shared by threads: the mutex keeps requests from interleaving
 * on the wire (a mix-up would show as wrong values or protocol errors). */
TEST_IMPL(store_shared_handle) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, -1);
  int ops = 300;
  int64_t counter = run_workers(&f, s, 8, ops);
  ASSERT_EQ(counter, 8 * ((ops + 2) / 3));
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_many_keys) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  enum { N = 100000 };
  char key[32];
  uint64_t t0 = test_now_ms();
  for (int i = 0; i < N; i++) {
    snprintf(key, sizeof key, "many/%d", i);
    ASSERT_OK(symm_store_set(s, key, &i, sizeof i));
  }
  uint64_t set_ms = test_now_ms() - t0;
  /* Lookups spread over the whole table. */
  for (int i = 0; i < N; i += 997) {
    int v = -1;
    size_t len;
    snprintf(key, sizeof key, "many/%d", i);
    ASSERT_OK(symm_store_get(s, key, &v, sizeof v, &len, 0));
    ASSERT_EQ(v, i);
  }
  static char names[N][16];
  const char **keys = malloc(N * sizeof *keys);
  ASSERT(keys);
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "many/%d", i);
    keys[i] = names[i];
  }
  int present = 0;
  ASSERT_OK(symm_store_check(s, keys, SYMM_STORE_MAX_KEYS, &present));
  ASSERT_EQ(present, 1);
  ASSERT_OK(symm_store_check(s, keys + SYMM_STORE_MAX_KEYS, N - SYMM_STORE_MAX_KEYS, &present));
  ASSERT_EQ(present, 1);
  t0 = test_now_ms();
  for (int i = 0; i < N; i++) ASSERT_OK(symm_store_delete(s, keys[i]));
  uint64_t del_ms = test_now_ms() - t0;
  for (int i = 0; i < N; i += 4999) {
    ASSERT_OK(symm_store_check(s, &keys[i], 1, &present));
    ASSERT_EQ(present, 0);
  }
  printf("100k keys: set %llu ms, delete %llu ms\n", (unsigned long long)set_ms,
         (unsigned long long)del_ms);
  /* Round trips dominate; a table that degraded to lists would be far
   * slower than this bound. */
  ASSERT_LT(set_ms, 60000);
  ASSERT_LT(del_ms, 60000);
  free(keys);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

/* ------------------------------------------------- refused connections
 * Anybody who can reach the store's port can send it a claim for any
 * rank with a wrong token: from this job's user, from another user, over
 * loopback or to the host's own address, closed or reset at once.  None of
 * them may end the job's waits (only authenticated connections speak for
 * the job's ranks), and none may cost the serving thread more than a
 * constant amount of work or log more than a few lines. */

/* Claims rank `rank` on fd without the token; returns the server's answer. */
static uint32_t raw_wrong_claim(int fd, int rank) {
  return raw_handshake(fd, "not-the-token", rank);
}

/* The same claim, the connection reset as soon as it is sent. */
static void raw_wrong_claim_reset(int fd, int rank) {
  uint8_t msg[128], nonce[SYMM_PROTO_NONCE];
  raw_send(fd, msg, raw_hello_msg(msg, rank));
  raw_challenge(fd, k_token, nonce);
  raw_send(fd, msg, raw_auth_msg(msg, "not-the-token", nonce));
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

/* This host's first non-loopback IPv4 address, if it has one. */
static bool host_ipv4(char *out, size_t cap) {
  struct ifaddrs *ifs = NULL;
  bool found = false;
  if (getifaddrs(&ifs) != 0) return false;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK))
      continue;
    found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
                      (socklen_t)cap) != NULL;
  }
  freeifaddrs(ifs);
  return found;
}

/* Becomes uid (and its gid, no supplementary groups); from a process whose
 * saved uid is root too (claims_as_job). */
static bool become_user(uid_t uid) {
  if (uid == geteuid()) return true;
  return setresuid(0, 0, 0) == 0 && setgroups(0, NULL) == 0 &&
         setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0;
}

enum { CLAIM_CLOSED, CLAIM_RESET, CLAIM_HOST_ADDR, CLAIM_HELLO_ONLY, CLAIM_FORMS };
static const char *const claim_form[CLAIM_FORMS] = {
    "refused and closed", "reset at once", "sent to the host's own address",
    "HELLO only, then closed"};

/* The job's side: a store bound to 0.0.0.0 and rank 0 waiting for rank 1,
 * while processes of this uid and of `other` (-1: none) claim rank 1
 * without the token, in every form.  Rank 0's wait ends by its timeout
 * each time, never "rank 1 was refused"; the real rank 1 with the wrong
 * token is refused itself, and with the token it is served.  Returns the
 * number of claims made. */
static int claims_as_job(int other) {
  symm_store_server_t *srv = NULL;
  ASSERT_OK(symm_store_server_start("0.0.0.0", 0, k_token, &srv));
  const int port = symm_store_server_port(srv);
  char addr[64], host[INET_ADDRSTRLEN];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  const bool have_host = host_ipv4(host, sizeof host);
  symm_store_t *r0 = NULL;
  ASSERT_OK(symm_store_connect(addr, k_token, 0, 5000, &r0));
  const int uids[2] = {(int)geteuid(), other};
  int made = 0;
  for (int u = 0; u < 2; u++) {
    if (uids[u] < 0) continue;
    for (int form = 0; form < CLAIM_FORMS; form++) {
      if (form == CLAIM_HOST_ADDR && !have_host) continue;
      fflush(stdout);
      pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        if (!become_user((uid_t)uids[u])) _exit(3);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, form == CLAIM_HOST_ADDR ? host : "127.0.0.1", &sa.sin_addr);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) _exit(4);
        if (form == CLAIM_RESET) {
          raw_wrong_claim_reset(fd, 1);
          _exit(0);
        }
        if (form == CLAIM_HELLO_ONLY) {
          uint8_t msg[128], nonce[SYMM_PROTO_NONCE];
          raw_send(fd, msg, raw_hello_msg(msg, 1));
          raw_challenge(fd, k_token, nonce);
          close(fd);
          _exit(0);
        }
        _exit(raw_wrong_claim(fd, 1) == SYMM_ERR_PERMISSION ? 0 : 5);
      }
      int st;
      ASSERT_EQ(waitpid(child, &st, 0), child);
      ASSERT(WIFEXITED(st));
      ASSERT_EQ(WEXITSTATUS(st), 0);
      /* A connection made after the claim is served after it (the backlog
       * is in order, a HELLO already in is served at accept). */
      symm_store_t *sync = NULL;
      ASSERT_OK(symm_store_connect(addr, k_token, -1, 5000, &sync));
      symm_store_close(sync);
      char buf[8];
      size_t len;
      const symm_result_t res = symm_store_get(r0, "from1", buf, sizeof buf, &len, 100);
      printf("uid %d, claim %s: rank 0's wait -> %s (%s)\n", uids[u], claim_form[form],
             symm_strerror(res), symm_last_error());
      ASSERT_RES(res, SYMM_ERR_TIMEOUT);
      made++;
    }
  }
  /* The job's own rank with a stale token fails at once itself. */
  symm_store_t *bad = NULL;
  ASSERT_RES(symm_store_connect(addr, "not-the-token", 1, 5000, &bad), SYMM_ERR_PERMISSION);
  ASSERT_RES(symm_store_get(r0, "from1", (char[8]){0}, 8, &(size_t){0}, 100), SYMM_ERR_TIMEOUT);
  symm_store_t *r1 = NULL;
  ASSERT_OK(symm_store_connect(addr, k_token, 1, 5000, &r1));
  ASSERT_OK(symm_store_set(r1, "from1", "x", 1));
  get_str(r0, "from1", "x");
  symm_store_close(r1);
  symm_store_close(r0);
  symm_store_server_stop(srv);
  return made;
}

/* The job run by root, claims from root and from uid 65534; then the job
 * run by uid 65534 (its saved uid root, so that its claimers can become
 * another user), claims from 65534 and from 65533.  Without root, the job
 * is this user's and the claims are its own. */
TEST_IMPL(store_refused_claims) {
  if (geteuid() != 0) {
    int made = claims_as_job(-1);
    printf("not root: %d claims from this job's own user only\n", made);
    return 0;
  }
  int made = claims_as_job(65534);
  fflush(stdout);
  pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 0) != 0 ||
        setresuid(65534, 65534, 0) != 0)
      _exit(77);
    claims_as_job(65533);
    _exit(0);
  }
  int st;
  ASSERT_EQ(waitpid(job, &st, 0), job);
  ASSERT(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) {
    printf("SKIP: cannot run a job as uid 65534 (%d claims on root's job passed)\n", made);
    return TEST_SKIP;
  }
  ASSERT_EQ(WEXITSTATUS(st), 0);
  return 0;
}

/* Bytes this process has read through read-like calls so far
 * (/proc/self/io rchar): the store thread's reads are among them. */
static uint64_t self_read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  ASSERT(f != NULL);
  char line[128];
  unsigned long long v = 0;
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "rchar: %llu", &v) == 1;
  fclose(f);
  ASSERT(found);
  return v;
}

/* What a refused claim costs the server does not grow with the sockets
 * of the host: 400 connections held open around it, a claimer (another
 * user, where the test can be one) makes 200 wrong-token claims, and the
 * bytes the store process reads through read() meanwhile (files such as
 * /proc/net/tcp, pipes; its sockets are read with recv(), not counted)
 * stay within 1 KiB a claim, where a look through the host's socket table
 * for each claim reads all of it. */
TEST_IMPL(store_refused_cost) {
  enum { HELD = 400, CLAIMS = 200 };
  fixture_t f;
  fx_start(&f);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(lfd, HELD), 0);
  ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
  static int held[2 * HELD];
  for (int i = 0; i < HELD; i++) {
    held[2 * i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(connect(held[2 * i], (struct sockaddr *)&sa, sizeof sa), 0);
    held[2 * i + 1] = accept(lfd, NULL, NULL);
    ASSERT_GE(held[2 * i + 1], 0);
  }
  int done[2], go[2];
  ASSERT_EQ(pipe(done), 0);
  ASSERT_EQ(pipe(go), 0);
  const uint64_t before = self_read_bytes();
  fflush(stdout);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 && !become_user(65534)) _exit(3);
    for (int i = 0; i < CLAIMS; i++) {
      int fd = raw_connect(f.port);
      if (raw_wrong_claim(fd, 1) != SYMM_ERR_PERMISSION) _exit(5);
      close(fd);
    }
    char b = 1;
    /* Exit only once the parent has counted: a reaped child's reads are
     * added to its parent's. */
    if (write(done[1], &b, 1) != 1 || read(go[0], &b, 1) != 1) _exit(6);
    _exit(0);
  }
  char b;
  ASSERT_EQ(read(done[0], &b, 1), 1);
  const uint64_t read_bytes = self_read_bytes() - before;
  ASSERT_EQ(write(go[1], &b, 1), 1);
  int st;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  printf("%d refused claims with %d connections held: the store process read %llu bytes "
         "(%llu a claim)\n", CLAIMS, HELD, (unsigned long long)read_bytes,
         (unsigned long long)(read_bytes / CLAIMS));
  ASSERT_LT(read_bytes, (uint64_t)CLAIMS * 1024);
  for (int i = 0; i < 2 * HELD; i++) close(held[i]);
  close(lfd);
  fx_check_alive(&f);
  fx_stop(&f);
  return 0;
}

/* Refusals are logged a few at a time: 100 wrong-token claims give the
 * first few lines one by one, then one line that counts the rest. */
TEST_IMPL(store_refused_logged_limited) {
  enum { CLAIMS = 100 };
  char path[64];
  snprintf(path, sizeof path, "/tmp/symm-store-refused-%d.log", (int)getpid());
  unlink(path);
  setenv("SYMM_DEBUG", "WARN", 1);
  setenv("SYMM_DEBUG_FILE", path, 1);
  fixture_t f;
  fx_start(&f);
  for (int i = 0; i < CLAIMS; i++) {
    int fd = raw_connect(f.port);
    ASSERT_EQ(raw_wrong_claim(fd, 1), SYMM_ERR_PERMISSION);
    close(fd);
  }
  fx_stop(&f); /* says what the window's count holds */
  static char text[1 << 20];
  FILE *lf = fopen(path, "r");
  ASSERT(lf != NULL);
  size_t n = fread(text, 1, sizeof text - 1, lf);
  text[n] = 0;
  fclose(lf);
  unlink(path);
  int lines = 0;
  for (const char *p = strstr(text, "wrong token"); p; p = strstr(p + 1, "wrong token")) lines++;
  printf("%d refused claims: %d lines name a wrong token\n", CLAIMS, lines);
  ASSERT_LE(lines, 5);
  ASSERT_GE(lines, 1);
  char more[64];
  snprintf(more, sizeof more, "%d more", CLAIMS - lines);
  ASSERT_STR_CONTAINS(text, more);
  return 0;
}

TEST_IMPL(store_wrong_token) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *bad = (symm_store_t *)&f;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_connect(f.addr, "not-the-token", 0, 5000, &bad), SYMM_ERR_PERMISSION);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT_STR_CONTAINS(symm_last_error(), "token");
  ASSERT(bad == NULL);
  ASSERT_RES(symm_store_connect(f.addr, "", 0, 5000, &bad), SYMM_ERR_PERMISSION);
  /* A prefix of the token is not the token, nor is the token with its last
   * character changed or one more appended. */
  char prefix[8], other[128];
  snprintf(prefix, sizeof prefix, "%s", k_token);
  ASSERT_RES(symm_store_connect(f.addr, prefix, 0, 5000, &bad), SYMM_ERR_PERMISSION);
  snprintf(other, sizeof other, "%s", k_token);
  other[strlen(other) - 1] ^= 1;
  ASSERT_RES(symm_store_connect(f.addr, other, 0, 5000, &bad), SYMM_ERR_PERMISSION);
  snprintf(other, sizeof other, "%sX", k_token);
  ASSERT_RES(symm_store_connect(f.addr, other, 0, 5000, &bad), SYMM_ERR_PERMISSION);

  /* On the wire: a wrong proof in AUTH gets a PERMISSION reply, then the
   * server hangs up. */
  int fd = raw_connect(f.port);
  ASSERT_EQ(raw_handshake(fd, "wrong", 2), SYMM_ERR_PERMISSION);
  raw_expect_hangup(fd);

  fx_check_alive(&f);
  /* A refused claim says nothing about the job's ranks: rank 0 waiting
   * for rank 2 waits on, before and after rank 2 is in. */
  symm_store_t *s = fx_client(&f, 0);
  char buf[8];
  size_t len;
  ASSERT_RES(symm_store_get(s, "x", buf, sizeof buf, &len, 100), SYMM_ERR_TIMEOUT);
  symm_store_t *two = fx_client(&f, 2);
  ASSERT_RES(symm_store_connect(f.addr, "impostor", 2, 5000, &bad), SYMM_ERR_PERMISSION);
  ASSERT_RES(symm_store_get(s, "x", buf, sizeof buf, &len, 100), SYMM_ERR_TIMEOUT);
  symm_store_close(two);
  symm_store_close(s);
  fx_stop(&f);

  /* A server without a token serves clients without one; a client with a
   * token refuses it, since it cannot prove that token. */
  symm_store_server_t *open_srv = NULL;
  ASSERT_OK(symm_store_server_start(NULL, 0, "", &open_srv));
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", symm_store_server_port(open_srv));
  ASSERT_OK(symm_store_connect(addr, NULL, 0, 5000, &s));
  ASSERT_OK(symm_store_set(s, "k", "v", 1));
  symm_store_close(s);
  ASSERT_RES(symm_store_connect(addr, "anything", 0, 5000, &s), SYMM_ERR_PERMISSION);
  ASSERT_STR_CONTAINS(symm_last_error(), "did not prove");
  symm_store_server_stop(open_srv);
  return 0;
}

/* Another user's listener on the store's port (one who bound it first)
 * answers HELLO as a store would, with a proof made without the token or
 * with another one.  The client refuses it with PERMISSION naming the
 * address, after one message that holds nothing of the token: it never
 * sends its own proof to a store that has not proved itself. */
typedef struct squatter {
  int lfd;
  const char *token; /* its proof's key: NULL, random bytes */
  bool said_auth;
  uint8_t seen[1024]; /* what the client sent */
} squatter_t;

static void *squatter_thread(void *p) {
  squatter_t *q = p;
  int fd = accept(q->lfd, NULL, NULL);
  ASSERT_GE(fd, 0);
  q->said_auth = fake_store_handshake(fd, q->token, q->seen, sizeof q->seen);
  close(fd);
  return NULL;
}

/* The squatter's listener on a loopback port of its own: its port. */
static int squatter_listen(squatter_t *q) {
  q->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  ASSERT_GE(q->lfd, 0);
  ASSERT_EQ(bind(q->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(q->lfd, 4), 0);
  ASSERT_EQ(getsockname(q->lfd, (struct sockaddr *)&sa, &sl), 0);
  return ntohs(sa.sin_port);
}

/* A rank dialling the squatter at port: PERMISSION naming the address. */
static void squatter_refused(int port, const char *who) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  symm_store_t *s = (symm_store_t *)&addr; /* must come back NULL */
  ASSERT_RES(symm_store_connect_rank(addr, k_token, 3, 1, true, 5000, &s), SYMM_ERR_PERMISSION);
  ASSERT(s == NULL);
  printf("%s: %s\n", who, symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(), addr);
  ASSERT_STR_CONTAINS(symm_last_error(), "did not prove");
}

/* What the squatter got: no AUTH (the client hung up after its answer),
 * nothing of the token. */
static void squatter_learnt_nothing(const squatter_t *q) {
  ASSERT(!q->said_auth);
  ASSERT(memmem(q->seen, sizeof q->seen, k_token, strlen(k_token)) == NULL);
  ASSERT(memmem(q->seen, sizeof q->seen, k_token, 8) == NULL);
}

TEST_IMPL(store_squatter_refused) {
  const char *const keys[] = {NULL, "the-squatters-own-token"};
  for (int v = 0; v < 2; v++) {
    squatter_t q = {.token = keys[v]};
    const int port = squatter_listen(&q);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, squatter_thread, &q), 0);
    squatter_refused(port, keys[v] ? "squatter proving another token" : "squatter proving nothing");
    ASSERT_EQ(pthread_join(t, NULL), 0);
    squatter_learnt_nothing(&q);
    close(q.lfd);
  }
  return 0;
}

/* The same squatter as another user (uid 65534: the attack of item 7 as
 * it comes, from a process the job's user does not own), bound first to a
 * port the rank then dials: PERMISSION, and nothing of the token reaches
 * that user's process.  SKIP without root. */
TEST_IMPL(store_squatter_other_user) {
  if (geteuid() != 0) {
    printf("SKIP: becoming uid 65534 needs root\n");
    return 0;
  }
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  pid_t pid = test_fork();
  if (pid == 0) {
    close(report[0]);
    if (!become_user(65534)) _exit(3);
    squatter_t q = {.token = NULL};
    int port = squatter_listen(&q);
    if (write(report[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(5);
    squatter_thread(&q);
    if (write(report[1], &q.said_auth, sizeof q.said_auth) != (ssize_t)sizeof q.said_auth ||
        write(report[1], q.seen, sizeof q.seen) != (ssize_t)sizeof q.seen)
      _exit(6);
    _exit(0);
  }
  close(report[1]);
  int port = 0;
  ASSERT_EQ(read(report[0], &port, sizeof port), (ssize_t)sizeof port);
  squatter_refused(port, "squatter of uid 65534");
  squatter_t got;
  memset(&got, 0, sizeof got);
  ASSERT_EQ(read(report[0], &got.said_auth, sizeof got.said_auth), (ssize_t)sizeof got.said_auth);
  size_t have = 0;
  for (ssize_t n; have < sizeof got.seen &&
                  (n = read(report[0], got.seen + have, sizeof got.seen - have)) > 0;)
    have += (size_t)n;
  ASSERT_EQ(have, sizeof got.seen);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(report[0]);
  squatter_learnt_nothing(&got);
  return 0;
}

/* ------------------------------------------------- SHA-256 and HMAC
 * The handshake's primitives against the standards' own examples: FIPS
 * 180-4's (as NIST's example pages give them) and RFC 4231's. */
static void hex_of(const uint8_t *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void expect_digest(const uint8_t digest[SYMM_SHA256_BYTES], const char *hex, size_t n) {
  char got[2 * SYMM_SHA256_BYTES + 1];
  hex_of(digest, n, got);
  if (strcmp(got, hex) != 0) TEST_FAIL_("digest %s, expected %s", got, hex);
}

TEST_IMPL(store_sha256_vectors) {
  static const struct {
    const char *msg;
    const char *digest;
  } v[] = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
       "lmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  uint8_t d[SYMM_SHA256_BYTES];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    symm_sha256(v[i].msg, strlen(v[i].msg), d);
    expect_digest(d, v[i].digest, sizeof d);
    /* The same, fed a byte at a time: the partial-block path. */
    symm_sha256_t ctx;
    symm_sha256_init(&ctx);
    for (size_t k = 0; k < strlen(v[i].msg); k++) symm_sha256_update(&ctx, v[i].msg + k, 1);
    symm_sha256_final(&ctx, d);
    expect_digest(d, v[i].digest, sizeof d);
  }
  /* One million 'a', in pieces of 1000 (crosses every block boundary). */
  char a[1000];
  memset(a, 'a', sizeof a);
  symm_sha256_t ctx;
  symm_sha256_init(&ctx);
  for (int i = 0; i < 1000; i++) symm_sha256_update(&ctx, a, sizeof a);
  symm_sha256_final(&ctx, d);
  expect_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", sizeof d);
  /* Lengths around the padding's edge (55, 56, 63, 64 bytes): each digest
   * differs from its neighbours' and from a byte-wise feed's, never. */
  uint8_t prev[SYMM_SHA256_BYTES] = {0};
  for (size_t n = 54; n <= 65; n++) {
    symm_sha256(a, n, d);
    symm_sha256_init(&ctx);
    for (size_t k = 0; k < n; k++) symm_sha256_update(&ctx, a + k, 1);
    uint8_t d2[SYMM_SHA256_BYTES];
    symm_sha256_final(&ctx, d2);
    ASSERT(memcmp(d, d2, sizeof d) == 0);
    ASSERT(memcmp(d, prev, sizeof d) != 0);
    memcpy(prev, d, sizeof d);
  }
  return 0;
}

TEST_IMPL(store_hmac_vectors) {
  uint8_t key131[131], data50dd[50], data50cd[50], key25[25];
  memset(key131, 0xaa, sizeof key131);
  memset(data50dd, 0xdd, sizeof data50dd);
  memset(data50cd, 0xcd, sizeof data50cd);
  for (int i = 0; i < 25; i++) key25[i] = (uint8_t)(i + 1);
  const struct {
    const void *key;
    size_t key_len;
    const void *data;
    size_t data_len;
    const char *mac;
    size_t check; /* bytes of the MAC the RFC gives */
  } v[] = {
      {"\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x0b", 20,
       "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32},
      {"Jefe", 4, "what do ya want for nothing?", 28,
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32},
      {key131, 20, data50dd, 50,
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32},
      {key25, 25, data50cd, 50,
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32},
      {"\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c", 20,
       "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b", 16},
      {key131, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32},
      {key131, 131,
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.", 152,
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    symm_hmac_t mac;
    uint8_t out[SYMM_SHA256_BYTES];
    symm_hmac_init(&mac, v[i].key, v[i].key_len);
    symm_hmac_update(&mac, v[i].data, v[i].data_len);
    symm_hmac_final(&mac, out);
    expect_digest(out, v[i].mac, v[i].check);
  }
  /* The handshake's two proofs of one exchange differ, and each depends
   * on the token and on both nonces. */
  uint8_t ns[SYMM_PROTO_NONCE] = {1}, nc[SYMM_PROTO_NONCE] = {2}, p[4][SYMM_PROTO_PROOF];
  symm_proto_proof("t", 1, SYMM_PROTO_SERVER_LABEL, ns, nc, p[0]);
  symm_proto_proof("t", 1, SYMM_PROTO_CLIENT_LABEL, ns, nc, p[1]);
  symm_proto_proof("u", 1, SYMM_PROTO_SERVER_LABEL, ns, nc, p[2]);
  symm_proto_proof("t", 1, SYMM_PROTO_SERVER_LABEL, nc, ns, p[3]);
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++) ASSERT(!symm_secret_equal(p[i], p[j], SYMM_PROTO_PROOF));
  return 0;
}

TEST_IMPL(store_raw_truncated) {
  fixture_t f;
  fx_start(&f);
  uint8_t msg[512], body[256];

  /* Before HELLO: a header announcing more body than is sent, then close. */
  int fd = raw_connect(f.port);
  size_t n = raw_hello_msg(msg, 0);
  raw_send(fd, msg, n - 5);
  close(fd);
  fx_check_alive(&f);

  /* After HELLO: half a SET, then close.  The key must not appear. */
  fd = raw_authed(&f);
  symm_proto_put16(body, 4);
  memcpy(body + 2, "half", 4);
  symm_proto_put32(body + 6, 100);
  memset(body + 10, 'v', 100);
  n = raw_msg(msg, SYMM_OP_SET, body, 110);
  raw_send(fd, msg, n - 50);
  close(fd);
  fx_check_alive(&f);
  symm_store_t *s = fx_client(&f, -1);
  const char *keys[] = {"half"};
  int present = 1;
  ASSERT_OK(symm_store_check(s, keys, 1, &present));
  ASSERT_EQ(present, 0);

  /* A complete message whose field runs past the body: closed by the
   * server, and the connection is not left waiting. */
  fd = raw_authed(&f);
  symm_proto_put16(body, 10); /* key claims 10 bytes, body has 5 */
  memcpy(body + 2, "abcde", 5);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_DEL, body, 7));
  raw_expect_hangup(fd);

  /* Trailing bytes after the last field. */
  fd = raw_authed(&f);
  uint32_t bl = raw_get_body(body, "k", 0);
  memcpy(body + bl, "xyz", 3);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_GET, body, bl + 3));
  raw_expect_hangup(fd);

  /* And the well-formed version of that message is answered. */
  fd = raw_authed(&f);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_GET, body, bl));
  ASSERT_EQ(raw_reply(fd, SYMM_OP_GET, NULL, 0, NULL), SYMM_ERR_TIMEOUT);
  close(fd);

  fx_check_alive(&f);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_raw_oversized) {
  fixture_t f;
  fx_start(&f);
  uint8_t msg[512], body[256];

  /* Before HELLO: a huge body length is refused from the header alone. */
  int fd = raw_connect(f.port);
  symm_proto_encode_header(msg, SYMM_OP_HELLO, 1, 0xFFFFFFFFu);
  raw_send(fd, msg, SYMM_PROTO_HEADER_BYTES);
  int ms = raw_wait_closed(fd, 3000);
  ASSERT_GE(ms, 0);
  ASSERT_LT(ms, 2000);
  close(fd);
  fx_check_alive(&f);

  /* After HELLO: more than a SET may carry. */
  fd = raw_authed(&f);
  symm_proto_encode_header(msg, SYMM_OP_SET, 1,
                           (uint32_t)symm_proto_max_body(SYMM_OP_SET) + 1);
  raw_send(fd, msg, SYMM_PROTO_HEADER_BYTES);
  raw_expect_hangup(fd);

  /* A value length field over SYMM_STORE_MAX_VALUE inside a small body. */
  fd = raw_authed(&f);
  symm_proto_put16(body, 1);
  body[2] = 'k';
  symm_proto_put32(body + 3, SYMM_STORE_MAX_VALUE + 1);
  memset(body + 7, 0, 16);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_SET, body, 23));
  raw_expect_hangup(fd);

  /* A key length field over SYMM_STORE_MAX_KEY. */
  fd = raw_authed(&f);
  symm_proto_put16(body, 300);
  memset(body + 2, 'k', 200);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_DEL, body, 202));
  raw_expect_hangup(fd);

  /* A key count over SYMM_STORE_MAX_KEYS. */
  fd = raw_authed(&f);
  symm_proto_put32(body, SYMM_STORE_MAX_KEYS + 1);
  symm_proto_put16(body + 4, 1);
  body[6] = 'k';
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_CHECK, body, 7));
  raw_expect_hangup(fd);

  /* A HELLO over its limit (a token in it, as the last version had). */
  fd = raw_connect(f.port);
  symm_proto_put16(body, 100);
  memset(body + 2, 't', 100);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_HELLO, body, 102));
  raw_expect_hangup(fd);

  /* HELLO's optional communicator cut short, or followed by more bytes. */
  for (uint32_t extra = 3; extra <= 8; extra += 5) {
    fd = raw_connect(f.port);
    size_t hn = raw_hello_msg(msg, 0);
    uint32_t blen = (uint32_t)(hn - SYMM_PROTO_HEADER_BYTES) + extra;
    memset(msg + hn, 0x5a, extra);
    symm_proto_encode_header(msg, SYMM_OP_HELLO, 7, blen);
    raw_send(fd, msg, hn + extra);
    /* Answered before the close: the client says why, and does not retry. */
    ASSERT_EQ(raw_reply(fd, SYMM_OP_HELLO, NULL, 0, NULL), SYMM_ERR_PROTOCOL);
    raw_expect_hangup(fd);
  }
  /* With exactly four bytes it is a communicator: accepted. */
  fd = raw_connect(f.port);
  size_t n = raw_hello_msg(msg, 0);
  symm_proto_put32(msg + n, 12);
  symm_proto_encode_header(msg, SYMM_OP_HELLO, 7, (uint32_t)(n - SYMM_PROTO_HEADER_BYTES) + 4);
  raw_send(fd, msg, n + 4);
  ASSERT_EQ(raw_reply(fd, SYMM_OP_HELLO, NULL, 0, NULL), SYMM_SUCCESS);
  close(fd);

  fx_check_alive(&f);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_raw_garbage) {
  fixture_t f;
  fx_start(&f);
  uint8_t msg[2048], body[64];

  int fd = raw_connect(f.port);
  for (size_t i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7919u >> 3);
  raw_send(fd, msg, sizeof msg);
  raw_expect_hangup(fd);
  fx_check_alive(&f);

  /* Wrong version. */
  fd = raw_connect(f.port);
  size_t n = raw_hello_msg(msg, -1);
  msg[4] = SYMM_PROTO_VERSION + 1;
  raw_send(fd, msg, n);
  raw_expect_hangup(fd);

  /* A request before HELLO. */
  fd = raw_connect(f.port);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_GET, body, raw_get_body(body, "k", 0)));
  raw_expect_hangup(fd);

  /* Unknown opcode after HELLO. */
  fd = raw_authed(&f);
  raw_send(fd, msg, raw_msg(msg, 77, NULL, 0));
  raw_expect_hangup(fd);

  /* A reply opcode sent as a request. */
  fd = raw_authed(&f);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_GET | SYMM_PROTO_REPLY_FLAG, NULL, 0));
  raw_expect_hangup(fd);

  /* A second HELLO. */
  fd = raw_authed(&f);
  raw_send(fd, msg, raw_hello_msg(msg, -1));
  raw_expect_hangup(fd);

  /* AUTH before HELLO, a second HELLO before AUTH, a request before AUTH,
   * a second AUTH. */
  uint8_t nonce[SYMM_PROTO_NONCE] = {0};
  fd = raw_connect(f.port);
  raw_send(fd, msg, raw_auth_msg(msg, k_token, nonce));
  raw_expect_hangup(fd);
  for (int second = 0; second < 2; second++) {
    fd = raw_connect(f.port);
    raw_send(fd, msg, raw_hello_msg(msg, -1));
    raw_challenge(fd, k_token, nonce);
    raw_send(fd, msg, second ? raw_hello_msg(msg, -1)
                             : raw_msg(msg, SYMM_OP_GET, body, raw_get_body(body, "k", 0)));
    raw_expect_hangup(fd);
  }
  fd = raw_connect(f.port);
  raw_send(fd, msg, raw_hello_msg(msg, -1));
  raw_challenge(fd, k_token, nonce);
  raw_send(fd, msg, raw_auth_msg(msg, k_token, nonce));
  ASSERT_EQ(raw_reply(fd, SYMM_OP_AUTH, NULL, 0, NULL), SYMM_SUCCESS);
  raw_send(fd, msg, raw_auth_msg(msg, k_token, nonce));
  raw_expect_hangup(fd);

  /* Those were tools (rank -1): closing them lost no rank, and the
   * server still serves. */
  fx_check_alive(&f);
  symm_store_t *s = fx_client(&f, 0);
  char buf[8];
  size_t len;
  ASSERT_RES(symm_store_get(s, "x", buf, sizeof buf, &len, 100), SYMM_ERR_TIMEOUT);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_raw_handshake_timeout) {
  setenv("SYMM_STORE_HANDSHAKE_MS", "300", 1);
  fixture_t f;
  fx_start(&f);
  int idle = raw_connect(f.port);
  int partial = raw_connect(f.port);
  uint8_t msg[128];
  raw_send(partial, msg, raw_hello_msg(msg, 0) - 3);
  /* A good client is served while those two hang around. */
  fx_check_alive(&f);
  int ms = raw_wait_closed(idle, 5000);
  ASSERT_GE(ms, 150);
  ASSERT_LT(ms, 2500);
  ASSERT_GE(raw_wait_closed(partial, 5000), 0);
  close(idle);
  close(partial);
  /* Authenticated connections are not subject to the handshake timeout:
   * one made after s is closed for it, and s still works. */
  symm_store_t *s = fx_client(&f, -1);
  int later = raw_connect(f.port);
  ASSERT_GE(raw_wait_closed(later, 5000), 0);
  close(later);
  ASSERT_OK(symm_store_set(s, "k", "v", 1));
  symm_store_close(s);
  fx_check_alive(&f);
  fx_stop(&f);
  unsetenv("SYMM_STORE_HANDSHAKE_MS");
  return 0;
}

/* A flood of connections that never say HELLO (anybody who can reach the
 * port, without the token): the server holds at most 64 of them (it closes
 * the oldest), so it keeps its fds, and the ranks connected before the
 * flood and those that connect while it is held are served. */
TEST_IMPL(store_raw_flood) {
  enum { FLOOD = 400 };
  fixture_t f;
  fx_start(&f);
  symm_store_t *r0 = fx_client(&f, 0);
  int before = test_count_fds();
  int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) fds[i] = raw_connect(f.port);
  /* Served after every flood connection was accepted (the backlog is in
   * order), so the count below sees them all. */
  symm_store_t *r1 = fx_client(&f, 1);
  ASSERT_OK(symm_store_set(r1, "from1", "b", 1));
  get_str(r0, "from1", "b");
  ASSERT_OK(symm_store_set(r0, "from0", "a", 1));
  get_str(r1, "from0", "a");
  int held = test_count_fds() - before - FLOOD - 1; /* the server's side, r1 aside */
  printf("server holds %d fds for %d unauthenticated connections\n", held, FLOOD);
  ASSERT_LE(held, 64 + 2);
  /* The oldest were closed by the server. */
  ASSERT_GE(raw_wait_closed(fds[0], 3000), 0);
  fx_check_alive(&f);
  for (int i = 0; i < FLOOD; i++) close(fds[i]);
  symm_store_close(r1);
  symm_store_close(r0);
  fx_stop(&f);
  return 0;
}

/* Ranks that connect together, more of them than SRV_MAX_UNAUTHED: all
 * connect first, then all send their HELLO.  Every one is served; before,
 * the server closed the oldest of them unread while it accepted the rest,
 * and their clients failed after 8 retries. */
TEST_IMPL(store_connect_burst) {
  enum { BURST = 300 };
  fixture_t f;
  fx_start(&f);
  static int fds[BURST];
  for (int i = 0; i < BURST; i++) fds[i] = raw_connect(f.port);
  uint8_t msg[128];
  const size_t n = raw_hello_msg(msg, -1);
  for (int i = 0; i < BURST; i++) raw_send(fds[i], msg, n);
  for (int i = 0; i < BURST; i++) {
    uint8_t nonce[SYMM_PROTO_NONCE], auth[128];
    raw_challenge(fds[i], k_token, nonce);
    raw_send(fds[i], auth, raw_auth_msg(auth, k_token, nonce));
  }
  for (int i = 0; i < BURST; i++) ASSERT_EQ(raw_reply(fds[i], SYMM_OP_AUTH, NULL, 0, NULL), SYMM_SUCCESS);
  for (int i = 0; i < BURST; i++) close(fds[i]);
  fx_check_alive(&f);
  fx_stop(&f);
  return 0;
}

/* A peer that pipelines requests and never reads must not stall others;
 * once it reads, it gets every reply. */
TEST_IMPL(store_slow_reader) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, -1);
  size_t vlen = 1u << 20;
  uint8_t *v = malloc(vlen);
  ASSERT(v);
  memset(v, 0x5a, vlen);
  ASSERT_OK(symm_store_set(s, "big", v, vlen));

  int fd = raw_authed(&f);
  /* 64 MiB of replies: far more than the socket buffers hold, so the
   * server is left with unsendable output for this peer. */
  enum { NREQ = 64 };
  uint8_t msg[64], body[32];
  uint32_t bl = raw_get_body(body, "big", 0);
  size_t n = raw_msg(msg, SYMM_OP_GET, body, bl);
  for (int i = 0; i < NREQ; i++) raw_send(fd, msg, n);

  uint64_t t0 = test_now_ms();
  for (int i = 0; i < 100; i++) {
    char key[16];
    snprintf(key, sizeof key, "fast%d", i);
    ASSERT_OK(symm_store_set(s, key, "x", 1));
    get_str(s, key, "x");
  }
  ASSERT_LT(test_now_ms() - t0, 5000);

  for (int i = 0; i < NREQ; i++) {
    size_t len = 0;
    uint8_t head[8];
    ASSERT_EQ(raw_reply(fd, SYMM_OP_GET, head, sizeof head, &len), SYMM_SUCCESS);
    ASSERT_EQ(len, 4 + vlen);
    ASSERT_EQ(symm_proto_get32(head), vlen);
    ASSERT_EQ(head[4], 0x5a);
  }
  close(fd);
  free(v);
  symm_store_close(s);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_lost_rank) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *r0 = fx_client(&f, 0);
  symm_store_t *r1 = fx_client(&f, 1);

  getter_arg_t g = {.s = r0, .key = "never", .timeout_ms = 10000, .res = SYMM_SUCCESS};
  pthread_t t;
  pthread_create(&t, NULL, getter_thread, &g);
  wait_parked(&f, 1);
  symm_store_abandon(r1);
  pthread_join(t, NULL);
  ASSERT_RES(g.res, SYMM_ERR_PEER_LOST);
  ASSERT_LT(g.elapsed_ms, 3000);
  ASSERT_STR_CONTAINS(g.err, "rank 1");

  /* Later blocking requests that cannot complete fail at once... */
  char buf[16];
  size_t len;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_get(r0, "never2", buf, sizeof buf, &len, 5000), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 1000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 lost");
  const char *keys[] = {"never3"};
  ASSERT_RES(symm_store_wait(r0, keys, 1, 5000), SYMM_ERR_PEER_LOST);
  /* ...while satisfiable ones still work. */
  ASSERT_OK(symm_store_set(r0, "here", "yes", 3));
  get_str(r0, "here", "yes");
  ASSERT_OK(symm_store_wait(r0, (const char *[]){"here"}, 1, 5000));

  /* A new HELLO from rank 1 (a new communicator) clears it. */
  r1 = fx_client(&f, 1);
  ASSERT_RES(symm_store_get(r0, "never4", buf, sizeof buf, &len, 200), SYMM_ERR_TIMEOUT);

  /* A rank process that dies without BYE is lost too: it exits once
   * r0's GET is parked. */
  int parked[2], up[2];
  ASSERT_EQ(pipe(parked), 0);
  ASSERT_EQ(pipe(up), 0);
  pid_t pid = test_fork();
  if (pid == 0) {
    symm_store_t *c = NULL;
    char b = 1;
    if (symm_store_connect(f.addr, k_token, 2, 5000, &c) != SYMM_SUCCESS) _exit(3);
    if (write(up[1], &b, 1) != 1 || read(parked[0], &b, 1) != 1) _exit(4);
    _exit(0); /* no close: the kernel closes the socket */
  }
  char b;
  ASSERT_EQ(read(up[0], &b, 1), 1); /* connected: not a HELLO after the loss */
  pthread_t note;
  parked_note_t pn = {.f = &f, .fd = parked[1]};
  pthread_create(&note, NULL, parked_note_thread, &pn);
  t0 = test_now_ms();
  ASSERT_RES(symm_store_get(r0, "never5", buf, sizeof buf, &len, 10000), SYMM_ERR_PEER_LOST);
  pthread_join(note, NULL);
  close(parked[0]), close(parked[1]), close(up[0]), close(up[1]);
  ASSERT_LT(test_now_ms() - t0, 5000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2");
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);

  symm_store_close(r1);
  symm_store_close(r0);
  fx_stop(&f);
  return 0;
}

/* The counterpart of store_lost_rank: a rank that says BYE is not lost. */
TEST_IMPL(store_bye_not_lost) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *r0 = fx_client(&f, 0);
  symm_store_t *r1 = fx_client(&f, 1);
  symm_store_t *tool = fx_client(&f, -1);
  symm_store_close(r1);
  symm_store_abandon(tool); /* tools have no rank to lose */
  /* Whether the server sees the abandoned connection go before or while
   * the GET is parked, a loss would fail it. */
  char buf[8];
  size_t len;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_get(r0, "never", buf, sizeof buf, &len, 300), SYMM_ERR_TIMEOUT);
  ASSERT_GE(test_now_ms() - t0, 290);
  symm_store_close(r0);
  fx_stop(&f);
  return 0;
}

TEST_IMPL(store_mark_lost) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *r0 = fx_client(&f, 0);
  getter_arg_t g = {.s = r0, .key = "never", .timeout_ms = 10000, .res = SYMM_SUCCESS};
  pthread_t t;
  pthread_create(&t, NULL, getter_thread, &g);
  wait_parked(&f, 1);
  symm_store_server_mark_lost(NULL, 3);
  symm_store_server_mark_lost(f.server, -1); /* ignored */
  symm_store_server_mark_lost(f.server, 3);
  pthread_join(t, NULL);
  ASSERT_RES(g.res, SYMM_ERR_PEER_LOST);
  ASSERT_LT(g.elapsed_ms, 2000);
  ASSERT_STR_CONTAINS(g.err, "rank 3");

  /* CHECK does not block, so it still answers. */
  int present = 1;
  ASSERT_OK(symm_store_check(r0, (const char *[]){"never"}, 1, &present));
  ASSERT_EQ(present, 0);
  char buf[8];
  size_t len;
  ASSERT_RES(symm_store_get(r0, "never", buf, sizeof buf, &len, 0), SYMM_ERR_PEER_LOST);

  symm_store_t *r3 = fx_client(&f, 3); /* rank 3 is back */
  ASSERT_RES(symm_store_get(r0, "never", buf, sizeof buf, &len, 200), SYMM_ERR_TIMEOUT);
  symm_store_close(r3);
  symm_store_close(r0);
  fx_stop(&f);
  return 0;
}

typedef struct closer_arg {
  symm_store_t *s;
  atomic_int closing; /* set before the close starts */
} closer_arg_t;

static void *closer_thread(void *p) {
  closer_arg_t *a = p;
  atomic_store(&a->closing, 1);
  symm_store_close(a->s);
  return NULL;
}

TEST_IMPL(store_drain) {
  fixture_t f;
  fx_start(&f);
  ASSERT_RES(symm_store_server_drain(NULL, 0), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_store_server_drain(f.server, 0));
  symm_store_t *tool = fx_client(&f, -1);
  ASSERT_OK(symm_store_server_drain(f.server, 100)); /* tools do not count */

  symm_store_t *r0 = fx_client(&f, 0);
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_server_drain(f.server, 200), SYMM_ERR_TIMEOUT);
  ASSERT_GE(test_now_ms() - t0, 190);

  pthread_t t;
  closer_arg_t a = {.s = r0};
  atomic_init(&a.closing, 0);
  pthread_create(&t, NULL, closer_thread, &a);
  ASSERT_OK(symm_store_server_drain(f.server, 5000));
  ASSERT_EQ(atomic_load(&a.closing), 1); /* it returned for that close, not before */
  pthread_join(t, NULL);

  symm_store_t *r1 = fx_client(&f, 1);
  symm_store_abandon(r1);
  ASSERT_OK(symm_store_server_drain(f.server, 3000));
  symm_store_close(tool);
  fx_stop(&f);
  return 0;
}

/* Drains by communicator: connections that named another communicator in
 * HELLO, or none, do not hold up one communicator's drain; the plain drain
 * still waits for every rank connection. */
TEST_IMPL(store_drain_comm) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *a = NULL, *b = NULL, *plain = NULL;
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 0, 5, 5000, &a));
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 1, 6, 5000, &b));
  plain = fx_client(&f, 2);
  ASSERT_EQ(symm_store_server_ranks_open(f.server), 3);
  ASSERT_EQ(symm_store_server_ranks_open(NULL), 0);
  ASSERT_RES(symm_store_server_drain_comm(f.server, 5, 100), SYMM_ERR_TIMEOUT);
  ASSERT_OK(symm_store_server_drain_comm(f.server, 7, 0)); /* nobody of 7 */
  /* The connections work as any other. */
  ASSERT_OK(symm_store_set(a, "k", "v", 1));
  get_str(b, "k", "v");
  symm_store_close(a);
  ASSERT_OK(symm_store_server_drain_comm(f.server, 5, 5000));
  ASSERT_RES(symm_store_server_drain_comm(f.server, 6, 100), SYMM_ERR_TIMEOUT);
  ASSERT_RES(symm_store_server_drain(f.server, 100), SYMM_ERR_TIMEOUT);
  ASSERT_EQ(symm_store_server_ranks_open(f.server), 2);
  symm_store_close(b);
  ASSERT_OK(symm_store_server_drain_comm(f.server, 6, 5000));
  ASSERT_RES(symm_store_server_drain(f.server, 100), SYMM_ERR_TIMEOUT); /* plain is open */
  symm_store_close(plain);
  ASSERT_OK(symm_store_server_drain(f.server, 5000));
  ASSERT_EQ(symm_store_server_ranks_open(f.server), 0);
  fx_stop(&f);
  return 0;
}

/* Stop if idle: not while a rank connection is open, but for those of
 * communicators up to the index named (stragglers of ended ones); tools do
 * not count; once stopped, the server is gone. */
TEST_IMPL(store_stop_if_idle) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *r0 = NULL, *later = NULL, *tool = fx_client(&f, -1), *other = fx_client(&f, 1);
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 0, 5, 5000, &r0));
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 2, 7, 5000, &later));
  ASSERT(!symm_store_server_stop_if_idle(f.server, SYMM_STORE_NO_COMM));
  ASSERT(!symm_store_server_stop_if_idle(f.server, 4));
  ASSERT(!symm_store_server_stop_if_idle(f.server, 6)); /* 7 is later, `other` names none */
  ASSERT_OK(symm_store_set(r0, "k", "v", 1)); /* still serving */
  symm_store_close(later);
  ASSERT_OK(symm_store_server_drain_comm(f.server, 7, 5000));
  ASSERT(!symm_store_server_stop_if_idle(f.server, 6)); /* `other` still */
  symm_store_close(other); /* the server counts it out before it answers BYE */
  ASSERT_EQ(symm_store_server_ranks_open(f.server), 1);
  ASSERT(symm_store_server_stop_if_idle(f.server, 6)); /* only 5's straggler r0 */
  ASSERT(symm_store_server_stop_if_idle(NULL, SYMM_STORE_NO_COMM));
  symm_store_t *late = NULL;
  ASSERT_RES(symm_store_connect(f.addr, k_token, 1, 200, &late), SYMM_ERR_TIMEOUT);
  symm_store_abandon(r0);
  symm_store_abandon(tool);
  return 0;
}

/* A rank lost in one communicator does not fail another's requests on the
 * same store; clients that name none, and symmem-run's marks, see every
 * loss; a new HELLO of the rank in that communicator clears it. */
TEST_IMPL(store_lost_per_comm) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *a1, *a2, *b1, *b2;
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 1, 5, 5000, &a1));
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 2, 5, 5000, &a2));
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 1, 6, 5000, &b1));
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 2, 6, 5000, &b2));
  symm_store_abandon(a1);
  char buf[16];
  size_t len;
  ASSERT_RES(symm_store_get(a2, "never", buf, sizeof buf, &len, 5000), SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 lost");
  ASSERT_RES(symm_store_get(b2, "never", buf, sizeof buf, &len, 200), SYMM_ERR_TIMEOUT);
  symm_store_t *plain = fx_client(&f, 3);
  ASSERT_RES(symm_store_get(plain, "never", buf, sizeof buf, &len, 5000), SYMM_ERR_PEER_LOST);
  /* Back in communicator 5. */
  ASSERT_OK(symm_store_connect_comm(f.addr, k_token, 1, 5, 5000, &a1));
  ASSERT_RES(symm_store_get(a2, "never", buf, sizeof buf, &len, 200), SYMM_ERR_TIMEOUT);
  /* Lost to everyone. */
  symm_store_server_mark_lost(f.server, 2);
  uint64_t t0 = test_now_ms();
  symm_result_t r;
  while ((r = symm_store_get(b1, "never", buf, sizeof buf, &len, 100)) == SYMM_ERR_TIMEOUT &&
         test_now_ms() - t0 < 5000) {
  }
  ASSERT_RES(r, SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2 lost");
  symm_store_close(a1);
  symm_store_close(a2);
  symm_store_close(b1);
  symm_store_close(b2);
  symm_store_close(plain);
  fx_stop(&f);
  return 0;
}

/* ---- processes that are gone: lost in the communicators numbered as the
 * ---- job's that they never joined (store_server_proc.c). */

/* A raw HELLO as rank `rank` of communicator comm from process pid on the
 * host whose name hashes to host (not this one: its pid cannot be looked
 * at here), with HELLO's flags. */
static int raw_rank_of(const fixture_t *f, int rank, uint32_t comm, int32_t pid, uint64_t host,
                       uint8_t flags) {
  uint8_t body[128], msg[256], nonce[SYMM_PROTO_NONCE];
  size_t n = SYMM_PROTO_NONCE;
  memcpy(body, k_raw_nonce, SYMM_PROTO_NONCE);
  symm_proto_put32(body + n, (uint32_t)rank);
  symm_proto_put32(body + n + 4, comm);
  symm_proto_put32(body + n + 8, (uint32_t)pid);
  symm_proto_put64(body + n + 12, host);
  symm_proto_put64(body + n + 20, 1); /* its PID namespace */
  symm_proto_put64(body + n + 28, 1);
  body[n + 36] = flags;
  n += 37;
  int fd = raw_connect(f->port);
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_HELLO, body, (uint32_t)n));
  raw_challenge(fd, k_token, nonce);
  raw_send(fd, msg, raw_auth_msg(msg, k_token, nonce));
  ASSERT_EQ(raw_reply(fd, SYMM_OP_AUTH, NULL, 0, NULL), SYMM_SUCCESS);
  return fd;
}

static void raw_bye(int fd) {
  uint8_t msg[SYMM_PROTO_HEADER_BYTES];
  raw_send(fd, msg, raw_msg(msg, SYMM_OP_BYE, NULL, 0));
  ASSERT_GE(raw_wait_closed(fd, 5000), 0);
  close(fd);
}

static symm_result_t get_never(symm_store_t *s, int timeout_ms) {
  char buf[16];
  size_t len;
  return symm_store_get(s, "never", buf, sizeof buf, &len, timeout_ms);
}

/* A process on another host: gone when its last connection closes and one
 * of them closed without BYE.  Only communicators that number ranks as the
 * job does see it; one that says BYE, or keeps a connection, is not gone;
 * a new process as the same job rank clears it. */
TEST_IMPL(store_lost_process_elsewhere) {
  fixture_t f;
  fx_start(&f);
  const uint64_t elsewhere = 0x5eed;
  symm_store_t *job = NULL, *own = NULL;
  ASSERT_OK(symm_store_connect_rank(f.addr, k_token, 0, 6, true, 5000, &job));
  ASSERT_OK(symm_store_connect_rank(f.addr, k_token, 0, 7, false, 5000, &own));
  /* Rank 3 leaves with BYE: not lost. */
  raw_bye(raw_rank_of(&f, 3, 5, 4243, elsewhere, SYMM_HELLO_JOB_RANKS));
  ASSERT_RES(get_never(job, 300), SYMM_ERR_TIMEOUT);
  /* Rank 2 abandons one of its two connections: it is still there. */
  int a = raw_rank_of(&f, 2, 5, 4242, elsewhere, SYMM_HELLO_JOB_RANKS);
  int b = raw_rank_of(&f, 2, 8, 4242, elsewhere, SYMM_HELLO_JOB_RANKS);
  close(a);
  ASSERT_RES(get_never(job, 300), SYMM_ERR_TIMEOUT);
  /* Then the other: gone, and lost in communicator 6, which it never
   * joined, at once; communicator 7 has ranks of its own. */
  close(b);
  uint64_t t0 = test_now_ms();
  ASSERT_RES(get_never(job, 10000), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2 lost");
  ASSERT_RES(get_never(own, 300), SYMM_ERR_TIMEOUT);
  /* Rank 2 started again (another process) is rank 2 of the job again. */
  int again = raw_rank_of(&f, 2, 9, 4300, elsewhere, SYMM_HELLO_JOB_RANKS);
  ASSERT_RES(get_never(job, 300), SYMM_ERR_TIMEOUT);
  raw_bye(again);
  symm_store_close(job);
  symm_store_close(own);
  fx_stop(&f);
  return 0;
}

/* A process on this host: gone when its pid names no process, also after
 * it said BYE on every connection (it destroyed its communicators, then
 * died); a live one that said BYE is not lost. */
TEST_IMPL(store_lost_process_here) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *job = NULL;
  ASSERT_OK(symm_store_connect_rank(f.addr, k_token, 0, 6, true, 5000, &job));
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  fflush(stdout);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    symm_store_t *mine = NULL;
    if (symm_store_connect_rank(f.addr, k_token, 1, 5, true, 5000, &mine) != SYMM_SUCCESS)
      _exit(1);
    symm_store_close(mine);
    char c = 1;
    if (write(done[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1); /* it said BYE and lives */
  ASSERT_RES(get_never(job, 300), SYMM_ERR_TIMEOUT);
  ASSERT_EQ(write(go[1], &c, 1), 1);
  int st;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  uint64_t t0 = test_now_ms();
  ASSERT_RES(get_never(job, 10000), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 lost");
  close(go[0]), close(go[1]), close(done[0]), close(done[1]);
  symm_store_close(job);
  fx_stop(&f);
  return 0;
}

/* A listener that accepts and closes without answering: the client gives
 * up after a few connections with a protocol error, not at its deadline. */
static void *closing_listener(void *arg) {
  int lfd = *(int *)arg;
  for (int k = 0; k < 64; k++) {
    int c = accept(lfd, NULL, NULL);
    if (c < 0) break;
    close(c);
  }
  return NULL;
}

TEST_IMPL(store_hello_closed_unanswered) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(lfd, 16), 0);
  ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
  pthread_t t;
  pthread_create(&t, NULL, closing_listener, &lfd);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
  symm_store_t *s = NULL;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_connect_comm(addr, k_token, 0, 1, 20000, &s), SYMM_ERR_PROTOCOL);
  ASSERT_LT(test_now_ms() - t0, 10000);
  ASSERT_STR_CONTAINS(symm_last_error(), "before answering HELLO");
  shutdown(lfd, SHUT_RDWR);
  close(lfd);
  pthread_join(t, NULL);
  return 0;
}

/* A listener that answers every HELLO with SYMM_ERR_PROTOCOL (what a store
 * of another version says to a HELLO it cannot parse) and counts the
 * connections. */
typedef struct refusing_arg {
  int lfd, accepted;
} refusing_arg_t;

static void *refusing_listener(void *p) {
  refusing_arg_t *a = p;
  for (;;) {
    int c = accept(a->lfd, NULL, NULL);
    if (c < 0) break;
    a->accepted++;
    uint8_t hdr[SYMM_PROTO_HEADER_BYTES], body[512];
    symm_proto_header_t h;
    raw_recv_all(c, hdr, sizeof hdr);
    symm_proto_decode_header(hdr, &h);
    if (h.body_len <= sizeof body) raw_recv_all(c, body, h.body_len);
    uint8_t reply[SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_REPLY_PREFIX] = {0};
    symm_proto_encode_header(reply, h.opcode | SYMM_PROTO_REPLY_FLAG, h.id,
                             SYMM_PROTO_REPLY_PREFIX);
    symm_proto_put32(reply + SYMM_PROTO_HEADER_BYTES, (uint32_t)SYMM_ERR_PROTOCOL);
    symm_proto_put32(reply + SYMM_PROTO_HEADER_BYTES + 4, (uint32_t)-1);
    raw_send(c, reply, sizeof reply);
    close(c);
  }
  return NULL;
}

/* A store that refuses the HELLO as malformed: the client says so at once,
 * after one connection, and does not retry. */
TEST_IMPL(store_hello_refused_malformed) {
  refusing_arg_t a = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof sa;
  ASSERT_EQ(bind(a.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(a.lfd, 16), 0);
  ASSERT_EQ(getsockname(a.lfd, (struct sockaddr *)&sa, &alen), 0);
  pthread_t t;
  pthread_create(&t, NULL, refusing_listener, &a);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
  symm_store_t *s = NULL;
  ASSERT_RES(symm_store_connect_comm(addr, k_token, 0, 1, 20000, &s), SYMM_ERR_PROTOCOL);
  ASSERT_STR_CONTAINS(symm_last_error(), "as malformed");
  shutdown(a.lfd, SHUT_RDWR);
  close(a.lfd);
  pthread_join(t, NULL);
  ASSERT_EQ(a.accepted, 1);
  return 0;
}

typedef struct late_server_arg {
  int port, delay_ms, reserved; /* reserved: the socket holding port until the server binds */
  symm_store_server_t *server;
} late_server_arg_t;

static void *late_server_thread(void *p) {
  late_server_arg_t *a = p;
  /* No event tells that the client's connect was refused: a server that
   * comes up later than it is what this checks. */
  usleep((useconds_t)a->delay_ms * 1000u);
  close(a->reserved); /* the port is free for an instant only, not for the whole wait */
  ASSERT_OK(symm_store_server_start("127.0.0.1", a->port, k_token, &a->server));
  return NULL;
}

TEST_IMPL(store_connect_retry) {
  /* A port bound and not listening: connects to it are refused, and no
   * other process (another test's ephemeral port) can take it meanwhile,
   * as it could once a stopped server had freed it. */
  const int reserved = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(reserved >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof sa;
  ASSERT_EQ(bind(reserved, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(getsockname(reserved, (struct sockaddr *)&sa, &alen), 0);
  const int port = ntohs(sa.sin_port);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

  symm_store_t *s = NULL;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_connect(addr, k_token, 0, 300, &s), SYMM_ERR_TIMEOUT);
  uint64_t el = test_now_ms() - t0;
  ASSERT_GE(el, 250);
  ASSERT_LT(el, 1500);
  ASSERT_STR_CONTAINS(symm_last_error(), "within 300 ms");

  /* A server that comes up while the client retries. */
  late_server_arg_t a = {.port = port, .delay_ms = 400, .reserved = reserved};
  pthread_t t;
  pthread_create(&t, NULL, late_server_thread, &a);
  t0 = test_now_ms();
  ASSERT_OK(symm_store_connect(addr, k_token, 0, 10000, &s));
  el = test_now_ms() - t0;
  ASSERT_GE(el, 300);
  ASSERT_LT(el, 5000);
  pthread_join(t, NULL);
  ASSERT_OK(symm_store_set(s, "k", "v", 1));
  symm_store_close(s);
  symm_store_server_stop(a.server);

  ASSERT_RES(symm_store_connect("no.such.host.invalid:1234", k_token, 0, 300, &s),
             SYMM_ERR_INVALID_ARG);
  return 0;
}

TEST_IMPL(store_ipv6) {
  symm_store_server_t *srv = NULL;
  if (symm_store_server_start("::1", 0, k_token, &srv) != SYMM_SUCCESS) {
    printf("SKIP: cannot bind ::1 (%s)\n", symm_last_error());
    return TEST_SKIP;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "[::1]:%d", symm_store_server_port(srv));
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(addr, k_token, 0, 5000, &s));
  ASSERT_OK(symm_store_set(s, "six", "v6", 2));
  get_str(s, "six", "v6");
  symm_store_close(s);
  /* The IPv4 loopback is not served by a ::1 server. */
  snprintf(addr, sizeof addr, "127.0.0.1:%d", symm_store_server_port(srv));
  ASSERT_RES(symm_store_connect(addr, k_token, 0, 200, &s), SYMM_ERR_TIMEOUT);
  symm_store_server_stop(srv);

  ASSERT_OK(symm_store_server_start("[::1]", 0, k_token, &srv));
  symm_store_server_stop(srv);
  return 0;
}

TEST_IMPL(store_server_gone) {
  fixture_t f;
  fx_start(&f);
  symm_store_t *s = fx_client(&f, 0);
  getter_arg_t g = {.s = s, .key = "never", .timeout_ms = 10000, .res = SYMM_SUCCESS};
  pthread_t t;
  pthread_create(&t, NULL, getter_thread, &g);
  wait_parked(&f, 1);
  fx_stop(&f);
  pthread_join(t, NULL);
  ASSERT_RES(g.res, SYMM_ERR_PEER_LOST);
  ASSERT_LT(g.elapsed_ms, 3000);
  ASSERT_STR_CONTAINS(g.err, "store connection lost");
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_set(s, "k", "v", 1), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 500);
  symm_store_close(s);
  return 0;
}

/* A fake store that answers HELLO and then never replies. */
typedef struct stuck_arg {
  int listen_fd;
  int quit[2]; /* the test closes quit[1] when done */
} stuck_arg_t;

static void *stuck_server_thread(void *p) {
  stuck_arg_t *a = p;
  int fd = accept(a->listen_fd, NULL, NULL);
  ASSERT_GE(fd, 0);
  ASSERT(fake_store_handshake(fd, k_token, NULL, 0));
  char b; /* read nothing, answer nothing, until the test is done */
  ASSERT_EQ(read(a->quit[0], &b, 1), 0);
  close(fd);
  return NULL;
}

TEST_IMPL(store_stuck_server) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t sl = sizeof sa;
  getsockname(lfd, (struct sockaddr *)&sa, &sl);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
  stuck_arg_t a = {.listen_fd = lfd};
  ASSERT_EQ(pipe(a.quit), 0);
  pthread_t t;
  pthread_create(&t, NULL, stuck_server_thread, &a);

  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(addr, k_token, 0, 5000, &s));
  char buf[8];
  size_t len;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_store_get(s, "k", buf, sizeof buf, &len, 200), SYMM_ERR_TIMEOUT);
  uint64_t el = test_now_ms() - t0;
  ASSERT_GE(el, 1000); /* the server's 200 ms plus the client's grace */
  ASSERT_LT(el, 3000);
  ASSERT_STR_CONTAINS(symm_last_error(), "no progress");
  /* The stream may now hold a stale reply: later calls fail cleanly. */
  t0 = test_now_ms();
  ASSERT_RES(symm_store_set(s, "k", "v", 1), SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "unusable");
  ASSERT_LT(test_now_ms() - t0, 500);
  symm_store_close(s);
  close(a.quit[1]);
  pthread_join(t, NULL);
  close(a.quit[0]);
  close(lfd);
  return 0;
}
