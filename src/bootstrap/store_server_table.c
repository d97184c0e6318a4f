/* The store server's key table: a hash table of chained entries whose
 * seed is random per server.  Knows nothing of connections or requests
 * (store_server_ops.c writes it for them). */
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
symm_result_t srv_table_set(srv_table_t *t, const char *key,
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

bool srv_table_remove(srv_table_t *t, const char *key, uint16_t len,
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
