/* host backend: CPU shared memory from memfd_create, shared by passing the
 * fds over abstract Unix sockets (backends/util/fd_exchange.h).  Its
 * collectives and signals are the CPU engine's. */
#ifndef SYMM_HOST_H
#define SYMM_HOST_H

#include "backends/util/fd_exchange.h"
#include "symm_backend.h"

typedef struct {
  symm_fdx_t *fdx;
  size_t page;
} host_state_t;

/* Per allocation: the memfd, kept open while the allocation lives so that
 * peers can fetch it at any time. */
typedef struct {
  int fd;
  /* A registration (mem->user): the user's file, where the pages peers
   * map start in it, and the file's identity (to see it unmapped). */
  uint64_t file_offset;
  uint64_t dev, ino;
} host_mem_t;

static inline host_state_t *host_state(const symm_comm_t *comm) {
  return (host_state_t *)symm_backend_state(comm);
}

/* Bytes the memory cgroups of this process still let it charge: the least,
 * over its cgroup and every ancestor (v2: memory.max − memory.current; v1,
 * the hierarchy with the memory controller: memory.limit_in_bytes −
 * memory.usage_in_bytes; each plus the inactive file cache of memory.stat),
 * with `where` (optional) set to the cgroup's directory that sets it.
 * mountinfo and proc_cgroup are the files read (/proc/self/mountinfo,
 * /proc/self/cgroup), prefix goes before every mount point ("" but in
 * tests of a tree made elsewhere).  UINT64_MAX: no limit, or none readable. */
uint64_t host_cgroup_room(const char *mountinfo, const char *proc_cgroup, const char *prefix,
                          char *where, size_t where_len);
SYMM_BACKEND_DECLARE_REQUIRED(host);
symm_result_t host_contiguous_map(symm_comm_t *comm, const symm_mem_t *local,
                                  const symm_peer_map_t *maps, const symm_exchange_info_t *infos,
                                  void **base, size_t *stride, void **priv);
void host_contiguous_unmap(symm_comm_t *comm, void *base, size_t bytes, void *priv);
/* host_register.c: symm_tensor_register's memfds and files. */
symm_result_t host_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem);
void host_deregister_user(symm_comm_t *comm, symm_mem_t *mem);
/* host_exchange.c: what peers need to open this rank's memfd or
 * registered file (through /proc, else its fd server) and map it. */
symm_result_t host_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);

#endif
