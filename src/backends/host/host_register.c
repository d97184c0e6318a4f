/* host backend: the user's memory made symmetric (symm_tensor_register).
 * The user passes the memfd or file that backs the memory; this process's
 * mapping of it is checked in /proc/self/maps (shared, of that file, at
 * that offset: private memory cannot be shared, whatever fd comes with
 * it), a duplicate of the fd is published as an allocation's is, and
 * peers map the file's pages from it.  The user's mapping and file are
 * never unmapped nor closed here. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "host.h"

/* One line of /proc/self/maps. */
typedef struct {
  uintptr_t start, end;
  char perms[5];
  uint64_t offset;
  unsigned dev_major, dev_minor;
  uint64_t inode;
  char path[256];
} host_vma_t;

/* The mapping of this process that holds addr; false when none does. */
static bool find_vma(uintptr_t addr, host_vma_t *out) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    host_vma_t v;
    memset(&v, 0, sizeof v);
    int used = 0;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &v.start,
               &v.end, v.perms, &v.offset, &v.dev_major, &v.dev_minor, &v.inode, &used) < 7)
      continue;
    if (addr < v.start || addr >= v.end) continue;
    snprintf(v.path, sizeof v.path, "%s", line + used);
    v.path[strcspn(v.path, "\n")] = '\0';
    *out = v;
    found = true;
  }
  fclose(f);
  return found;
}

/* Why [ptr, ptr + nbytes) is not fd's file mapped shared at fd_offset, or
 * NULL when it is.  `st` is fd's. */
static const char *mapping_problem(const host_vma_t *v, bool found, const struct stat *st,
                                   uintptr_t p, size_t nbytes, uint64_t fd_offset) {
  if (!found) return "the memory is not mapped in this process";
  if (v->perms[3] != 's' && v->inode == 0)
    return "private anonymous memory (malloc, MAP_PRIVATE | MAP_ANONYMOUS) cannot be shared "
           "with other processes: map a memfd (memfd_create) or a file MAP_SHARED and pass "
           "its fd";
  if (v->perms[3] != 's')
    return "a private (MAP_PRIVATE) mapping of a file cannot be shared: peers would not see "
           "this process's writes (map it MAP_SHARED)";
  if (makedev(v->dev_major, v->dev_minor) != st->st_dev || v->inode != (uint64_t)st->st_ino)
    return "the memory is not mapped from the fd passed (another file, or shared anonymous "
           "memory)";
  if (v->offset + (p - v->start) != fd_offset)
    return "fd_offset is not the file offset that ptr maps";
  if (nbytes > v->end - p) return "the tensor's bytes run past the end of the mapping";
  if (v->perms[0] != 'r' || v->perms[1] != 'w') return "the mapping is not readable and writable";
  return NULL;
}

/* The user's fd: a memfd or regular file open for reading and writing,
 * long enough; and ptr mapped from it as mapping_problem wants. */
static symm_result_t check_user_mem(const symm_user_mem_t *u, size_t nbytes, struct stat *st) {
  if (u->fd < 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "host backend: symm_tensor_register needs the fd of "
                      "the memfd or file mapped at ptr (mem->fd is %d)", u->fd);
  const int fl = fcntl(u->fd, F_GETFL);
  if (fl < 0 || fstat(u->fd, st) != 0)
    return symm_error_errno("host backend: symm_tensor_register: fd %d", u->fd);
  if (!S_ISREG(st->st_mode))
    return symm_error(SYMM_ERR_INVALID_ARG, "host backend: fd %d is not a memfd or regular file",
                      u->fd);
  if ((fl & O_ACCMODE) != O_RDWR)
    return symm_error(SYMM_ERR_INVALID_ARG, "host backend: fd %d is not open for reading and "
                      "writing (O_RDWR), which peers need to map it", u->fd);
  if ((uint64_t)st->st_size < u->fd_offset || (uint64_t)st->st_size - u->fd_offset < nbytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "host backend: fd %d's file is %lld bytes, shorter "
                      "than fd_offset %llu + %zu bytes", u->fd, (long long)st->st_size,
                      (unsigned long long)u->fd_offset, nbytes);
  host_vma_t v;
  const uintptr_t p = (uintptr_t)u->ptr;
  const bool found = find_vma(p, &v);
  const char *why = mapping_problem(&v, found, st, p, nbytes, u->fd_offset);
  if (why)
    return symm_error(SYMM_ERR_INVALID_ARG, "host backend: cannot register %p (+%zu bytes): %s",
                      u->ptr, nbytes, why);
  return SYMM_SUCCESS;
}

symm_result_t host_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem) {
  struct stat st;
  SYMM_CHECK(check_user_mem(u, nbytes, &st));
  const size_t page = host_state(comm)->page;
  host_mem_t *hm = calloc(1, sizeof *hm);
  if (!hm) return symm_error(SYMM_ERR_NO_MEMORY, "host backend: out of memory");
  symm_result_t res = SYMM_SUCCESS;
  SYMM_SYSCHECK_GOTO(hm->fd = fcntl(u->fd, F_DUPFD_CLOEXEC, 0), res, fail,
                     "host backend: duplicating fd %d", u->fd);
  SYMM_CHECK_GOTO(symm_fdx_publish(host_state(comm)->fdx, mem->id, hm->fd), res, fail);
  /* Peers map whole pages: from the page that holds ptr. */
  const size_t in_page = (size_t)(u->fd_offset % page);
  hm->file_offset = u->fd_offset - in_page;
  hm->dev = (uint64_t)st.st_dev;
  hm->ino = (uint64_t)st.st_ino;
  symm_mem_set_user(mem, (char *)u->ptr - in_page, in_page, nbytes, -1, hm);
  return SYMM_SUCCESS;
fail:
  if (hm->fd >= 0) close(hm->fd);
  free(hm);
  return res;
}

void host_deregister_user(symm_comm_t *comm, symm_mem_t *mem) {
  host_mem_t *hm = mem->priv;
  if (!hm) return;
  symm_fdx_unpublish(host_state(comm)->fdx, mem->id);
  /* Undefined while registered, and seen here where it can be: peers
   * may have written into memory the user let go. */
  host_vma_t v;
  const uintptr_t p = (uintptr_t)mem->base + mem->data_offset;
  if (!find_vma(p, &v) || v.inode != hm->ino)
    SYMM_WARN(BACKEND, "host backend: the registered memory at %p was unmapped (or mapped "
              "anew) while registered: peers' writes to it were undefined", (void *)p);
  close(hm->fd);
  free(hm);
  mem->priv = NULL;
  mem->base = NULL;
}
