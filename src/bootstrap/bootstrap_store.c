/* Bootstrap collectives over the key-value store.
 *
 * All-gather: rank r sets "<prefix>ag/<seq>/<r>" and fetches all N keys with
 * one blocking MGET.  Broadcast is an all-gather with tiny contributions
 * from the non-roots, so that every collective synchronises all ranks.
 *
 * A round completes for every rank or for none: once a rank has every
 * key, it sets the round's verdict "<prefix>ag/<seq>/v" to "1" if it is
 * absent; a rank that stops waiting sets it to "0" if it is absent.  The
 * store's compare-and-set makes the first one the verdict, which every
 * rank then follows: a rank that came late (slow, or stopped) fails where
 * its peers gave up, and one that gave up at the moment the last key came
 * finds "1" and completes.  A round costs each rank two round trips.
 *
 * Cleanup: rank r deletes its own key of round k - 2 when it enters k, and
 * rank 0 that round's verdict, but only after round k - 1 completed (every
 * rank has then finished k - 2).  After a round that did not, the keys
 * stay, so that a late rank still finds them and learns the verdict at
 * once.  A rank that died makes the store answer PEER_LOST instead of
 * letting the others wait out the timeout. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

typedef struct {
  symm_store_t *store;
  char prefix[128];
  uint64_t seq;
  char **keys;   /* [size] scratch */
  void **values; /* [size] scratch for allgather / broadcast */
  size_t *lens;
  uint8_t *absent; /* [size]: keys the store lacked at a timeout */
  uint64_t kept_from; /* the first round whose keys this rank still keeps */
  bool last_ok;       /* the last round completed */
} store_bs_t;

static void key_name(const store_bs_t *s, uint64_t seq, int rank, char *out, size_t cap) {
  snprintf(out, cap, "%sag/%llu/%d", s->prefix, (unsigned long long)seq, rank);
}

static void verdict_name(const store_bs_t *s, uint64_t seq, char *out, size_t cap) {
  snprintf(out, cap, "%sag/%llu/v", s->prefix, (unsigned long long)seq);
}

/* Sets round seq's verdict to `mine` unless it has one; *done: the verdict
 * that holds is "1" (the round completed). */
static symm_result_t settle(symm_bootstrap_t *bs, uint64_t seq, char mine, bool *done) {
  store_bs_t *s = bs->state;
  char key[192], got[4] = "";
  size_t n = 0;
  verdict_name(s, seq, key, sizeof key);
  SYMM_CHECK(symm_store_compare_set_own(s->store, key, NULL, 0, &mine, 1, got, sizeof got, &n));
  *done = n == 1 && got[0] == '1';
  return SYMM_SUCCESS;
}

/* The error of a rank that finds round seq given up: a lost rank if the
 * store knows one (its loss is why the peers gave up, or will end the job
 * anyway), else this rank came late. */
static symm_result_t late_error(const symm_bootstrap_t *bs, uint64_t seq) {
  const store_bs_t *s = bs->state;
  const int lost = symm_store_lost_rank(s->store);
  if (lost >= 0)
    return symm_error(SYMM_ERR_PEER_LOST, "bootstrap: rank %d was lost; collective #%llu was "
                      "given up, and fails on every rank", lost, (unsigned long long)seq);
  return symm_error(SYMM_ERR_TIMEOUT, "bootstrap: collective #%llu was given up by a rank that "
                    "stopped waiting before every rank arrived (this rank came late: slow, or "
                    "stopped); it fails on every rank", (unsigned long long)seq);
}

/* Deletes what this rank keeps of rounds before `upto` (its own keys; rank
 * 0 also the verdicts), once every rank has finished them. */
static void drop_kept(symm_bootstrap_t *bs, uint64_t upto, const char *skip) {
  store_bs_t *s = bs->state;
  char key[192];
  for (; s->kept_from < upto; s->kept_from++) {
    key_name(s, s->kept_from, bs->rank, key, sizeof key);
    if ((!skip || strcmp(key, skip) != 0) && symm_store_delete_own(s->store, key) != SYMM_SUCCESS)
      symm_error_clear();
    verdict_name(s, s->kept_from, key, sizeof key);
    if (bs->rank == 0 && symm_store_delete_own(s->store, key) != SYMM_SUCCESS)
      symm_error_clear();
  }
}

/* The error for a collective that timed out: the ranks whose keys the
 * store still lacked at the deadline (its TIMEOUT answer says which; a
 * store that did not say is asked), which is what the user needs.  When
 * the store itself did not answer, its message (naming it) stands. */
static symm_result_t missing_error(symm_bootstrap_t *bs, uint64_t seq) {
  store_bs_t *s = bs->state;
  char missing[256] = "", saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  bool told = false;
  for (int r = 0; r < bs->size; r++) told |= s->absent[r] != 0;
  size_t n = 0;
  for (int r = 0; r < bs->size && n + 16 < sizeof missing; r++) {
    int present = !s->absent[r];
    const char *k = s->keys[r];
    if (!told && symm_store_check(s->store, &k, 1, &present) != SYMM_SUCCESS) {
      symm_error_restore(saved);
      return SYMM_ERR_TIMEOUT;
    }
    if (!present)
      n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? "," : "", r);
  }
  if (!n)
    return symm_error(SYMM_ERR_TIMEOUT,
                      "bootstrap: collective #%llu gave up after %d ms, by when every rank "
                      "had arrived (one came late: slow, or stopped for a while)",
                      (unsigned long long)seq, bs->timeout_ms);
  return symm_error(SYMM_ERR_TIMEOUT,
                    "bootstrap: ranks [%s] did not arrive within %d ms (collective #%llu)",
                    missing, bs->timeout_ms, (unsigned long long)seq);
}

/* Gathers variable-length contributions; values[i] are malloc'd. */
static symm_result_t store_gather(symm_bootstrap_t *bs, const void *send, size_t len,
                                  void **values, size_t *lens) {
  store_bs_t *s = bs->state;
  const uint64_t seq = ++s->seq;
  char key[192], old[192];
  const bool clean = s->last_ok && seq > 2;
  /* Every rank finished round seq - 2 before it set its key of seq - 1,
   * and seq - 1 completed: nobody can still need our keys before seq - 1.
   * The exchange deletes the one of seq - 2, drop_kept the rest. */
  if (clean) {
    key_name(s, seq - 2, bs->rank, old, sizeof old);
    drop_kept(bs, seq - 1, old);
  }
  key_name(s, seq, bs->rank, key, sizeof key);
  for (int r = 0; r < bs->size; r++) key_name(s, seq, r, s->keys[r], 192);
  s->last_ok = false;
  symm_result_t res = symm_store_exchange(s->store, clean ? old : NULL, key, send, len,
                                          (const char *const *)s->keys, (size_t)bs->size, values,
                                          lens, bs->timeout_ms, s->absent);
  if (!s->kept_from) s->kept_from = seq;
  bool done = false;
  if (res == SYMM_SUCCESS) {
    symm_result_t v = settle(bs, seq, '1', &done);
    if (v == SYMM_SUCCESS && done) {
      s->last_ok = true;
      return SYMM_SUCCESS;
    }
    for (int r = 0; r < bs->size; r++) {
      free(values[r]);
      values[r] = NULL;
    }
    return v != SYMM_SUCCESS ? v : late_error(bs, seq);
  }
  if (res != SYMM_ERR_TIMEOUT && res != SYMM_ERR_PEER_LOST) return res;
  /* Give the round up, unless every rank arrived meanwhile. */
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  if (settle(bs, seq, '0', &done) == SYMM_SUCCESS && done) {
    res = symm_store_multi_get(s->store, (const char *const *)s->keys, (size_t)bs->size, values,
                               lens, bs->timeout_ms);
    s->last_ok = res == SYMM_SUCCESS;
    return res;
  }
  symm_error_restore(saved);
  if (res == SYMM_ERR_TIMEOUT) return missing_error(bs, seq);
  return res;
}

/* Gathers into the bootstrap's own scratch arrays; release_scratch frees
 * the values afterwards. */
static symm_result_t gather_scratch(symm_bootstrap_t *bs, const void *send, size_t len) {
  store_bs_t *s = bs->state;
  return store_gather(bs, send, len, s->values, s->lens);
}

static void release_scratch(symm_bootstrap_t *bs) {
  store_bs_t *s = bs->state;
  for (int r = 0; r < bs->size; r++) {
    free(s->values[r]);
    s->values[r] = NULL;
  }
}

static symm_result_t store_allgather(symm_bootstrap_t *bs, const void *send, size_t len,
                                     void *recv) {
  store_bs_t *s = bs->state;
  SYMM_CHECK(gather_scratch(bs, send, len));
  symm_result_t res = SYMM_SUCCESS;
  for (int r = 0; r < bs->size; r++) {
    if (s->lens[r] != len) {
      res = symm_error(SYMM_ERR_MISMATCH,
                       "bootstrap: rank %d contributed %zu bytes to an all-gather where rank %d "
                       "contributed %zu (ranks are in different collectives)",
                       r, s->lens[r], bs->rank, len);
      break;
    }
    memcpy((char *)recv + (size_t)r * len, s->values[r], len);
  }
  release_scratch(bs);
  return res;
}

static symm_result_t store_broadcast(symm_bootstrap_t *bs, void *buf, size_t len, int root) {
  store_bs_t *s = bs->state;
  uint8_t none = 0;
  if (bs->rank == root) SYMM_CHECK(gather_scratch(bs, buf, len));
  else SYMM_CHECK(gather_scratch(bs, &none, 1));
  symm_result_t res = SYMM_SUCCESS;
  if (s->lens[root] != len)
    res = symm_error(SYMM_ERR_MISMATCH, "bootstrap: broadcast of %zu bytes from rank %d, "
                     "rank %d expected %zu", s->lens[root], root, bs->rank, len);
  else if (bs->rank != root)
    memcpy(buf, s->values[root], len);
  release_scratch(bs);
  return res;
}

static void store_fini(symm_bootstrap_t *bs) {
  if (!bs) return;
  store_bs_t *s = bs->state;
  if (s) {
    for (int r = 0; r < bs->size; r++) free(s->keys ? s->keys[r] : NULL);
    free(s->keys);
    free(s->values);
    free(s->lens);
    free(s->absent);
    free(s);
  }
  free(bs);
}

/* Notes are plain keys; the store's compare-and-set keeps the first. */
static symm_result_t store_note_put(symm_bootstrap_t *bs, const char *key, const char *value) {
  store_bs_t *s = bs->state;
  return symm_store_compare_set_own(s->store, key, NULL, 0, value, strlen(value), NULL, 0, NULL);
}

static symm_result_t store_note_get(symm_bootstrap_t *bs, const char *key, char *value,
                                    size_t cap, bool *found) {
  store_bs_t *s = bs->state;
  const char *keys[1] = {key};
  int present = 0;
  size_t len = 0;
  *found = false;
  SYMM_CHECK(symm_store_check(s->store, keys, 1, &present));
  if (!present || cap == 0) return SYMM_SUCCESS;
  SYMM_CHECK(symm_store_get(s->store, key, value, cap - 1, &len, 0));
  value[len < cap ? len : cap - 1] = 0;
  *found = true;
  return SYMM_SUCCESS;
}

/* The store server's marks: a rank whose connection closed without BYE,
 * whose pid vanished, or that symmem-run saw exit. */
static int store_lost_rank(symm_bootstrap_t *bs) {
  return symm_store_lost_rank(((store_bs_t *)bs->state)->store);
}

static const symm_bootstrap_ops_t store_bootstrap_ops = {
    .version = 2,
    .name = "store",
    .allgather = store_allgather,
    .broadcast = store_broadcast,
    .fini = store_fini,
    .allgatherv = store_gather,
    .note_put = store_note_put,
    .note_get = store_note_get,
    .lost_rank = store_lost_rank,
};

symm_result_t symm_bootstrap_store_init(symm_store_t *store, const char *prefix, int rank,
                                        int size, int timeout_ms, symm_bootstrap_t **out) {
  symm_bootstrap_t *bs = calloc(1, sizeof *bs);
  store_bs_t *s = calloc(1, sizeof *s);
  if (!bs || !s) {
    free(bs);
    free(s);
    return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  }
  bs->ops = &store_bootstrap_ops;
  bs->rank = rank;
  bs->size = size;
  bs->timeout_ms = timeout_ms;
  bs->state = s;
  s->store = store;
  snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
  s->keys = calloc((size_t)size, sizeof *s->keys);
  s->values = calloc((size_t)size, sizeof *s->values);
  s->lens = calloc((size_t)size, sizeof *s->lens);
  s->absent = calloc((size_t)size, 1);
  if (!s->keys || !s->values || !s->lens || !s->absent) goto oom;
  for (int r = 0; r < size; r++)
    if (!(s->keys[r] = malloc(192))) goto oom;
  *out = bs;
  return SYMM_SUCCESS;
oom:
  store_fini(bs);
  return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
}

static bool store_usable(const symm_bootstrap_env_t *env, char *why, size_t cap) {
  if (env->store) return true;
  snprintf(why, cap, "no store connection");
  return false;
}

static symm_result_t store_impl_init(const symm_bootstrap_env_t *env, symm_bootstrap_t **out) {
  return symm_bootstrap_store_init(env->store, env->prefix, env->rank, env->size,
                                   env->timeout_ms, out);
}

const symm_bootstrap_impl_t symm_bootstrap_store_impl = {
    .name = "store",
    .what = "the store",
    .layered = false,
    .usable = store_usable,
    .init = store_impl_init,
};
