/* The store client's requests on one key: set, get, add, compare_set and
 * delete, with the public calls that refuse the library's own prefix and
 * the _own calls that do not (symm_store_own.h). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <string.h>

#include "store_client_int.h"

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
