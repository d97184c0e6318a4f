/* The store server's requests that write the key table: SET, ADD,
 * compare-and-set, DELETE.  Each write wakes the parked requests it
 * completes (store_server_park.c).  A malformed request leaves its
 * reader's error for the dispatcher, which closes the connection. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_int.h"

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

void srv_do_set(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r) {
  uint16_t klen;
  uint32_t vlen;
  const char *key = symm_proto_get_key(r, &klen);
  const uint8_t *val = symm_proto_get_value(r, &vlen);
  if (!symm_proto_end(r)) return; /* malformed: r->err, the dispatcher closes */
  uint64_t h = srv_hash(&s->table, key, klen);
  symm_result_t res = srv_table_set(&s->table, key, klen, h, val, vlen);
  srv_reply_status(c, SYMM_OP_SET, id, res, -1);
  if (res == SYMM_SUCCESS) srv_wake(s, key, klen, h);
}

void srv_do_add(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r) {
  uint16_t klen;
  const char *key = symm_proto_get_key(r, &klen);
  int64_t delta = symm_proto_get_i64(r);
  if (!symm_proto_end(r)) return; /* malformed: r->err, the dispatcher closes */
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

void srv_do_cas(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r) {
  uint16_t klen;
  uint32_t elen, dlen;
  const char *key = symm_proto_get_key(r, &klen);
  uint8_t expect_present = symm_proto_get_u8(r);
  const uint8_t *expected = symm_proto_get_value(r, &elen);
  const uint8_t *desired = symm_proto_get_value(r, &dlen);
  if (symm_proto_end(r) && (expect_present > 1 || (!expect_present && elen)))
    r->err = "CAS expects absence but carries an expected value";
  if (r->err) return; /* malformed: the dispatcher closes */
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

void srv_do_del(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r) {
  uint16_t klen;
  const char *key = symm_proto_get_key(r, &klen);
  if (!symm_proto_end(r)) return; /* malformed: r->err, the dispatcher closes */
  const uint64_t h = srv_hash(&s->table, key, klen);
  bool found = srv_table_remove(&s->table, key, klen, h);
  srv_reply_status(c, SYMM_OP_DEL, id, found ? SYMM_SUCCESS : SYMM_ERR_NOT_FOUND, -1);
  if (found && s->npending) srv_rescan_pending(s, key, klen, h);
}
