/* host backend: probe, init/fini and the ops table. */
#include <stdlib.h>
#include <unistd.h>

#include "host.h"

static symm_result_t host_probe(char *why, size_t why_len) {
  (void)why;
  (void)why_len;
  return SYMM_SUCCESS; /* memfd and Unix sockets exist on every Linux we support */
}

static symm_result_t host_init(symm_comm_t *comm) {
  host_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "host backend: out of memory");
  st->page = (size_t)sysconf(_SC_PAGESIZE);
  st->slice_bytes = symm_settings()->SYMM_HOST_SLICE_BYTES;
  symm_result_t res = symm_fdx_start(comm, &st->fdx);
  if (res != SYMM_SUCCESS) {
    free(st);
    return res;
  }
  comm->backend_state = st;
  return SYMM_SUCCESS;
}

/* Ranks must slice all-reduces alike (run_sliced pairs slices up by
 * position): SYMM_HOST_SLICE_BYTES is compared once, here. */
static symm_result_t host_startup(symm_comm_t *comm) {
  uint64_t mine = host_state(comm)->slice_bytes;
  uint64_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "host backend: out of memory");
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_STATUS, &mine, sizeof mine, all);
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++)
    if (all[r] != mine)
      res = symm_error(SYMM_ERR_MISMATCH, "host backend: SYMM_HOST_SLICE_BYTES is %llu on rank "
                       "%d and %llu on rank %d; it must be the same on every rank",
                       (unsigned long long)all[r], r, (unsigned long long)mine, comm->rank);
  free(all);
  return res;
}

static void host_fini(symm_comm_t *comm) {
  host_state_t *st = host_state(comm);
  if (!st) return;
  symm_fdx_stop(st->fdx);
  free(st);
  comm->backend_state = NULL;
}

static size_t host_granularity(symm_comm_t *comm) { return host_state(comm)->page; }

const symm_backend_ops_t symm_host_ops = {
    .version = 7,
    .name = "host",
    .id = SYMM_BACKEND_HOST,
    .probe = host_probe,
    .init = host_init,
    .startup = host_startup,
    .fini = host_fini,
    .granularity = host_granularity,
    .alloc = host_alloc,
    .free = host_free,
    .map_peer = host_map_peer,
    .unmap_peer = host_unmap_peer,
    .contiguous_map = host_contiguous_map,
    .contiguous_unmap = host_contiguous_unmap,
    .collective = host_collective,
    .signal = host_signal,
    .allreduce_algo = host_allreduce_algo,
    .scratch_bytes = host_scratch_bytes,
    .abstain = host_abstain,
};
