/* The store client's requests that ask whether keys are there: WAIT,
 * CHECK, and the lost-rank probe (a WAIT that does not wait); and STATS,
 * the server's counters. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE

#include "store_client_int.h"

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

symm_result_t symm_store_stats(symm_store_t *store, symm_store_stats_t *stats) {
  if (!store || !stats) return symm_error(SYMM_ERR_INVALID_ARG, "store stats: NULL argument");
  cli_lock(store);
  size_t at = cli_begin(store, SYMM_OP_STATS);
  cli_reply_t rep;
  symm_result_t res = cli_call_plain(store, SYMM_OP_STATS, at, "stats", &rep);
  if (res == SYMM_SUCCESS && rep.status != SYMM_SUCCESS) {
    res = symm_error(rep.status, "store stats: server says %s", symm_strerror(rep.status));
  } else if (res == SYMM_SUCCESS) {
    uint64_t v[4];
    for (int i = 0; i < 4; i++) v[i] = (uint64_t)symm_proto_get_i64(&rep.r);
    if (!symm_proto_end(&rep.r)) {
      res = cli_bad_reply(store, "stats", rep.r.err);
    } else {
      stats->connections = v[0];
      stats->requests = v[1];
      stats->request_bytes = v[2];
      stats->reply_bytes = v[3];
    }
  }
  cli_unlock(store);
  return res;
}
