/* host backend: allocations are memfds mapped shared; the fd is published
 * so that peers can fetch it during their rendezvous. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host.h"

/* Bytes the kernel says it can still hand out (MemAvailable + SwapFree of
 * /proc/meminfo); 0 when that cannot be read. */
static size_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[128];
  unsigned long long kb, total = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1 || sscanf(line, "SwapFree: %llu kB", &kb) == 1)
      total += kb;
  fclose(f);
  return (size_t)total << 10;
}

/* Backs the whole memfd now.  ftruncate alone makes a sparse file whose
 * pages come at first touch: a size the machine cannot back would succeed
 * here and kill the process with SIGBUS when touched.  A size beyond what
 * is available is refused before fallocate (which on a memfd would take
 * pages until the OOM killer stepped in); fallocate then zero-fills, about
 * 0.3 ms per MiB, once per fresh allocation (pooled ones keep theirs). */
static symm_result_t host_reserve(int fd, size_t bytes) {
  const size_t avail = host_available_bytes();
  if (avail && bytes > avail)
    return symm_error(SYMM_ERR_NO_MEMORY, "host backend: %zu bytes requested, %zu available "
                      "on this machine (MemAvailable + SwapFree)", bytes, avail);
  int err = posix_fallocate(fd, 0, (off_t)bytes);
  if (err == 0) return SYMM_SUCCESS;
  if (err == ENOSPC || err == ENOMEM)
    return symm_error(SYMM_ERR_NO_MEMORY, "host backend: cannot reserve %zu bytes: %s", bytes,
                      strerror(err));
  errno = err;
  return symm_error_errno("host backend: fallocate(%zu bytes)", bytes);
}

symm_result_t host_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  char name[96];
  snprintf(name, sizeof name, "symmem-%s-r%d-%llu", symm_comm_job_id(comm), symm_comm_rank(comm),
           (unsigned long long)mem->id);
  host_mem_t *hm = calloc(1, sizeof *hm);
  if (!hm) return symm_error(SYMM_ERR_NO_MEMORY, "host backend: out of memory");
  symm_result_t res;
  /* memfd: private to this user, zero-filled, gone with the last reference. */
  SYMM_SYSCHECK_GOTO(hm->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), res, fail,
                     "host backend: memfd_create");
  SYMM_SYSCHECK_GOTO(ftruncate(hm->fd, (off_t)mem->alloc_bytes), res, fail,
                     "host backend: ftruncate(%zu bytes)", mem->alloc_bytes);
  SYMM_CHECK_GOTO(host_reserve(hm->fd, mem->alloc_bytes), res, fail);
  /* Peers map it: cut short, it would kill them with SIGBUS, so its size is
   * fixed for good (peers refuse a memfd without F_SEAL_SHRINK). */
  SYMM_SYSCHECK_GOTO(fcntl(hm->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), res,
                     fail, "host backend: sealing the memfd");
  void *p = mmap(NULL, mem->alloc_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, hm->fd, 0);
  if (p == MAP_FAILED) {
    res = symm_error_errno("host backend: mmap(%zu bytes)", mem->alloc_bytes);
    goto fail;
  }
  res = symm_fdx_publish(host_state(comm)->fdx, mem->id, hm->fd);
  if (res != SYMM_SUCCESS) {
    munmap(p, mem->alloc_bytes);
    goto fail;
  }
  mem->base = p;
  mem->priv = hm;
  mem->device = -1;
  return SYMM_SUCCESS;
fail:
  if (hm->fd >= 0) close(hm->fd);
  free(hm);
  return res;
}

void host_free(symm_comm_t *comm, symm_mem_t *mem) {
  host_mem_t *hm = mem->priv;
  symm_fdx_unpublish(host_state(comm)->fdx, mem->id);
  munmap(mem->base, mem->alloc_bytes);
  if (hm) {
    close(hm->fd);
    free(hm);
  }
  mem->base = NULL;
  mem->priv = NULL;
}
