/* host backend: contiguous view.  Every rank's data region is already mapped
 * shared in this process; mremap(old_size = 0) makes a second mapping of the
 * same pages, placed at consecutive addresses inside one reservation, so no
 * fds need to be kept or fetched again. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <sys/mman.h>

#include "host.h"

symm_result_t host_contiguous_map(symm_comm_t *comm, const symm_mem_t *local,
                                  const symm_peer_map_t *maps, const symm_exchange_info_t *infos,
                                  void **base, size_t *stride, void **priv) {
  size_t span = local->alloc_bytes - local->data_offset; /* page multiple */
  for (int r = 0; r < symm_comm_size(comm); r++)
    if (r != symm_comm_rank(comm) && (infos[r].alloc_bytes - infos[r].data_offset != span || !maps[r].base))
      return symm_error(SYMM_ERR_MISMATCH, "contiguous view: rank %d's allocation differs in size",
                        r);
  size_t total = span * (size_t)symm_comm_size(comm);
  char *region = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return symm_error_errno("contiguous view: reserving %zu bytes", total);
  for (int r = 0; r < symm_comm_size(comm); r++) {
    char *src = r == symm_comm_rank(comm) ? (char *)local->base + local->data_offset
                                : (char *)maps[r].base + infos[r].data_offset;
    void *dst = region + (size_t)r * span;
    if (mremap(src, 0, span, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED) {
      symm_result_t res = symm_error_errno("contiguous view: mapping rank %d", r);
      munmap(region, total);
      return res;
    }
  }
  *base = region;
  *stride = span;
  *priv = NULL;
  return SYMM_SUCCESS;
}

void host_contiguous_unmap(symm_comm_t *comm, void *base, size_t bytes, void *priv) {
  (void)priv;
  munmap(base, bytes);
}
