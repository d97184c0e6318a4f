/* The store client's requests that bring back many values: MGET, and the
 * bootstrap's exchange (DEL, SET and MGET in one round trip). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_client_int.h"

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
