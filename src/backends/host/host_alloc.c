/* host backend: allocations are memfds mapped shared; the fd is published
 * so that peers can fetch it during their rendezvous. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
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

/* ------------------------------------------------------------ cgroups */

/* The first number in file dir/name, or after `key` and a space in it;
 * "max" reads as UINT64_MAX.  false when the file or the key is missing. */
static bool read_cgroup_value(const char *dir, const char *name, const char *key,
                              uint64_t *out) {
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return false;
  FILE *f = fopen(path, "re");
  if (!f) return false;
  char line[256];
  bool found = false;
  const size_t klen = key ? strlen(key) : 0;
  while (!found && fgets(line, sizeof line, f)) {
    const char *v = line;
    if (key) {
      if (strncmp(line, key, klen) != 0 || line[klen] != ' ') continue;
      v = line + klen + 1;
    }
    unsigned long long n;
    if (strncmp(v, "max", 3) == 0) {
      *out = UINT64_MAX;
      found = true;
    } else if (sscanf(v, "%llu", &n) == 1) {
      *out = n;
      found = true;
    }
    if (!key) break;
  }
  fclose(f);
  return found;
}

/* What one cgroup still lets its members charge: limit − usage, plus the
 * inactive file cache the kernel reclaims before it refuses a charge (a
 * container that read large files is not full).  Swap is not counted: a
 * limit's room in swap is the exception, and a refusal costs less than an
 * OOM kill.  UINT64_MAX when the cgroup sets no limit. */
static uint64_t cgroup_level_room(const char *dir, bool v2) {
  uint64_t limit, usage, inactive = 0;
  if (!read_cgroup_value(dir, v2 ? "memory.max" : "memory.limit_in_bytes", NULL, &limit) ||
      !read_cgroup_value(dir, v2 ? "memory.current" : "memory.usage_in_bytes", NULL, &usage))
    return UINT64_MAX;
  if (limit == UINT64_MAX) return UINT64_MAX;
  read_cgroup_value(dir, "memory.stat", v2 ? "inactive_file" : "total_inactive_file", &inactive);
  if (usage > limit) usage = limit;
  const uint64_t room = limit - usage;
  return room > UINT64_MAX - inactive ? UINT64_MAX : room + inactive;
}

/* A cgroup hierarchy of this process: where it is mounted (prefix first)
 * and the process's cgroup inside it. */
typedef struct {
  char mount[PATH_MAX];
  char root[PATH_MAX]; /* the hierarchy's directory mounted there */
  bool found;
} cgroup_mount_t;

/* Whether comma-separated `list` holds `word`. */
static bool list_has(const char *list, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n')) return true;
  return false;
}

/* The mounts of the v2 hierarchy and of the v1 one that holds the memory
 * controller, from mountinfo: "id parent dev ROOT MOUNT opts... - TYPE
 * source SUPEROPTS". */
static void find_cgroup_mounts(const char *mountinfo, cgroup_mount_t *v2, cgroup_mount_t *v1) {
  FILE *f = fopen(mountinfo, "re");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char root[PATH_MAX], mount[PATH_MAX], type[32], source[64], super[512];
    const char *sep = strstr(line, " - ");
    if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mount) != 2 ||
        sscanf(sep + 3, "%31s %63s %511s", type, source, super) != 3)
      continue;
    cgroup_mount_t *m = strcmp(type, "cgroup2") == 0 ? v2
                        : strcmp(type, "cgroup") == 0 && list_has(super, "memory") ? v1
                                                                                 : NULL;
    if (!m || m->found) continue;
    snprintf(m->mount, sizeof m->mount, "%s", mount);
    snprintf(m->root, sizeof m->root, "%s", root);
    m->found = true;
  }
  fclose(f);
}

/* Walks from the process's cgroup `path` (as /proc/self/cgroup names it)
 * up to the hierarchy's top, keeping the least room; *where gets the
 * directory that sets it. */
static uint64_t walk_cgroups(const cgroup_mount_t *m, const char *prefix, const char *path,
                             bool v2, char *where, size_t where_len) {
  /* The mount shows the hierarchy from m->root on; outside a cgroup
   * namespace, the path starts with that root. */
  const size_t rl = strlen(m->root);
  if (strcmp(m->root, "/") != 0 && strncmp(path, m->root, rl) == 0 &&
      (path[rl] == '/' || path[rl] == '\0'))
    path += rl;
  char dir[PATH_MAX];
  const int top = snprintf(dir, sizeof dir, "%s%s", prefix, m->mount);
  if (top < 0 || (size_t)top >= sizeof dir ||
      (size_t)snprintf(dir + top, sizeof dir - (size_t)top, "%s", strcmp(path, "/") ? path : "") >=
          sizeof dir - (size_t)top)
    return UINT64_MAX;
  uint64_t least = UINT64_MAX;
  for (;;) {
    const uint64_t room = cgroup_level_room(dir, v2);
    if (room < least) {
      least = room;
      if (where) snprintf(where, where_len, "%s", dir);
    }
    char *slash = strrchr(dir, '/');
    if (!slash || slash - dir < top) break;
    *slash = '\0';
  }
  return least;
}

uint64_t host_cgroup_room(const char *mountinfo, const char *proc_cgroup, const char *prefix,
                          char *where, size_t where_len) {
  cgroup_mount_t v2 = {.found = false}, v1 = {.found = false};
  find_cgroup_mounts(mountinfo, &v2, &v1);
  FILE *f = fopen(proc_cgroup, "re");
  if (!f) return UINT64_MAX;
  uint64_t least = UINT64_MAX;
  char line[PATH_MAX + 64], here[PATH_MAX];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    /* "0::/path" (v2), "N:controller,...:/path" (v1) */
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = '\0';
    const bool v2_line = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
    const cgroup_mount_t *m = v2_line ? &v2 : list_has(c1 + 1, "memory") ? &v1 : NULL;
    if (!m || !m->found) continue;
    const uint64_t room = walk_cgroups(m, prefix, c2 + 1, v2_line, here, sizeof here);
    if (room < least) {
      least = room;
      if (where) snprintf(where, where_len, "%s", here);
    }
  }
  fclose(f);
  return least;
}

/* Backs the whole memfd now.  ftruncate alone makes a sparse file whose
 * pages come at first touch: a size the machine cannot back would succeed
 * here and kill the process with SIGBUS when touched.  A size beyond what
 * is available is refused before fallocate (which on a memfd would take
 * pages until the OOM killer stepped in): the machine's memory, and the
 * room the memory cgroups of this process leave (a container's limit, far
 * below what the machine has, is what the OOM killer enforces there).
 * fallocate then zero-fills, about 0.3 ms per MiB, once per fresh
 * allocation (pooled ones keep theirs). */
static symm_result_t host_reserve(int fd, size_t bytes) {
  const size_t avail = host_available_bytes();
  if (avail && bytes > avail)
    return symm_error(SYMM_ERR_NO_MEMORY, "host backend: %zu bytes requested, %zu available "
                      "on this machine (MemAvailable + SwapFree)", bytes, avail);
  char where[PATH_MAX];
  const uint64_t room = host_cgroup_room("/proc/self/mountinfo", "/proc/self/cgroup", "", where,
                                         sizeof where);
  if ((uint64_t)bytes > room)
    return symm_error(SYMM_ERR_NO_MEMORY, "host backend: %zu bytes requested, %llu available "
                      "in this process's memory cgroup %s (its limit less its usage)", bytes,
                      (unsigned long long)room, where);
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
  hm->fd = -1;
  SYMM_CHECK_GOTO(symm_file_size_check(mem->alloc_bytes, "host backend"), res, fail);
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
