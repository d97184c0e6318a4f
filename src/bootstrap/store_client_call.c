/* One request of the store client and its reply: the request's deadlines
 * and grace, reading and checking the reply, the errors a call returns,
 * and the handle's lock. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_client_int.h"

/* How long past its deadline a request's reply may still come before the
 * server counts as stuck: the grace of the handle's timeout, at most this
 * (a live server's answer takes far less; a call then returns within its
 * timeout plus at most its slack). */
#define CLI_REPLY_GRACE_MAX_MS 1000
/* Request / reply buffers grown past this are freed after the call. */
#define CLI_BUF_KEEP (1u << 20)

/* " (served by rank 3)" or "", for messages. */
static const char *cli_served_by(const symm_store_t *s, char *buf, size_t cap) {
  buf[0] = 0;
  if (s->server_rank >= 0) snprintf(buf, cap, " (served by rank %d)", s->server_rank);
  return buf;
}

/* Marks the handle unusable and turns an I/O outcome into an error;
 * timeout_ms is the call's, for the message. */
symm_result_t cli_io_error(symm_store_t *s, cli_io_t io, const char *what,
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

symm_result_t cli_bad_reply(symm_store_t *s, const char *what,
                            const char *why) {
  s->broken = true;
  return symm_error(SYMM_ERR_PROTOCOL, "store %s: malformed reply from %s: %s",
                    what, s->addr, why);
}

/* Starts a request in s->req; the caller appends the body. */
size_t cli_begin(symm_store_t *s, uint8_t op) {
  s->req.len = 0;
  s->req.failed = false;
  s->reply_id = ++s->next_id;
  return symm_proto_begin(&s->req, op, s->next_id);
}

/* deadline plus the grace for a server's answer to a call whose timeout
 * is timeout_ms (at most CLI_REPLY_GRACE_MAX_MS), within the
 * calling operation's time. */
uint64_t cli_grace_end(uint64_t deadline, int timeout_ms) {
  int grace = symm_timeout_grace_ms(timeout_ms);
  if (grace > CLI_REPLY_GRACE_MAX_MS) grace = CLI_REPLY_GRACE_MAX_MS;
  return symm_op_limit(deadline + (uint64_t)grace * 1000000ull);
}

/* deadline plus the grace of the handle's timeout: for moving the
 * bytes of a request or of a reply that has begun (16 MiB take a while on
 * a slow link or a loaded machine), within the calling operation's time. */
uint64_t cli_transfer_end(const symm_store_t *s, uint64_t deadline) {
  return symm_op_limit(deadline + (uint64_t)symm_timeout_grace_ms(s->timeout_ms) * 1000000ull);
}

/* The deadline of a request that does not wait: the handle's timeout. */
static uint64_t cli_plain_deadline(const symm_store_t *s) {
  return symm_deadline_after(s->timeout_ms);
}

/* Reads the reply to the request just sent, whose deadline is `deadline`:
 * its header by the server's grace (cli_grace_end), then its body by
 * cli_transfer_end; timeout_ms is the call's, for messages. */
symm_result_t cli_read_reply(symm_store_t *s, uint8_t op,
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
symm_result_t cli_call(symm_store_t *s, uint8_t op, size_t at, uint64_t deadline,
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
symm_result_t cli_call_plain(symm_store_t *s, uint8_t op, size_t at, const char *what,
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
symm_result_t cli_status_error(const cli_reply_t *rep, const char *what,
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

void cli_lock(symm_store_t *s) { pthread_mutex_lock(&s->lock); }

/* Drops buffers that one big message grew. */
void cli_trim(symm_store_t *s) {
  if (s->req.cap > CLI_BUF_KEEP) symm_proto_buf_free(&s->req);
  if (s->reply_cap > CLI_BUF_KEEP) {
    free(s->reply);
    s->reply = NULL;
    s->reply_cap = 0;
  }
}

void cli_unlock(symm_store_t *s) {
  cli_trim(s);
  pthread_mutex_unlock(&s->lock);
}

/* Server-side timeout for a request (negative: the handle's default). */
int cli_resolve_timeout(const symm_store_t *s, int timeout_ms) {
  return timeout_ms < 0 ? s->timeout_ms : timeout_ms;
}

void cli_put_keys(symm_store_t *s, const char *const *keys, size_t n) {
  symm_proto_put_u32(&s->req, (uint32_t)n);
  for (size_t i = 0; i < n; i++) symm_proto_put_key(&s->req, keys[i], strlen(keys[i]));
}

/* Sends WAIT, MGET or CHECK for keys and checks the reply status. */
symm_result_t cli_keys_call(symm_store_t *store, uint8_t op,
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
