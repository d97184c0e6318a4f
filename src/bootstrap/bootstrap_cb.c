/* Bootstrap through the caller's callbacks (symm_bootstrap_callbacks_t):
 * MPI, PMIx, a framework's store.  Every operation is one or two calls of
 * the caller's all-gather (or its broadcast), given what is left of the
 * calling operation's deadline; a callback's failure becomes the calling
 * function's error with the callback's code.  Notes and lost ranks go to
 * the callbacks of version 2 that have them.  The bootstrap owns nothing
 * of the channel (a communicator releases the channels its split made). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

typedef struct {
  const symm_bootstrap_callbacks_t *cb;
} cb_bs_t;

/* What is left of the operation's deadline for a callback, at least 1 ms. */
static int remaining_ms(const symm_bootstrap_t *bs) {
  const uint64_t deadline = symm_deadline_after(bs->timeout_ms), now = symm_now_ns();
  if (deadline <= now) return 1;
  const uint64_t ms = (deadline - now + 999999) / 1000000;
  return ms > (uint64_t)bs->timeout_ms ? bs->timeout_ms : ms < 1 ? 1 : (int)ms;
}

static const symm_bootstrap_callbacks_t *cbs(const symm_bootstrap_t *bs) {
  return ((const cb_bs_t *)bs->state)->cb;
}

static int cb_lost_rank(symm_bootstrap_t *bs);

/* A callback's return as symmem's result; a lost peer is named where the
 * callbacks' lost_rank knows it. */
static symm_result_t cb_result(symm_bootstrap_t *bs, int rc, const char *what) {
  if (rc == 0) return SYMM_SUCCESS;
  const bool known = rc > 0 && rc <= SYMM_ERR_BACKEND_UNAVAILABLE;
  const symm_result_t code = known ? (symm_result_t)rc : SYMM_ERR_BACKEND;
  const int lost = code == SYMM_ERR_PEER_LOST ? cb_lost_rank(bs) : -1;
  char gone[64] = "";
  if (lost >= 0) snprintf(gone, sizeof gone, "; rank %d is gone, the callbacks say", lost);
  return symm_error(code, "bootstrap: the %s callback failed on rank %d (returned %d%s%s%s)", what,
                    bs->rank, rc, known ? ": " : "", known ? symm_strerror(code) : "", gone);
}

static symm_result_t cb_allgather(symm_bootstrap_t *bs, const void *send, size_t len,
                                  void *recv) {
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  return cb_result(bs, cb->allgather(cb->ctx, send, recv, len, remaining_ms(bs)), "allgather");
}

static symm_result_t cb_broadcast(symm_bootstrap_t *bs, void *buf, size_t len, int root) {
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  if (cb->broadcast)
    return cb_result(bs, cb->broadcast(cb->ctx, buf, len, root, remaining_ms(bs)), "broadcast");
  /* Through the all-gather: every rank sends len bytes, root's are kept. */
  if (len && (size_t)bs->size > SIZE_MAX / len)
    return symm_error(SYMM_ERR_INVALID_ARG, "bootstrap: a broadcast of %zu bytes overflows", len);
  char *all = malloc(len * (size_t)bs->size + 1);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  symm_result_t res = cb_allgather(bs, buf, len, all);
  if (res == SYMM_SUCCESS && len) memcpy(buf, all + (size_t)root * len, len);
  free(all);
  return res;
}

/* Two all-gathers: the lengths, then every contribution padded to the
 * longest. */
static symm_result_t cb_allgatherv(symm_bootstrap_t *bs, const void *send, size_t len,
                                   void **values, size_t *lens) {
  const size_t n = (size_t)bs->size;
  uint64_t mine = len, *all_lens = calloc(n, sizeof *all_lens);
  if (!all_lens) return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  symm_result_t res = cb_allgather(bs, &mine, sizeof mine, all_lens);
  uint64_t most = 0;
  for (size_t r = 0; res == SYMM_SUCCESS && r < n; r++)
    if (all_lens[r] > most) most = all_lens[r];
  char *pad = NULL, *all = NULL;
  if (res == SYMM_SUCCESS && (most > ((size_t)1 << 40) / n))
    res = symm_error(SYMM_ERR_PROTOCOL, "bootstrap: a rank sends %llu bytes in one round",
                     (unsigned long long)most);
  if (res == SYMM_SUCCESS && (!(pad = calloc(1, most + 1)) || !(all = malloc(most * n + 1))))
    res = symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  if (res == SYMM_SUCCESS) {
    if (len) memcpy(pad, send, len);
    res = cb_allgather(bs, pad, most, all);
  }
  for (size_t r = 0; res == SYMM_SUCCESS && r < n; r++) {
    values[r] = malloc(all_lens[r] + 1);
    if (!values[r]) {
      res = symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
      for (size_t q = 0; q < r; q++) free(values[q]), values[q] = NULL;
      break;
    }
    memcpy(values[r], all + r * most, all_lens[r]);
    lens[r] = all_lens[r];
  }
  free(all), free(pad), free(all_lens);
  return res;
}

/* The caller's note callback `member`, NULL where its struct predates
 * notes (version 1) or leaves it out. */
#define CB_NOTE(cb, member)                                                              \
  ((cb)->version >= 2 && (cb)->size >= offsetof(symm_bootstrap_callbacks_t, member) +    \
                                           sizeof((cb)->member)                          \
       ? (cb)->member                                                                    \
       : NULL)

static symm_result_t cb_note_put(symm_bootstrap_t *bs, const char *key, const char *value) {
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  int (*put)(void *, const char *, const char *) = CB_NOTE(cb, note_put);
  if (!put) return symm_error(SYMM_ERR_UNSUPPORTED, "bootstrap: the callbacks keep no notes");
  return cb_result(bs, put(cb->ctx, key, value), "note_put");
}

static symm_result_t cb_note_get(symm_bootstrap_t *bs, const char *key, char *value, size_t cap,
                                 bool *found) {
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  int (*get)(void *, const char *, char *, size_t, int *) = CB_NOTE(cb, note_get);
  *found = false;
  if (!get) return symm_error(SYMM_ERR_UNSUPPORTED, "bootstrap: the callbacks keep no notes");
  if (cap == 0) return SYMM_SUCCESS;
  int got = 0;
  value[0] = 0;
  SYMM_CHECK(cb_result(bs, get(cb->ctx, key, value, cap, &got), "note_get"));
  value[cap - 1] = 0; /* a callback that filled the buffer to its end */
  *found = got != 0;
  return SYMM_SUCCESS;
}

static int cb_lost_rank(symm_bootstrap_t *bs) {
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  int (*lost)(void *) = CB_NOTE(cb, lost_rank);
  const int r = lost ? lost(cb->ctx) : -1;
  return r >= 0 && r < bs->size ? r : -1; /* an error code, or a rank out of range: none */
}

static void cb_fini(symm_bootstrap_t *bs) {
  free(bs->state);
  free(bs);
}

static const symm_bootstrap_ops_t cb_bootstrap_ops = {
    .version = 2,
    .name = "callbacks",
    .allgather = cb_allgather,
    .broadcast = cb_broadcast,
    .fini = cb_fini,
    .allgatherv = cb_allgatherv,
    .note_put = cb_note_put,
    .note_get = cb_note_get,
    .lost_rank = cb_lost_rank,
};

symm_result_t symm_bootstrap_cb_init(const symm_bootstrap_callbacks_t *cb, int timeout_ms,
                                     symm_bootstrap_t **out) {
  symm_bootstrap_t *bs = calloc(1, sizeof *bs);
  cb_bs_t *s = calloc(1, sizeof *s);
  if (!bs || !s) {
    free(bs);
    free(s);
    return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  }
  s->cb = cb;
  *bs = (symm_bootstrap_t){&cb_bootstrap_ops, cb->rank, cb->world_size, timeout_ms, s};
  *out = bs;
  return SYMM_SUCCESS;
}

void symm_bootstrap_cb_abort(symm_bootstrap_t *bs, symm_result_t code, const char *reason) {
  if (!bs || bs->ops != &cb_bootstrap_ops) return;
  const symm_bootstrap_callbacks_t *cb = cbs(bs);
  if (cb->abort) cb->abort(cb->ctx, (int)code, reason);
}

static bool cb_usable(const symm_bootstrap_env_t *env, char *why, size_t cap) {
  if (env->callbacks) return true;
  snprintf(why, cap, "no callbacks in the config");
  return false;
}

static symm_result_t cb_impl_init(const symm_bootstrap_env_t *env, symm_bootstrap_t **out) {
  return symm_bootstrap_cb_init(env->callbacks, env->timeout_ms, out);
}

const symm_bootstrap_impl_t symm_bootstrap_cb_impl = {
    .name = "callbacks",
    .what = "the caller's callbacks",
    .layered = false,
    .usable = cb_usable,
    .init = cb_impl_init,
};
