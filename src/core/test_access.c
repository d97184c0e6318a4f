/* The accessors of symm_test_access.h: the library's own tests' view of the
 * core's private structs. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "symm_test_access.h"

symm_comm_t *symm_test_comm_new(const symm_test_comm_opts_t *o) {
  symm_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->rank = o->rank;
  c->size = o->size;
  c->timeout_ms = o->timeout_ms;
  c->index = o->index;
  snprintf(c->job_id, sizeof c->job_id, "%s", o->job_id ? o->job_id : "");
  snprintf(c->name_nonce, sizeof c->name_nonce, "%s", o->name_nonce ? o->name_nonce : "");
  c->pids = o->pids;
  c->store = o->store;
  snprintf(c->prefix, sizeof c->prefix, "%s", o->prefix ? o->prefix : "");
  /* The store answers through a bootstrap of its own, as a real
   * communicator's; another bootstrap is the caller's. */
  c->bootstrap = o->bootstrap;
  if (o->store && symm_bootstrap_store_init(o->store, c->prefix, c->rank, c->size,
                                            c->timeout_ms, &c->store_bootstrap) != SYMM_SUCCESS) {
    free(c);
    return NULL;
  }
  return c;
}

void symm_test_comm_free(symm_comm_t *c) {
  if (c && c->store_bootstrap) c->store_bootstrap->ops->fini(c->store_bootstrap);
  free(c);
}

const symm_backend_ops_t *symm_test_comm_ops(const symm_comm_t *c) { return c->ops; }
void symm_test_comm_set_ops(symm_comm_t *c, const symm_backend_ops_t *ops) { c->ops = ops; }
bool symm_test_comm_single_host(const symm_comm_t *c) { return c->single_host; }
struct symm_store_server *symm_test_comm_store_server(const symm_comm_t *c) { return c->server; }
symm_bootstrap_t *symm_test_comm_bootstrap(const symm_comm_t *c) { return c->bootstrap; }
symm_bootstrap_t *symm_test_comm_store_bootstrap(const symm_comm_t *c) {
  return c->store_bootstrap;
}

const symm_peer_map_t *symm_test_tensor_peer_map(const symm_tensor_t *t, int peer) {
  return t->peers ? &t->peers[peer] : NULL;
}
const symm_exchange_info_t *symm_test_tensor_peer_info(const symm_tensor_t *t, int peer) {
  return t->infos ? &t->infos[peer] : NULL;
}
