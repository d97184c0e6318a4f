/*
 * The store client: one TCP connection per handle, one request at a time
 * (a mutex serialises callers), every wait bounded by poll() deadlines.
 *
 * Deadlines.  Every call has one deadline, from its entry: its timeout
 * (blocking requests) or the handle's (the others, and connecting), never
 * later than the calling operation's (symm_deadline_after: a store call
 * inside symm_comm_init takes what is left of init's timeout).  Blocking
 * requests carry what is left of it to the server, which answers
 * SYMM_ERR_TIMEOUT when it passes.  The start of the reply must come by the
 * deadline plus a grace (the handle's timeout's symm_timeout_grace_ms, at
 * most CLI_REPLY_GRACE_MAX_MS: cli_grace_end), which only runs out when the
 * server is stuck or gone; sending the request and reading a reply that
 * has begun get the whole grace (cli_transfer_end); so a call returns within its timeout plus the slack that
 * symmem.h states, whatever the server does.
 *
 * Broken handles.  After a socket-level timeout, a malformed reply or a
 * dropped connection, the handle is marked broken: a reply may still be in
 * flight, and reading it as the answer to a later request would be wrong,
 * so every later call fails with SYMM_ERR_PEER_LOST instead.  Request ids
 * are checked only as a sanity test of the stream, not to skip stale
 * replies.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "symm_util.h" /* symm_fork_guard_add / _close */
#include "store_proto.h"

#define CLI_DEFAULT_TIMEOUT_MS 60000
/* How long close waits for the server to acknowledge BYE by closing (less
 * when the calling operation's deadline comes first: symm_op_limit). */
#define CLI_BYE_MS 1000
/* How long past its deadline a request's reply may still come before the
 * server counts as stuck: the grace of the handle's timeout, at most this
 * (a live server's answer takes far less; a call then returns within its
 * timeout plus at most its slack). */
#define CLI_REPLY_GRACE_MAX_MS 1000
#define CLI_BACKOFF_MAX_MS 250
/* Connections a client tries when the server closes them before it answers
 * HELLO (symm_store_connect_comm). */
#define CLI_HELLO_ATTEMPTS 8
/* Request / reply buffers grown past this are freed after the call. */
#define CLI_BUF_KEEP (1u << 20)

struct symm_store {
  pthread_mutex_t lock;
  int fd;
  int rank;
  uint32_t comm; /* said in HELLO unless SYMM_STORE_NO_COMM */
  bool job_ranks;  /* said in HELLO: rank is the process's launcher rank */
  int timeout_ms;      /* used for negative timeouts and non-blocking ops */
  int server_rank;     /* the rank serving the store, for messages; -1: not a rank */
  int size;            /* ranks of the communicator (lost ranks are below it); 0: not said */
  uint32_t next_id;
  uint32_t reply_id;   /* id the next reply must carry */
  bool broken;         /* see the file comment */
  bool torn_request;   /* broken while sending: the server holds half a message */
  char addr[300];      /* for messages */
  symm_proto_buf_t req;
  uint8_t *reply;
  size_t reply_cap;
};

typedef enum { CLI_IO_OK, CLI_IO_TIMEOUT, CLI_IO_CLOSED, CLI_IO_ERROR } cli_io_t;

typedef struct cli_reply {
  symm_result_t status;
  int lost_rank;
  symm_proto_reader_t r; /* payload after status and lost rank */
} cli_reply_t;

/* ------------------------------------------------------------------ I/O */
static uint64_t cli_deadline(uint64_t ms) { return symm_now_ns() + ms * 1000000ull; }

/* Waits until fd is ready for `events` or the deadline passes.  Errors and
 * hang-ups count as ready: the following send/recv reports them. */
static cli_io_t cli_wait(int fd, short events, uint64_t deadline) {
  int rc = symm_poll_until(fd, events, deadline);
  return rc > 0 ? CLI_IO_OK : rc == 0 ? CLI_IO_TIMEOUT : CLI_IO_ERROR;
}

static bool cli_errno_closed(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED;
}

static cli_io_t cli_send_all(int fd, const uint8_t *p, size_t len,
                             uint64_t deadline) {
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      cli_io_t w = cli_wait(fd, POLLOUT, deadline);
      if (w != CLI_IO_OK) return w;
      continue;
    }
    return cli_errno_closed(errno) ? CLI_IO_CLOSED : CLI_IO_ERROR;
  }
  return CLI_IO_OK;
}

static cli_io_t cli_recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline) {
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return CLI_IO_CLOSED;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      cli_io_t w = cli_wait(fd, POLLIN, deadline);
      if (w != CLI_IO_OK) return w;
      continue;
    }
    return cli_errno_closed(errno) ? CLI_IO_CLOSED : CLI_IO_ERROR;
  }
  return CLI_IO_OK;
}

/* ------------------------------------------------------------- requests */
/* " (served by rank 3)" or "", for messages. */
static const char *cli_served_by(const symm_store_t *s, char *buf, size_t cap) {
  buf[0] = 0;
  if (s->server_rank >= 0) snprintf(buf, cap, " (served by rank %d)", s->server_rank);
  return buf;
}

/* Marks the handle unusable and turns an I/O outcome into an error;
 * timeout_ms is the call's, for the message. */
static symm_result_t cli_io_error(symm_store_t *s, cli_io_t io, const char *what,
                                  int timeout_ms) {
  s->broken = true;
  char by[40];
  switch (io) {
    case CLI_IO_TIMEOUT:
      return symm_error(SYMM_ERR_TIMEOUT, "store %s: no progress with the store at %s%s within "
                        "%d ms (stopped, or too busy)", what, s->addr,
                        cli_served_by(s, by, sizeof by), timeout_ms);
    case CLI_IO_CLOSED:
      return symm_error(SYMM_ERR_PEER_LOST, "store %s: store connection lost (%s)",
                        what, s->addr);
    default:
      return symm_error_errno("store %s: socket to %s", what, s->addr);
  }
}

static symm_result_t cli_bad_reply(symm_store_t *s, const char *what,
                                   const char *why) {
  s->broken = true;
  return symm_error(SYMM_ERR_PROTOCOL, "store %s: malformed reply from %s: %s",
                    what, s->addr, why);
}

/* Starts a request in s->req; the caller appends the body. */
static size_t cli_begin(symm_store_t *s, uint8_t op) {
  s->req.len = 0;
  s->req.failed = false;
  s->reply_id = ++s->next_id;
  return symm_proto_begin(&s->req, op, s->next_id);
}

/* deadline plus the grace for a server's answer to a call whose timeout
 * is timeout_ms (at most CLI_REPLY_GRACE_MAX_MS), within the
 * calling operation's time. */
static uint64_t cli_grace_end(uint64_t deadline, int timeout_ms) {
  int grace = symm_timeout_grace_ms(timeout_ms);
  if (grace > CLI_REPLY_GRACE_MAX_MS) grace = CLI_REPLY_GRACE_MAX_MS;
  return symm_op_limit(deadline + (uint64_t)grace * 1000000ull);
}

/* deadline plus the grace of the handle's timeout: for moving the
 * bytes of a request or of a reply that has begun (16 MiB take a while on
 * a slow link or a loaded machine), within the calling operation's time. */
static uint64_t cli_transfer_end(const symm_store_t *s, uint64_t deadline) {
  return symm_op_limit(deadline + (uint64_t)symm_timeout_grace_ms(s->timeout_ms) * 1000000ull);
}

/* The deadline of a request that does not wait: the handle's timeout. */
static uint64_t cli_plain_deadline(const symm_store_t *s) {
  return symm_deadline_after(s->timeout_ms);
}

/* Reads the reply to the request just sent, whose deadline is `deadline`:
 * its header by the server's grace (cli_grace_end), then its body by
 * cli_transfer_end; timeout_ms is the call's, for messages. */
static symm_result_t cli_read_reply(symm_store_t *s, uint8_t op,
                                    const char *what, uint64_t deadline, int timeout_ms,
                                    cli_reply_t *rep) {
  uint8_t hdr[SYMM_PROTO_HEADER_BYTES];
  cli_io_t io = cli_recv_all(s->fd, hdr, sizeof hdr, cli_grace_end(deadline, s->timeout_ms));
  if (io != CLI_IO_OK) return cli_io_error(s, io, what, timeout_ms);
  symm_proto_header_t h;
  symm_proto_decode_header(hdr, &h);
  if (h.magic != SYMM_PROTO_MAGIC || h.version != SYMM_PROTO_VERSION || h.reserved)
    return cli_bad_reply(s, what, "bad magic or version (is this a symmem store?)");
  if (h.opcode != (op | SYMM_PROTO_REPLY_FLAG) || h.id != s->reply_id)
    return cli_bad_reply(s, what, "reply to another request");
  if (h.body_len < SYMM_PROTO_REPLY_PREFIX || h.body_len > SYMM_PROTO_MAX_REPLY)
    return cli_bad_reply(s, what, "reply length out of range");
  if (h.body_len > s->reply_cap) {
    uint8_t *p = realloc(s->reply, h.body_len);
    if (!p) {
      s->broken = true; /* the unread body would desynchronise the stream */
      return symm_error(SYMM_ERR_NO_MEMORY, "store %s: no memory for a %u-byte reply",
                        what, h.body_len);
    }
    s->reply = p;
    s->reply_cap = h.body_len;
  }
  io = cli_recv_all(s->fd, s->reply, h.body_len, cli_transfer_end(s, deadline));
  if (io != CLI_IO_OK) return cli_io_error(s, io, what, timeout_ms);
  symm_proto_reader_init(&rep->r, s->reply, h.body_len);
  uint32_t status = symm_proto_get_u32(&rep->r);
  rep->lost_rank = symm_proto_get_i32(&rep->r);
  if (status > SYMM_ERR_INTERNAL) return cli_bad_reply(s, what, "unknown status");
  /* The body was read whole, so the stream is still in step: the reply is
   * refused, the connection kept. */
  if (rep->lost_rank < -1 || (s->size > 0 && rep->lost_rank >= s->size))
    return symm_error(SYMM_ERR_PROTOCOL, "store %s: reply from %s names rank %d lost, not a "
                      "rank of %d", what, s->addr, rep->lost_rank, s->size);
  rep->status = (symm_result_t)status;
  return SYMM_SUCCESS;
}

/* Sends the request begun at `at`, whose deadline is `deadline`, and reads
 * its reply (cli_read_reply).  Returns a transport error (handle then
 * broken) or SYMM_SUCCESS with the server's status in rep. */
static symm_result_t cli_call(symm_store_t *s, uint8_t op, size_t at, uint64_t deadline,
                              int timeout_ms, const char *what, cli_reply_t *rep) {
  if (s->broken)
    return symm_error(SYMM_ERR_PEER_LOST,
                      "store %s: connection to %s unusable after an earlier failure",
                      what, s->addr);
  if (s->req.failed)
    return symm_error(SYMM_ERR_NO_MEMORY, "store %s: no memory for the request", what);
  symm_proto_finish(&s->req, at);
  cli_io_t io = cli_send_all(s->fd, s->req.data, s->req.len, cli_transfer_end(s, deadline));
  if (io != CLI_IO_OK) {
    s->torn_request = true;
    return cli_io_error(s, io, what, timeout_ms);
  }
  return cli_read_reply(s, op, what, deadline, timeout_ms, rep);
}

/* cli_call for a request that does not wait. */
static symm_result_t cli_call_plain(symm_store_t *s, uint8_t op, size_t at, const char *what,
                                    cli_reply_t *rep) {
  return cli_call(s, op, at, cli_plain_deadline(s), s->timeout_ms, what, rep);
}

/* "\"key\"" or "\"key\" and 3 more keys", for messages. */
static const char *cli_subject(char *buf, size_t cap, const char *key, size_t n) {
  if (n > 1)
    snprintf(buf, cap, "\"%.80s\" and %zu more key%s", key, n - 1, n > 2 ? "s" : "");
  else
    snprintf(buf, cap, "\"%.80s\"", key);
  return buf;
}

/* Error for a non-success status from the server.  `detail` explains
 * INVALID_ARG / NOT_FOUND for the operation at hand. */
static symm_result_t cli_status_error(const cli_reply_t *rep, const char *what,
                                      const char *key, size_t nkeys,
                                      int timeout_ms, const char *detail) {
  char subject[128];
  cli_subject(subject, sizeof subject, key, nkeys);
  switch (rep->status) {
    case SYMM_ERR_PEER_LOST:
      if (rep->lost_rank >= 0)
        return symm_error(SYMM_ERR_PEER_LOST, "store %s %s: rank %d lost", what, subject,
                          rep->lost_rank);
      return symm_error(SYMM_ERR_PEER_LOST, "store %s %s: a rank was lost", what, subject);
    case SYMM_ERR_TIMEOUT:
      return symm_error(SYMM_ERR_TIMEOUT, "store %s %s: not set within %d ms", what,
                        subject, timeout_ms);
    case SYMM_ERR_INVALID_ARG:
    case SYMM_ERR_NOT_FOUND:
      if (detail) return symm_error(rep->status, "store %s %s: %s", what, subject, detail);
      /* fall through */
    default:
      return symm_error(rep->status, "store %s %s: server says %s", what, subject,
                        symm_strerror(rep->status));
  }
}

static void cli_lock(symm_store_t *s) { pthread_mutex_lock(&s->lock); }

/* Drops buffers that one big message grew. */
static void cli_trim(symm_store_t *s) {
  if (s->req.cap > CLI_BUF_KEEP) symm_proto_buf_free(&s->req);
  if (s->reply_cap > CLI_BUF_KEEP) {
    free(s->reply);
    s->reply = NULL;
    s->reply_cap = 0;
  }
}

static void cli_unlock(symm_store_t *s) {
  cli_trim(s);
  pthread_mutex_unlock(&s->lock);
}

/* ------------------------------------------------------------ arguments */
static symm_result_t cli_check_key(const char *what, const char *key) {
  if (!key) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key is NULL", what);
  size_t n = strnlen(key, SYMM_STORE_MAX_KEY + 1);
  if (n == 0 || n > SYMM_STORE_MAX_KEY)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key length must be 1..%d bytes",
                      what, SYMM_STORE_MAX_KEY);
  return SYMM_SUCCESS;
}

/* A key the application may write: symm/ is the library's own prefix (every
 * communicator's bootstrap lives there), which a user's write could corrupt. */
static symm_result_t cli_check_user_key(const char *what, const char *key) {
  SYMM_CHECK(cli_check_key(what, key));
  if (strncmp(key, SYMM_STORE_OWN_PREFIX, strlen(SYMM_STORE_OWN_PREFIX)) == 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key \"%s\" is under %s, symmem's own "
                      "prefix; use another one", what, key, SYMM_STORE_OWN_PREFIX);
  return SYMM_SUCCESS;
}

static symm_result_t cli_check_keys(const char *what, const char *const *keys,
                                    size_t n) {
  if (n > SYMM_STORE_MAX_KEYS)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: %zu keys, at most %d", what, n,
                      SYMM_STORE_MAX_KEYS);
  if (n && !keys) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: keys is NULL", what);
  for (size_t i = 0; i < n; i++) SYMM_CHECK(cli_check_key(what, keys[i]));
  return SYMM_SUCCESS;
}

static symm_result_t cli_check_value(const char *what, const void *v, size_t len) {
  if (len > SYMM_STORE_MAX_VALUE)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: value of %zu bytes over the %u-byte limit",
                      what, len, SYMM_STORE_MAX_VALUE);
  if (len && !v) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: value is NULL", what);
  return SYMM_SUCCESS;
}

/* Server-side timeout for a request (negative: the handle's default). */
static int cli_resolve_timeout(const symm_store_t *s, int timeout_ms) {
  return timeout_ms < 0 ? s->timeout_ms : timeout_ms;
}

static void cli_put_keys(symm_store_t *s, const char *const *keys, size_t n) {
  symm_proto_put_u32(&s->req, (uint32_t)n);
  for (size_t i = 0; i < n; i++) symm_proto_put_key(&s->req, keys[i], strlen(keys[i]));
}

/* Copies a reply value out as symm_store_get documents (cap / *len). */
static symm_result_t cli_copy_value(const char *what, const char *key,
                                    const uint8_t *v, uint32_t vlen, void *buf,
                                    size_t cap, size_t *len) {
  if (len) *len = vlen;
  if (vlen > cap)
    return symm_error(SYMM_ERR_NO_MEMORY,
                      "store %s \"%.80s\": value is %u bytes, buffer only %zu", what, key,
                      vlen, cap);
  if (vlen) memcpy(buf, v, vlen);
  return SYMM_SUCCESS;
}

/* --------------------------------------------------------- public calls */
symm_result_t symm_store_set(symm_store_t *store, const char *key,
                             const void *value, size_t len) {
  SYMM_CHECK(cli_check_user_key("set", key));
  return symm_store_set_own(store, key, value, len);
}

symm_result_t symm_store_set_own(symm_store_t *store, const char *key, const void *value,
                                 size_t len) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store set: store is NULL");
  SYMM_CHECK(cli_check_key("set", key));
  SYMM_CHECK(cli_check_value("set", value, len));
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_SET);
  symm_proto_put_key(&store->req, key, strlen(key));
  symm_proto_put_value(&store->req, value, len);
  cli_reply_t rep;
  symm_result_t res = cli_call_plain(store, SYMM_OP_SET, at, "set", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS)
    res = cli_status_error(&rep, "set", key, 1, 0, NULL);
  else if (res == SYMM_SUCCESS && !symm_proto_end(&rep.r))
    res = cli_bad_reply(store, "set", rep.r.err);
  cli_unlock(store);
  return res;
}

symm_result_t symm_store_get(symm_store_t *store, const char *key, void *buf,
                             size_t cap, size_t *len, int timeout_ms) {
  if (!store || !len || (!buf && cap))
    return symm_error(SYMM_ERR_INVALID_ARG, "store get: NULL store, len or buffer");
  SYMM_CHECK(cli_check_key("get", key));
  *len = 0;
  cli_lock(store);
  int t = cli_resolve_timeout(store, timeout_ms);
  const uint64_t deadline = symm_deadline_after(t);
  size_t at = cli_begin(store, SYMM_OP_GET);
  symm_proto_put_key(&store->req, key, strlen(key));
  symm_proto_put_i32(&store->req, symm_ms_until(deadline));
  cli_reply_t rep;
  symm_result_t res =
      cli_call(store, SYMM_OP_GET, at, deadline, t, "get", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS) {
    res = cli_status_error(&rep, "get", key, 1, t, NULL);
  } else if (res == SYMM_SUCCESS) {
    uint32_t vlen;
    const uint8_t *v = symm_proto_get_value(&rep.r, &vlen);
    if (!symm_proto_end(&rep.r))
      res = cli_bad_reply(store, "get", rep.r.err);
    else
      res = cli_copy_value("get", key, v, vlen, buf, cap, len);
  }
  cli_unlock(store);
  return res;
}

symm_result_t symm_store_add(symm_store_t *store, const char *key,
                             int64_t delta, int64_t *result) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store add: store is NULL");
  SYMM_CHECK(cli_check_user_key("add", key));
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_ADD);
  symm_proto_put_key(&store->req, key, strlen(key));
  symm_proto_put_i64(&store->req, delta);
  cli_reply_t rep;
  symm_result_t res = cli_call_plain(store, SYMM_OP_ADD, at, "add", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS) {
    res = cli_status_error(&rep, "add", key, 1, 0,
                           "value is not an integer counter, or the sum overflows");
  } else if (res == SYMM_SUCCESS) {
    int64_t v = symm_proto_get_i64(&rep.r);
    if (!symm_proto_end(&rep.r))
      res = cli_bad_reply(store, "add", rep.r.err);
    else if (result)
      *result = v;
  }
  cli_unlock(store);
  return res;
}

/*
 * Besides symmem.h's contract: when the key is absent after the operation
 * (no swap, key missing) *len is 0.  buf NULL with cap 0 means "no copy
 * wanted" and never gives SYMM_ERR_NO_MEMORY.  SYMM_ERR_NO_MEMORY for a
 * small buffer does not undo the swap.
 */
symm_result_t symm_store_compare_set(symm_store_t *store, const char *key,
                                     const void *expected, size_t expected_len,
                                     const void *desired, size_t desired_len,
                                     void *buf, size_t cap, size_t *len) {
  SYMM_CHECK(cli_check_user_key("compare_set", key));
  return symm_store_compare_set_own(store, key, expected, expected_len, desired, desired_len,
                                    buf, cap, len);
}

symm_result_t symm_store_compare_set_own(symm_store_t *store, const char *key,
                                         const void *expected, size_t expected_len,
                                         const void *desired, size_t desired_len, void *buf,
                                         size_t cap, size_t *len) {
  if (!store || (!buf && cap))
    return symm_error(SYMM_ERR_INVALID_ARG, "store compare_set: NULL store or buffer");
  SYMM_CHECK(cli_check_key("compare_set", key));
  SYMM_CHECK(cli_check_value("compare_set", expected, expected_len));
  SYMM_CHECK(cli_check_value("compare_set", desired, desired_len));
  if (len) *len = 0;
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_CAS);
  symm_proto_put_key(&store->req, key, strlen(key));
  symm_proto_put_u8(&store->req, expected != NULL);
  symm_proto_put_value(&store->req, expected, expected_len);
  symm_proto_put_value(&store->req, desired, desired_len);
  cli_reply_t rep;
  symm_result_t res = cli_call_plain(store, SYMM_OP_CAS, at, "compare_set", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS) {
    res = cli_status_error(&rep, "compare_set", key, 1, 0, NULL);
  } else if (res == SYMM_SUCCESS) {
    uint8_t present = symm_proto_get_u8(&rep.r);
    uint32_t vlen;
    const uint8_t *v = symm_proto_get_value(&rep.r, &vlen);
    if (!symm_proto_end(&rep.r) || present > 1 || (!present && vlen))
      res = cli_bad_reply(store, "compare_set", rep.r.err ? rep.r.err : "bad presence flag");
    else if (buf || cap)
      res = cli_copy_value("compare_set", key, v, vlen, buf, cap, len);
    else if (len)
      *len = vlen;
  }
  cli_unlock(store);
  return res;
}

/* Sends WAIT, MGET or CHECK for keys and checks the reply status. */
static symm_result_t cli_keys_call(symm_store_t *store, uint8_t op,
                                   const char *what, const char *const *keys,
                                   size_t n, int t, cli_reply_t *rep) {
  const uint64_t deadline = symm_deadline_after(op == SYMM_OP_CHECK ? store->timeout_ms : t);
  size_t at = cli_begin(store, op);
  if (op != SYMM_OP_CHECK) symm_proto_put_i32(&store->req, symm_ms_until(deadline));
  cli_put_keys(store, keys, n);
  symm_result_t res =
      cli_call(store, op, at, deadline, op == SYMM_OP_CHECK ? store->timeout_ms : t, what, rep);
  if (res == SYMM_SUCCESS && rep->status != SYMM_SUCCESS)
    res = cli_status_error(rep, what, keys[0], n, t,
                           op == SYMM_OP_MGET ? "the values together exceed the reply limit"
                                              : NULL);
  return res;
}

symm_result_t symm_store_wait(symm_store_t *store, const char *const *keys,
                              size_t n, int timeout_ms) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store wait: store is NULL");
  SYMM_CHECK(cli_check_keys("wait", keys, n));
  if (n == 0) return SYMM_SUCCESS;
  cli_lock(store);
  int t = cli_resolve_timeout(store, timeout_ms);
  cli_reply_t rep;
  symm_result_t res = cli_keys_call(store, SYMM_OP_WAIT, "wait", keys, n, t, &rep);
  if (res == SYMM_SUCCESS && !symm_proto_end(&rep.r))
    res = cli_bad_reply(store, "wait", rep.r.err);
  cli_unlock(store);
  return res;
}

/* A WAIT that does not wait, for a key nobody sets: the server answers
 * it with the first loss that concerns this connection, or TIMEOUT. */
int symm_store_lost_rank(symm_store_t *store) {
  if (!store) return -1;
  static const char *const never[] = {SYMM_STORE_OWN_PREFIX ".lost-probe"};
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_WAIT);
  symm_proto_put_i32(&store->req, 0);
  cli_put_keys(store, never, 1);
  cli_reply_t rep;
  int rank = -1;
  if (cli_call_plain(store, SYMM_OP_WAIT, at, "lost probe", &rep) != SYMM_SUCCESS)
    symm_error_clear(); /* the caller goes on as if the store said nothing */
  else if (rep.status == SYMM_ERR_PEER_LOST)
    rank = rep.lost_rank;
  cli_unlock(store);
  return rank;
}

symm_result_t symm_store_check(symm_store_t *store, const char *const *keys,
                               size_t n, int *present) {
  if (!store || !present)
    return symm_error(SYMM_ERR_INVALID_ARG, "store check: NULL store or present");
  SYMM_CHECK(cli_check_keys("check", keys, n));
  *present = 1;
  if (n == 0) return SYMM_SUCCESS;
  cli_lock(store);
  cli_reply_t rep;
  symm_result_t res = cli_keys_call(store, SYMM_OP_CHECK, "check", keys, n, 0, &rep);
  if (res == SYMM_SUCCESS) {
    uint8_t all = symm_proto_get_u8(&rep.r);
    if (!symm_proto_end(&rep.r) || all > 1)
      res = cli_bad_reply(store, "check", rep.r.err ? rep.r.err : "bad presence flag");
    else
      *present = all;
  }
  cli_unlock(store);
  return res;
}

static void cli_free_values(void **values, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(values[i]);
    values[i] = NULL;
  }
}

/* Copies n values out of an MGET reply into malloc'd buffers. */
static symm_result_t cli_take_values(symm_store_t *store, cli_reply_t *rep,
                                     size_t n, void **values, size_t *lens) {
  uint32_t count = symm_proto_get_u32(&rep->r);
  if (!rep->r.err && count != n) return cli_bad_reply(store, "multi_get", "wrong value count");
  for (size_t i = 0; i < n; i++) {
    uint32_t vlen;
    const uint8_t *v = symm_proto_get_value(&rep->r, &vlen);
    if (!v) break;
    values[i] = malloc(vlen ? vlen : 1);
    if (!values[i]) {
      cli_free_values(values, i);
      return symm_error(SYMM_ERR_NO_MEMORY, "store multi_get: out of memory");
    }
    memcpy(values[i], v, vlen);
    lens[i] = vlen;
  }
  if (!symm_proto_end(&rep->r)) {
    cli_free_values(values, n);
    return cli_bad_reply(store, "multi_get", rep->r.err);
  }
  return SYMM_SUCCESS;
}

symm_result_t symm_store_multi_get(symm_store_t *store, const char *const *keys,
                                   size_t n, void **values, size_t *lens,
                                   int timeout_ms) {
  if (!store || (n && (!values || !lens)))
    return symm_error(SYMM_ERR_INVALID_ARG, "store multi_get: NULL store, values or lens");
  SYMM_CHECK(cli_check_keys("multi_get", keys, n));
  if (n == 0) return SYMM_SUCCESS;
  for (size_t i = 0; i < n; i++) {
    values[i] = NULL;
    lens[i] = 0;
  }
  cli_lock(store);
  int t = cli_resolve_timeout(store, timeout_ms);
  cli_reply_t rep;
  symm_result_t res = cli_keys_call(store, SYMM_OP_MGET, "multi_get", keys, n, t, &rep);
  if (res == SYMM_SUCCESS) res = cli_take_values(store, &rep, n, values, lens);
  cli_unlock(store);
  return res;
}

/* Marks absent[i] for each key index a TIMEOUT reply lists (store_proto.h);
 * a reply without the list leaves absent all 0. */
static void cli_take_absent(cli_reply_t *rep, size_t n, uint8_t *absent) {
  if (!absent) return;
  memset(absent, 0, n);
  uint32_t count = symm_proto_get_u32(&rep->r);
  for (uint32_t i = 0; i < count && !rep->r.err; i++) {
    uint32_t at = symm_proto_get_u32(&rep->r);
    if (!rep->r.err && at < n) absent[at] = 1;
  }
}

/* The three requests go out in one write and the server answers them in
 * order, so the whole exchange costs one round trip instead of three. */
symm_result_t symm_store_exchange(symm_store_t *store, const char *del_key, const char *key,
                                  const void *value, size_t len, const char *const *keys,
                                  size_t n, void **values, size_t *lens, int timeout_ms,
                                  uint8_t *absent) {
  if (!store || !values || !lens || n == 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "store exchange: NULL argument or no keys");
  if (absent) memset(absent, 0, n);
  if (del_key) SYMM_CHECK(cli_check_key("exchange", del_key));
  SYMM_CHECK(cli_check_key("exchange", key));
  SYMM_CHECK(cli_check_value("exchange", value, len));
  SYMM_CHECK(cli_check_keys("exchange", keys, n));
  for (size_t i = 0; i < n; i++) {
    values[i] = NULL;
    lens[i] = 0;
  }
  cli_lock(store);
  int t = cli_resolve_timeout(store, timeout_ms);
  const uint64_t deadline = symm_deadline_after(t);
  uint32_t del_id = 0, set_id;
  store->req.len = 0;
  store->req.failed = false;
  if (del_key) {
    size_t at = symm_proto_begin(&store->req, SYMM_OP_DEL, del_id = ++store->next_id);
    symm_proto_put_key(&store->req, del_key, strlen(del_key));
    symm_proto_finish(&store->req, at);
  }
  size_t at = symm_proto_begin(&store->req, SYMM_OP_SET, set_id = ++store->next_id);
  symm_proto_put_key(&store->req, key, strlen(key));
  symm_proto_put_value(&store->req, value, len);
  symm_proto_finish(&store->req, at);
  at = symm_proto_begin(&store->req, SYMM_OP_MGET, ++store->next_id);
  symm_proto_put_i32(&store->req, symm_ms_until(deadline));
  cli_put_keys(store, keys, n);
  /* cli_call finishes the last message, sends the lot, reads one reply. */
  cli_reply_t rep;
  symm_result_t res;
  if (store->broken) {
    res = symm_error(SYMM_ERR_PEER_LOST,
                     "store exchange: connection to %s unusable after an earlier failure",
                     store->addr);
    goto out;
  }
  if (store->req.failed) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "store exchange: no memory for the request");
    goto out;
  }
  symm_proto_finish(&store->req, at);
  cli_io_t io = cli_send_all(store->fd, store->req.data, store->req.len,
                             cli_transfer_end(store, deadline));
  if (io != CLI_IO_OK) {
    store->torn_request = true;
    res = cli_io_error(store, io, "exchange", t);
    goto out;
  }
  if (del_key) {
    store->reply_id = del_id;
    SYMM_CHECK_GOTO(cli_read_reply(store, SYMM_OP_DEL, "exchange", deadline, t, &rep), res, out);
    /* A missing key is fine: the caller deletes what may already be gone. */
    if (rep.status != SYMM_SUCCESS && rep.status != SYMM_ERR_NOT_FOUND) {
      res = cli_status_error(&rep, "exchange delete", del_key, 1, 0, NULL);
      goto out;
    }
  }
  store->reply_id = set_id;
  SYMM_CHECK_GOTO(cli_read_reply(store, SYMM_OP_SET, "exchange", deadline, t, &rep), res, out);
  if (rep.status != SYMM_SUCCESS) {
    /* The MGET reply is still coming: read it so the stream stays in step. */
    symm_result_t set_status = cli_status_error(&rep, "exchange set", key, 1, 0, NULL);
    char saved[512];
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    store->reply_id = store->next_id;
    if (cli_read_reply(store, SYMM_OP_MGET, "exchange", deadline, t, &rep) == SYMM_SUCCESS)
      symm_error_restore(saved);
    res = set_status;
    goto out;
  }
  store->reply_id = store->next_id;
  SYMM_CHECK_GOTO(cli_read_reply(store, SYMM_OP_MGET, "exchange", deadline, t, &rep), res, out);
  if (rep.status == SYMM_ERR_TIMEOUT) cli_take_absent(&rep, n, absent);
  if (rep.status != SYMM_SUCCESS)
    res = cli_status_error(&rep, "exchange", keys[0], n, t, NULL);
  else
    res = cli_take_values(store, &rep, n, values, lens);
out:
  cli_unlock(store);
  return res;
}

symm_result_t symm_store_delete(symm_store_t *store, const char *key) {
  SYMM_CHECK(cli_check_user_key("delete", key));
  return symm_store_delete_own(store, key);
}

symm_result_t symm_store_delete_own(symm_store_t *store, const char *key) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store delete: store is NULL");
  SYMM_CHECK(cli_check_key("delete", key));
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_DEL);
  symm_proto_put_key(&store->req, key, strlen(key));
  cli_reply_t rep;
  symm_result_t res = cli_call_plain(store, SYMM_OP_DEL, at, "delete", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS)
    res = cli_status_error(&rep, "delete", key, 1, 0, "no such key");
  else if (res == SYMM_SUCCESS && !symm_proto_end(&rep.r))
    res = cli_bad_reply(store, "delete", rep.r.err);
  cli_unlock(store);
  return res;
}

/* ------------------------------------------------------------ addresses */
symm_result_t symm_store_parse_addr(const char *addr, char *host, size_t cap,
                                    int *port) {
  if (!addr || !host || !cap || !port)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address: NULL argument");
  const char *h = addr, *colon;
  size_t hlen;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':')
      return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": expected [v6]:port", addr);
    h = addr + 1;
    hlen = (size_t)(close - h);
    colon = close + 1;
  } else {
    /* The last colon splits, so a bare "::1:29500" works too. */
    colon = strrchr(addr, ':');
    if (!colon)
      return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": expected host:port", addr);
    hlen = (size_t)(colon - addr);
  }
  if (hlen == 0 || hlen >= cap)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": empty or too long host", addr);
  const char *p = colon + 1;
  long v = 0;
  if (!*p) v = -1;
  for (; *p && v >= 0; p++)
    v = (*p >= '0' && *p <= '9' && v <= 65535) ? v * 10 + (*p - '0') : -1;
  if (v < 1 || v > 65535)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": port must be 1..65535", addr);
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (int)v;
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------- connect */
static bool cli_connect_retryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ||
         e == ECONNRESET || e == ECONNABORTED || e == EAGAIN || e == EADDRNOTAVAIL;
}

/* One non-blocking connect to ai, waiting until the deadline.  Returns the
 * fd, or -1 with errno set. */
static int cli_connect_one(const struct addrinfo *ai, uint64_t deadline) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0) return -1;
  int err = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      cli_io_t w = cli_wait(fd, POLLOUT, deadline);
      socklen_t len = sizeof err;
      if (w == CLI_IO_TIMEOUT)
        err = ETIMEDOUT;
      else if (w != CLI_IO_OK)
        err = errno;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
  }
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  symm_fork_guard_add(fd);
  return fd;
}

static void cli_sleep_ms(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sleeps *backoff_ms, or what is left until deadline, and doubles
 * *backoff_ms up to CLI_BACKOFF_MAX_MS; false (no sleep) once the deadline
 * has passed. */
static bool cli_backoff(uint64_t *backoff_ms, uint64_t deadline) {
  const uint64_t now = symm_now_ns();
  if (now >= deadline) return false;
  const uint64_t left = (deadline - now) / 1000000ull;
  cli_sleep_ms(*backoff_ms < left ? *backoff_ms : left);
  *backoff_ms = *backoff_ms * 2 > CLI_BACKOFF_MAX_MS ? CLI_BACKOFF_MAX_MS : *backoff_ms * 2;
  return true;
}

static symm_result_t cli_resolve(const char *host, int port, uint64_t deadline,
                                 struct addrinfo **res) {
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  struct addrinfo hints = {0};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  for (;;) {
    int gai = getaddrinfo(host, serv, &hints, res);
    if (gai == 0) return SYMM_SUCCESS;
    /* This process out of memory is no fault of the address. */
    if (gai == EAI_MEMORY)
      return symm_error(SYMM_ERR_NO_MEMORY, "store: resolving \"%s\": %s", host,
                        gai_strerror(gai));
    if (gai != EAI_AGAIN || symm_now_ns() >= deadline)
      return symm_error(SYMM_ERR_INVALID_ARG, "store: cannot resolve \"%s\": %s", host,
                        gai_strerror(gai));
    cli_sleep_ms(50);
  }
}

/* Connects to host:port, retrying refusals with a growing pause until the
 * deadline (a server that is still starting is the common case). */
static symm_result_t cli_connect_retry(const char *host, int port,
                                       uint64_t deadline, int timeout_ms, int *fd) {
  struct addrinfo *res = NULL;
  SYMM_CHECK(cli_resolve(host, port, deadline, &res));
  symm_result_t out = SYMM_SUCCESS;
  uint64_t backoff = 5;
  int last = 0;
  /* A connection under way gets the grace past the deadline (with timeout
   * 0, the single attempt still gets time to complete). */
  uint64_t attempt_deadline = cli_grace_end(deadline, timeout_ms);
  for (;;) {
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      *fd = cli_connect_one(ai, attempt_deadline);
      if (*fd >= 0) goto done;
      last = errno;
      if (!cli_connect_retryable(last)) {
        out = symm_error_errno("store: connect to %s port %d", host, port);
        goto done;
      }
    }
    if (!cli_backoff(&backoff, deadline)) break;
  }
  out = symm_error(SYMM_ERR_TIMEOUT, "store: nothing accepted at %s port %d within %d ms (%s)",
                   host, port, timeout_ms, strerror(last));
done:
  freeaddrinfo(res);
  return out;
}

/* HELLO's communicator and process fields (store_proto.h), so that the
 * server can tell when this process is gone. */
static void cli_put_process(symm_store_t *s) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t ino, dev;
  symm_pid_namespace(&ino, &dev);
  symm_proto_put_u32(&s->req, s->comm);
  symm_proto_put_i32(&s->req, (int32_t)getpid());
  symm_proto_put_i64(&s->req, (int64_t)symm_hash64(host, strlen(host), 0));
  symm_proto_put_i64(&s->req, (int64_t)ino);
  symm_proto_put_i64(&s->req, (int64_t)dev);
  symm_proto_put_u8(&s->req, s->job_ranks ? SYMM_HELLO_JOB_RANKS : 0);
}

/* The handshake (store_proto.h): HELLO with this client's nonce, the
 * server's proof checked before anything that depends on the token is
 * sent, then AUTH with ours.  Both answered by the connect's deadline plus
 * its grace: a server that cannot answer by then (stopped, or swamped)
 * fails the connect. */
static symm_result_t cli_hello(symm_store_t *s, const char *token, uint64_t deadline,
                               int timeout_ms) {
  uint8_t client_nonce[SYMM_PROTO_NONCE], proof[SYMM_PROTO_PROOF];
  symm_random_bytes(client_nonce, sizeof client_nonce);
  size_t at = cli_begin(s, SYMM_OP_HELLO);
  symm_proto_put_bytes(&s->req, client_nonce, sizeof client_nonce);
  symm_proto_put_i32(&s->req, s->rank);
  if (s->rank >= 0) cli_put_process(s);
  cli_reply_t rep;
  symm_result_t res = cli_call(s, SYMM_OP_HELLO, at, deadline, timeout_ms, "hello", &rep);
  if (res != SYMM_SUCCESS) return res;
  if (rep.status == SYMM_ERR_PROTOCOL) {
    s->broken = true;
    return symm_error(SYMM_ERR_PROTOCOL,
                      "store at %s refused rank %d's HELLO as malformed: a store of another "
                      "symmem version? (symmem-run and the library must be the same version)",
                      s->addr, s->rank);
  }
  const uint8_t *server_nonce = symm_proto_take(&rep.r, SYMM_PROTO_NONCE, "truncated nonce");
  const uint8_t *server_proof = symm_proto_take(&rep.r, SYMM_PROTO_PROOF, "truncated proof");
  if (rep.status != SYMM_SUCCESS || !symm_proto_end(&rep.r))
    return cli_bad_reply(s, "hello", rep.r.err ? rep.r.err : "unexpected status");
  symm_proto_proof(token, strlen(token), SYMM_PROTO_SERVER_LABEL, server_nonce, client_nonce,
                   proof);
  if (!symm_secret_equal(proof, server_proof, sizeof proof)) {
    s->broken = true; /* closed without a word more: it learns nothing */
    return symm_error(SYMM_ERR_PERMISSION,
                      "the store at %s did not prove that it holds this job's token: another "
                      "process holds that port, or its SYMM_TOKEN is not this rank's (rank %d "
                      "sent it nothing secret)", s->addr, s->rank);
  }
  symm_proto_proof(token, strlen(token), SYMM_PROTO_CLIENT_LABEL, server_nonce, client_nonce,
                   proof);
  at = cli_begin(s, SYMM_OP_AUTH);
  symm_proto_put_bytes(&s->req, proof, sizeof proof);
  res = cli_call(s, SYMM_OP_AUTH, at, deadline, timeout_ms, "hello", &rep);
  if (res != SYMM_SUCCESS) return res;
  if (rep.status == SYMM_ERR_PERMISSION) {
    s->broken = true; /* the server closes it */
    return symm_error(SYMM_ERR_PERMISSION,
                      "store at %s refused rank %d: wrong token (check SYMM_TOKEN)",
                      s->addr, s->rank);
  }
  if (rep.status != SYMM_SUCCESS || !symm_proto_end(&rep.r))
    return cli_bad_reply(s, "hello", rep.r.err ? rep.r.err : "unexpected status");
  return SYMM_SUCCESS;
}

static void cli_free(symm_store_t *s, bool destroy_lock) {
  if (s->fd >= 0) symm_fork_guard_close(s->fd);
  symm_proto_buf_free(&s->req);
  free(s->reply);
  if (destroy_lock) pthread_mutex_destroy(&s->lock);
  free(s);
}

symm_result_t symm_store_connect(const char *addr, const char *token, int rank,
                                 int timeout_ms, symm_store_t **store) {
  return symm_store_connect_comm(addr, token, rank, SYMM_STORE_NO_COMM, timeout_ms, store);
}

/* One connection and HELLO, until deadline. */
static symm_result_t cli_open(const char *addr, const char *host, int port, const char *token,
                              int rank, uint32_t comm, bool job_ranks, uint64_t deadline,
                              int timeout_ms, symm_store_t **out) {
  symm_result_t res = SYMM_SUCCESS;
  symm_store_t *s = calloc(1, sizeof *s);
  if (!s) return symm_error(SYMM_ERR_NO_MEMORY, "store connect: out of memory");
  pthread_mutex_init(&s->lock, NULL);
  s->fd = -1;
  s->rank = rank;
  s->comm = comm;
  s->job_ranks = job_ranks;
  s->timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
  s->server_rank = -1;
  snprintf(s->addr, sizeof s->addr, "%s", addr);
  SYMM_CHECK_GOTO(cli_connect_retry(host, port, deadline, timeout_ms, &s->fd), res, fail);
  int one = 1;
  setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SYMM_CHECK_GOTO(cli_hello(s, token, deadline, timeout_ms), res, fail);
  cli_trim(s);
  *out = s;
  return SYMM_SUCCESS;
fail:
  cli_free(s, true);
  return res;
}

symm_result_t symm_store_connect_comm(const char *addr, const char *token, int rank,
                                      uint32_t comm, int timeout_ms, symm_store_t **store) {
  return symm_store_connect_rank(addr, token, rank, comm, false, timeout_ms, store);
}

symm_result_t symm_store_connect_rank(const char *addr, const char *token, int rank,
                                      uint32_t comm, bool job_ranks, int timeout_ms,
                                      symm_store_t **store) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store connect: store is NULL");
  *store = NULL;
  if (!token) token = "";
  if (strlen(token) > SYMM_PROTO_MAX_TOKEN)
    return symm_error(SYMM_ERR_INVALID_ARG, "store connect: token over %d bytes",
                      SYMM_PROTO_MAX_TOKEN);
  if (rank < -1) return symm_error(SYMM_ERR_INVALID_ARG, "store connect: rank %d < -1", rank);
  char host[256];
  int port;
  SYMM_CHECK(symm_store_parse_addr(addr, host, sizeof host, &port));
  int t = timeout_ms < 0 ? CLI_DEFAULT_TIMEOUT_MS : timeout_ms;
  uint64_t deadline = symm_deadline_after(t);
  uint64_t backoff = 1;
  for (int attempt = 1;; attempt++) {
    symm_result_t res = cli_open(addr, host, port, token, rank, comm, job_ranks, deadline, t,
                                 store);
    /* Closed before HELLO was answered: a store that was stopping (the
     * serving rank's previous communicator) while its successor on this
     * address starts.  Connect again, as to a store not listening yet:
     * a few times, since a stopping store is not listening again after it
     * closed; what keeps closing is no store of ours. */
    if (res != SYMM_ERR_PEER_LOST || symm_now_ns() >= deadline) return res;
    if (attempt == CLI_HELLO_ATTEMPTS)
      return symm_error(SYMM_ERR_PROTOCOL,
                        "store at %s closed the connection %d times before answering HELLO: "
                        "not a symmem store of this version?", addr, attempt);
    SYMM_INFO(STORE, "store at %s closed the connection before HELLO was answered; "
              "connecting again", addr);
    cli_backoff(&backoff, deadline);
  }
}

void symm_store_set_server_rank(symm_store_t *store, int rank) {
  if (!store) return;
  cli_lock(store);
  store->server_rank = rank;
  cli_unlock(store);
}

void symm_store_set_size(symm_store_t *store, int size) {
  if (!store) return;
  cli_lock(store);
  store->size = size;
  cli_unlock(store);
}

void symm_store_set_timeout(symm_store_t *store, int timeout_ms) {
  if (!store) return;
  cli_lock(store);
  store->timeout_ms = timeout_ms > 0 ? timeout_ms : CLI_DEFAULT_TIMEOUT_MS;
  cli_unlock(store);
}

/* Says BYE and waits (briefly) for the server to close its end, so the
 * server has seen the BYE before this process moves on, and no unread
 * reply turns our close into a reset. */
static void cli_say_bye(symm_store_t *s) {
  size_t at = cli_begin(s, SYMM_OP_BYE);
  if (s->req.failed) return;
  symm_proto_finish(&s->req, at);
  uint64_t deadline = symm_op_limit(cli_deadline(CLI_BYE_MS));
  if (cli_send_all(s->fd, s->req.data, s->req.len, deadline) != CLI_IO_OK) return;
  shutdown(s->fd, SHUT_WR);
  uint8_t sink[4096];
  for (;;) {
    ssize_t n = recv(s->fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return;
    if (cli_wait(s->fd, POLLIN, deadline) != CLI_IO_OK) return;
  }
}

void symm_store_close(symm_store_t *store) {
  if (!store) return;
  cli_lock(store);
  if (store->fd >= 0 && !store->torn_request) cli_say_bye(store);
  pthread_mutex_unlock(&store->lock);
  cli_free(store, true);
}

/* No BYE, and the mutex is left alone: in a fork()ed child it may be held
 * by a thread that does not exist here. */
void symm_store_abandon(symm_store_t *store) {
  if (!store) return;
  cli_free(store, false);
}
