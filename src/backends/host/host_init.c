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

symm_result_t host_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  (void)caps, (void)blob;
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
    .version = 1,
    .name = "host",
    .id = SYMM_BACKEND_HOST,
    .mem_kind = SYMM_MEM_HOST,
    .caps = {.contiguous_view = true},
    SYMM_BACKEND_REQUIRED_MEMBERS(host),
    .contiguous_map = host_contiguous_map,
    .contiguous_unmap = host_contiguous_unmap,
};
