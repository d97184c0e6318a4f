/* The communicator and the tensor as backends and engines see them
 * (symm_backend.h, symm_engine.h): read access to the core's fields, and the
 * few writes the seam allows. */
#include "internal.h"

const char *symm_comm_job_id(const symm_comm_t *c) { return c->job_id; }
int symm_comm_index(const symm_comm_t *c) { return c->index; }
const char *symm_comm_name_nonce(const symm_comm_t *c) { return c->name_nonce; }
const char *symm_comm_key_prefix(const symm_comm_t *c) { return c->prefix; }

int32_t symm_comm_peer_pid(const symm_comm_t *c, int peer) {
  return c->pids && peer >= 0 && peer < c->size ? c->pids[peer] : 0;
}

int symm_comm_first_gone(const symm_comm_t *c) {
  return symm_first_gone(c->pids, c->size, c->rank);
}

bool symm_comm_peer_same_host(const symm_comm_t *c, int peer) {
  if (peer < 0 || peer >= c->size) return false;
  return c->host_ids ? c->host_ids[peer] == c->host_ids[c->rank] : peer == c->rank;
}

const char *symm_comm_peer_host(const symm_comm_t *c, int peer) {
  return c->host_names && peer >= 0 && peer < c->size ? c->host_names[peer] : NULL;
}

/* The ranks of the host whose first rank is `first` (hash id), up to
 * SHOWN of them, as " (ranks 0, 1 and 6 more)". */
static size_t host_ranks_text(const symm_comm_t *c, int first, int count, char *out, size_t len) {
  enum { SHOWN = 4 };
  size_t n = (size_t)snprintf(out, len, " (rank%s", count > 1 ? "s" : "");
  for (int r = first, k = 0; r < c->size && k < SHOWN && n < len; r++)
    if (c->host_ids[r] == c->host_ids[first])
      n += (size_t)snprintf(out + n, len - n, "%s %d", k++ ? "," : "", r);
  if (count > SHOWN && n < len)
    n += (size_t)snprintf(out + n, len - n, " and %d more", count - SHOWN);
  if (n < len) n += (size_t)snprintf(out + n, len - n, ")");
  return n;
}

void symm_comm_hosts_text(const symm_comm_t *c, char *out, size_t len) {
  enum { HOSTS = 4 };
  int first[HOSTS], count[HOSTS], hosts = 0;
  bool more = false;
  if (len) out[0] = 0;
  if (!c->host_ids || !c->host_names) {
    snprintf(out, len, "hosts unknown");
    return;
  }
  for (int r = 0; r < c->size; r++) {
    int k = 0;
    while (k < hosts && c->host_ids[first[k]] != c->host_ids[r]) k++;
    if (k == hosts && hosts == HOSTS) {
      more = true;
    } else if (k == hosts) {
      first[hosts] = r;
      count[hosts++] = 1;
    } else {
      count[k]++;
    }
  }
  size_t n = 0;
  for (int k = 0; k < hosts && n < len; k++) {
    n += (size_t)snprintf(out + n, len - n, "%s%s", k ? (k + 1 < hosts || more ? ", " : " and ")
                          : "", c->host_names[first[k]]);
    if (n < len) n += host_ranks_text(c, first[k], count[k], out + n, len - n);
  }
  if (more && n < len) snprintf(out + n, len - n, " and more");
}

int symm_comm_requested_device(const symm_comm_t *c) { return c->requested_device; }

void symm_comm_set_device(symm_comm_t *c, int device) {
  c->device = device;
  symm_log_set_device(device);
}

void *symm_comm_take_split_handle(symm_comm_t *c) {
  void *h = c->split_handle;
  c->split_handle = NULL;
  return h;
}

void *symm_backend_state(const symm_comm_t *c) { return c->backend_state; }
void symm_backend_set_state(symm_comm_t *c, void *state) { c->backend_state = state; }
const symm_backend_caps_t *symm_comm_caps(const symm_comm_t *c) { return &c->caps; }
const char *symm_comm_backend_name(const symm_comm_t *c) { return c->ops ? c->ops->name : "?"; }

void symm_comm_abort_bootstrap(symm_comm_t *c, symm_result_t code, const char *reason) {
  if (c->bootstrap) symm_bootstrap_cb_abort(c->bootstrap, code, reason);
}

bool symm_comm_ready(const symm_comm_t *c) { return c->ready; }
bool symm_comm_all_reachable(const symm_comm_t *c) { return c->unreachable == 0; }

void symm_comm_unreachable_list(const symm_comm_t *c, char *out, size_t len) {
  size_t used = (size_t)snprintf(out, len, "rank%s", c->unreachable > 1 ? "s" : "");
  for (int r = 0, k = 0; r < c->size && used < len; r++) {
    if (!SYMM_OPS_HAS(c->ops, 2, peer_reachable) || c->ops->peer_reachable((symm_comm_t *)c, r))
      continue;
    used += (size_t)snprintf(out + used, len - used, "%s %d", k++ ? "," : "", r);
  }
}
const symm_engine_ops_t *symm_comm_engine(const symm_comm_t *c) { return c->engine; }
void *symm_engine_state(const symm_comm_t *c) { return c->engine_state; }
void symm_engine_set_state(symm_comm_t *c, void *state) { c->engine_state = state; }

symm_tensor_t *symm_comm_scratch_current(const symm_comm_t *c) { return c->scratch; }
uint64_t symm_comm_next_coll_seq(symm_comm_t *c) { return ++c->coll_seq; }

const symm_mem_t *symm_tensor_mem(const symm_tensor_t *t) { return &t->mem; }
void *const *symm_tensor_peer_data(const symm_tensor_t *t) {
  return t->rendezvoused ? t->peer_data : NULL;
}
uint64_t symm_tensor_peer_sig(const symm_tensor_t *t) {
  return t->on_use && !t->all_mapped ? 0 : t->peer_sig;
}
void *symm_tensor_peer_data_device(const symm_tensor_t *t) { return t->peer_data_dev; }


bool symm_tensor_find(const void *ptr, symm_tensor_t **t, int *rank, size_t *offset) {
  const void *base;
  size_t len;
  if (!ptr || !symm_registry_find(ptr, &base, &len, t, rank)) return false;
  *offset = (size_t)((const char *)ptr - (const char *)base);
  return true;
}
