/* Replies of the store server: written into a connection's output
 * buffer, sent by the poll loop (srv_flush).  The floor of the server's
 * files: calls none of them. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include "store_server_int.h"

/* Starts a reply to (op, id) in c's output: header + status + lost rank.
 * Returns the header offset for srv_reply_end. */
size_t srv_reply_begin(srv_conn_t *c, uint8_t op, uint32_t id, symm_result_t status, int lost_rank) {
  size_t at = symm_proto_begin(&c->out, (uint8_t)(op | SYMM_PROTO_REPLY_FLAG), id);
  symm_proto_put_u32(&c->out, (uint32_t)status);
  symm_proto_put_i32(&c->out, lost_rank);
  return at;
}

void srv_reply_end(srv_conn_t *c, size_t at) {
  symm_proto_finish(&c->out, at);
  if (c->out.failed) {
    SYMM_WARN(STORE, "store: out of memory replying to %s; closing", c->peer);
    c->closing = true; /* srv_flush closes it: nothing valid to send */
  }
}

void srv_reply_status(srv_conn_t *c, uint8_t op, uint32_t id, symm_result_t status, int lost_rank) {
  srv_reply_end(c, srv_reply_begin(c, op, id, status, lost_rank));
}

void srv_stats_read(const symm_store_server_t *s, symm_store_stats_t *out) {
  symm_store_server_t *m = (symm_store_server_t *)s; /* atomics are read, never changed */
  out->connections = atomic_load_explicit(&m->n_connections, memory_order_relaxed);
  out->requests = atomic_load_explicit(&m->n_requests, memory_order_relaxed);
  out->request_bytes = atomic_load_explicit(&m->n_request_bytes, memory_order_relaxed);
  out->reply_bytes = atomic_load_explicit(&m->n_reply_bytes, memory_order_relaxed);
}

void srv_do_stats(symm_store_server_t *s, srv_conn_t *c, uint32_t id) {
  symm_store_stats_t st;
  srv_stats_read(s, &st);
  size_t at = srv_reply_begin(c, SYMM_OP_STATS, id, SYMM_SUCCESS, -1);
  symm_proto_put_i64(&c->out, (int64_t)st.connections);
  symm_proto_put_i64(&c->out, (int64_t)st.requests);
  symm_proto_put_i64(&c->out, (int64_t)st.request_bytes);
  symm_proto_put_i64(&c->out, (int64_t)st.reply_bytes);
  srv_reply_end(c, at);
}
