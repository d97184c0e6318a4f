/* host backend: probe, init/fini and the ops table. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <unistd.h>

#include "host.h"

symm_result_t host_probe(char *why, size_t why_len) {
  (void)why;
  (void)why_len;
  return SYMM_SUCCESS; /* memfd and Unix sockets exist on every Linux we support */
}

/* Memfds pass over Unix sockets, between the processes of one host:
 * ranks on several hosts are refused here, naming the hosts, rather than
 * at the first rendezvous, where the peers' sockets cannot be reached. */
static symm_result_t host_check_one_host(const symm_comm_t *comm) {
  for (int r = 0; r < symm_comm_size(comm); r++) {
    if (symm_comm_peer_same_host(comm, r)) continue;
    char hosts[512];
    symm_comm_hosts_text(comm, hosts, sizeof hosts);
    const char *mine = symm_comm_peer_host(comm, symm_comm_rank(comm));
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "host backend: the ranks run on several hosts, %s, this rank (%d) on %s; "
                      "it shares the memory of one host only (memfds passed over Unix sockets)",
                      hosts, symm_comm_rank(comm), mine ? mine : "?");
  }
  return SYMM_SUCCESS;
}

symm_result_t host_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  (void)caps, (void)blob;
  SYMM_CHECK(host_check_one_host(comm));
  host_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "host backend: out of memory");
  st->page = (size_t)sysconf(_SC_PAGESIZE);
  symm_backend_set_state(comm, st);
  return symm_fdx_start(comm, &st->fdx);
}

void host_fini(symm_comm_t *comm) {
  host_state_t *st = host_state(comm);
  if (!st) return;
  if (st->fdx) symm_fdx_stop(st->fdx);
  free(st);
  symm_backend_set_state(comm, NULL);
}

size_t host_granularity(symm_comm_t *comm) { return host_state(comm)->page; }

const symm_backend_ops_t symm_host_ops = {
    .version = 6,
    .name = "host",
    .id = SYMM_BACKEND_HOST,
    .mem_kind = SYMM_MEM_HOST,
    .caps = {.contiguous_view = true, .registers_user = true, .map_on_use = true},
    SYMM_BACKEND_REQUIRED_MEMBERS(host),
    .export_mem = host_export_mem,
    .contiguous_map = host_contiguous_map,
    .contiguous_unmap = host_contiguous_unmap,
    .register_user = host_register_user,
    .deregister_user = host_deregister_user,
};
