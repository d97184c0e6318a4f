/* host backend: contiguous view.  Every rank's data region is already mapped
 * shared in this process; mremap(old_size = 0) makes a second mapping of the
 * same pages, placed at consecutive addresses inside one reservation, so no
 * fds need to be kept or fetched again.  Where mremap cannot duplicate a
 * mapping (valgrind refuses old_size 0 with EINVAL), the rank's memfd is
 * mapped there instead: ours, or the peer's fetched again. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host.h"

/* Rank r's data at dst from its memfd (the fallback). */
static symm_result_t host_map_from_fd(symm_comm_t *comm, const symm_mem_t *local, int r,
                                      const symm_exchange_info_t *info, void *dst, size_t span) {
  const bool own = r == symm_comm_rank(comm);
  int fd = own ? ((const host_mem_t *)local->priv)->fd : -1;
  if (!own) {
    SYMM_CHECK(symm_fdx_fetch(host_state(comm)->fdx, r, info->id, &fd));
    /* Fetched anew: the fd may not be the one mapped at rendezvous. */
    symm_result_t res = symm_fdx_check_memfd(fd, r, info->data_offset + span);
    if (res != SYMM_SUCCESS) {
      close(fd);
      return res;
    }
  }
  void *p = mmap(dst, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                 (off_t)info->data_offset);
  if (!own) close(fd);
  if (p == MAP_FAILED) return symm_error_errno("contiguous view: mapping rank %d", r);
  return SYMM_SUCCESS;
}

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
    if (mremap(src, 0, span, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED) continue;
    symm_result_t res = errno == EINVAL
                            ? host_map_from_fd(comm, local, r, &infos[r], dst, span)
                            : symm_error_errno("contiguous view: mapping rank %d", r);
    if (res != SYMM_SUCCESS) {
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
