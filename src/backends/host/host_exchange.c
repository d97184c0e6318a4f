/* host backend: mapping a peer's memfd.  The fd is only needed for mmap; the
 * mapping keeps the memory alive after both the fd and the owner are gone. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"

symm_result_t host_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  int fd = -1;
  SYMM_CHECK(symm_fdx_fetch(host_state(comm)->fdx, peer, info->id, &fd));
  symm_result_t res = SYMM_SUCCESS;
  struct stat st;
  /* Never trust the advertised size beyond what the fd really holds. */
  SYMM_SYSCHECK_GOTO(fstat(fd, &st), res, out, "host backend: fstat of rank %d's memory", peer);
  if ((uint64_t)st.st_size < info->alloc_bytes) {
    res = symm_error(SYMM_ERR_PROTOCOL, "host backend: rank %d's memory is %lld bytes, it "
                     "advertised %llu", peer, (long long)st.st_size,
                     (unsigned long long)info->alloc_bytes);
    goto out;
  }
  void *p = mmap(NULL, info->alloc_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    res = symm_error_errno("host backend: mmap of rank %d's memory (%llu bytes)", peer,
                           (unsigned long long)info->alloc_bytes);
    goto out;
  }
  map->base = p;
  map->priv = (void *)(uintptr_t)info->alloc_bytes;
out:
  close(fd);
  return res;
}

void host_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  if (map->base) munmap(map->base, (size_t)(uintptr_t)map->priv);
  map->base = NULL;
}
