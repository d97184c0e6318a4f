/* The store server's key table (a hash table of chained entries whose
 * seed is random per server) and the requests that write it: SET, ADD,
 * compare-and-set, DELETE.  Each write wakes the parked requests it
 * completes (store_server_park.c). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_int.h"

uint64_t srv_hash(const srv_table_t *t, const char *key, size_t len) {
  /* FNV-1a has weak low bits for short keys; mix before masking. */
  uint64_t h = symm_hash64(key, len, t->seed);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

int srv_table_init(srv_table_t *t) {
  t->buckets = calloc(SRV_INITIAL_BUCKETS, sizeof *t->buckets);
  if (!t->buckets) return -1;
  t->nbuckets = SRV_INITIAL_BUCKETS;
  t->count = 0;
  symm_random_bytes(&t->seed, sizeof t->seed);
  return 0;
}

void srv_table_free(srv_table_t *t) {
  for (size_t i = 0; t->buckets && i < t->nbuckets; i++) {
    srv_entry_t *e = t->buckets[i];
    while (e) {
      srv_entry_t *next = e->next;
      free(e->value);
      free(e);
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = NULL;
}

static srv_entry_t **srv_table_slot(srv_table_t *t, const char *key,
                                    uint16_t len, uint64_t hash) {
  srv_entry_t **slot = &t->buckets[hash & (t->nbuckets - 1)];
  for (; *slot; slot = &(*slot)->next)
    if ((*slot)->hash == hash && (*slot)->key_len == len &&
        memcmp((*slot)->key, key, len) == 0)
      break;
  return slot;
}

srv_entry_t *srv_table_find(srv_table_t *t, const char *key, uint16_t len, uint64_t hash) {
  return *srv_table_slot(t, key, len, hash);
}

/* Doubling keeps chains short at any key count; a failed grow only costs
 * speed. */
static void srv_table_grow(srv_table_t *t) {
  size_t n = t->nbuckets * 2;
  srv_entry_t **b = calloc(n, sizeof *b);
  if (!b) return;
  for (size_t i = 0; i < t->nbuckets; i++) {
    srv_entry_t *e = t->buckets[i];
    while (e) {
      srv_entry_t *next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = n;
}

/* Sets key to a copy of value.  Returns SYMM_ERR_NO_MEMORY and leaves the
 * old value in place if memory runs out. */
static symm_result_t srv_table_set(srv_table_t *t, const char *key,
                                   uint16_t len, uint64_t hash,
                                   const uint8_t *value, uint32_t vlen) {
  uint8_t *copy = NULL;
  if (vlen) {
    copy = malloc(vlen);
    if (!copy) return SYMM_ERR_NO_MEMORY;
    memcpy(copy, value, vlen);
  }
  srv_entry_t **slot = srv_table_slot(t, key, len, hash);
  srv_entry_t *e = *slot;
  if (!e) {
    e = malloc(sizeof *e + len);
    if (!e) {
      free(copy);
      return SYMM_ERR_NO_MEMORY;
    }
    e->next = NULL;
    e->hash = hash;
    e->key_len = len;
    memcpy(e->key, key, len);
    e->value = NULL;
    *slot = e;
    if (++t->count > t->nbuckets) srv_table_grow(t);
  }
  free(e->value);
  e->value = copy;
  e->value_len = vlen;
  return SYMM_SUCCESS;
}

static bool srv_table_remove(srv_table_t *t, const char *key, uint16_t len,
                             uint64_t hash) {
  srv_entry_t **slot = srv_table_slot(t, key, len, hash);
  srv_entry_t *e = *slot;
  if (!e) return false;
  *slot = e->next;
  free(e->value);
  free(e);
  t->count--;
  return true;
}

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
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  uint64_t h = srv_hash(&s->table, key, klen);
  symm_result_t res = srv_table_set(&s->table, key, klen, h, val, vlen);
  srv_reply_status(c, SYMM_OP_SET, id, res, -1);
  if (res == SYMM_SUCCESS) srv_wake(s, key, klen, h);
}

void srv_do_add(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r) {
  uint16_t klen;
  const char *key = symm_proto_get_key(r, &klen);
  int64_t delta = symm_proto_get_i64(r);
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
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
  if (r->err) {
    srv_conn_reject(s, c, r->err);
    return;
  }
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
  if (!symm_proto_end(r)) {
    srv_conn_reject(s, c, r->err);
    return;
  }
  bool found = srv_table_remove(&s->table, key, klen, srv_hash(&s->table, key, klen));
  srv_reply_status(c, SYMM_OP_DEL, id, found ? SYMM_SUCCESS : SYMM_ERR_NOT_FOUND, -1);
  if (found && s->npending) srv_rescan_pending(s);
}
