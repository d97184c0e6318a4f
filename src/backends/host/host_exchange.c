/* host backend: mapping a peer's memfd.  The fd is only needed for mmap; the
 * mapping keeps the memory alive after both the fd and the owner are gone.
 * What the peer advertised is checked here, where it is read, against the
 * fd itself and this rank's own allocation of the same tensor: a bad value
 * fails the mapping, and the rendezvous agrees on that on every rank. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"

/* The peer's layout: the pad (pad_bytes, the same on every rank) inside the part before
 * the data, both at page multiples (the pad's atomics, and the contiguous
 * view's mmap offsets, need them aligned), and at least this rank's data
 * span after data_offset, so that every byte this rank may touch in its own
 * allocation exists in the peer's. */
static symm_result_t host_check_layout(symm_comm_t *comm, const symm_mem_t *local, int peer,
                                       const symm_exchange_info_t *info) {
  const uint64_t page = host_state(comm)->page;
  const uint64_t span = local->alloc_bytes - local->data_offset;
  const char *bad = NULL;
  if (info->data_offset > info->alloc_bytes)
    bad = "data offset past the allocation";
  else if (info->alloc_bytes - info->data_offset < span)
    bad = "data shorter than this rank's";
  else if (info->pad_offset > info->data_offset ||
           info->data_offset - info->pad_offset < local->pad_bytes)
    bad = "signal pad not before the data";
  else if (info->data_offset % page || info->pad_offset % page)
    bad = "offsets not page-aligned";
  if (!bad) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_PROTOCOL, "host backend: rank %d advertised a bad layout (%s): "
                    "%llu bytes, data at %llu, pad at %llu; this rank's data is %llu bytes",
                    peer, bad, (unsigned long long)info->alloc_bytes,
                    (unsigned long long)info->data_offset, (unsigned long long)info->pad_offset,
                    (unsigned long long)span);
}

/* What export_mem puts in the blob: where the owner holds the memfd (or
 * a registration's file) and which file it is, so that a peer can open it
 * through /proc, and for a registration where in the file the pages that
 * peers map start (page-aligned). */
#define HOST_BLOB_MAGIC 0x44465048u /* "HPFD" in memory order */
typedef struct {
  uint32_t magic;
  int32_t fd;
  uint64_t ino, dev;
  uint64_t file_offset;
} host_blob_t;
_Static_assert(sizeof(host_blob_t) <= SYMM_EXCHANGE_BLOB_BYTES, "host blob too large");

symm_result_t host_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  (void)comm;
  const host_mem_t *hm = mem->priv;
  struct stat st;
  host_blob_t b = {.magic = HOST_BLOB_MAGIC, .fd = hm->fd,
                   .file_offset = mem->user ? hm->file_offset : 0};
  if (fstat(hm->fd, &st) == 0) {
    b.ino = (uint64_t)st.st_ino;
    b.dev = (uint64_t)st.st_dev;
  } else {
    b.magic = 0; /* peers fetch it from the fd server */
  }
  memcpy(info->blob, &b, sizeof b);
  return SYMM_SUCCESS;
}

/* A peer's registration (local->user: every rank's is): its file's pages
 * from the blob's file offset, with this rank's tensor bytes after
 * data_offset.  *file_offset: where the mapping starts in the file. */
static symm_result_t host_check_user_layout(symm_comm_t *comm, const symm_mem_t *local, int peer,
                                            const symm_exchange_info_t *info,
                                            uint64_t *file_offset) {
  const uint64_t page = host_state(comm)->page;
  host_blob_t b;
  memcpy(&b, info->blob, sizeof b);
  *file_offset = b.file_offset;
  const uint64_t span = local->alloc_bytes - local->data_offset;
  if (info->data_offset < page && info->data_offset <= info->alloc_bytes &&
      info->alloc_bytes - info->data_offset == span && *file_offset % page == 0 &&
      *file_offset <= UINT64_MAX - info->alloc_bytes)
    return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_PROTOCOL, "host backend: rank %d advertised a bad registration: "
                    "%llu bytes with data at %llu from file offset %llu; this rank's data is "
                    "%llu bytes", peer, (unsigned long long)info->alloc_bytes,
                    (unsigned long long)info->data_offset, (unsigned long long)*file_offset,
                    (unsigned long long)span);
}

/* A registered file need not be a sealed memfd (it is the user's): a
 * regular file long enough for what the peer announced. */
static symm_result_t host_check_user_file(int fd, int peer, uint64_t end) {
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= end)
    return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_PROTOCOL, "host backend: rank %d's registered file is not a "
                    "regular file of at least %llu bytes; refusing to map it", peer,
                    (unsigned long long)end);
}

/* Opens the peer's memfd through /proc/<pid>/fd/<n>: one local open, no
 * round trip to the peer's fd server, which at hundreds of ranks on a few
 * CPUs waits for the scheduler each time.  The kernel allows it to
 * processes of the same user only; the file must be the one the owner
 * announced (inode and device), so a pid or fd number used anew never
 * passes.  *fd -1 with SYMM_SUCCESS: not this way (another PID namespace,
 * the process not dumpable, the file not the one announced), the fd
 * server decides.  SYMM_ERR_PEER_LOST when the peer's process is gone. */
static symm_result_t host_open_by_proc(symm_comm_t *comm, int peer,
                                       const symm_exchange_info_t *info, int *fd) {
  *fd = -1;
  host_blob_t b;
  memcpy(&b, info->blob, sizeof b);
  const int32_t pid = symm_comm_peer_pid(comm, peer);
  if (b.magic != HOST_BLOB_MAGIC || b.fd < 0 || pid <= 0) return SYMM_SUCCESS;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)b.fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0) {
    if (symm_process_gone(pid))
      return symm_error(SYMM_ERR_PEER_LOST, "host backend: rank %d (pid %d) is gone; its "
                        "memory cannot be mapped", peer, (int)pid);
    return SYMM_SUCCESS;
  }
  struct stat st;
  if (fstat(f, &st) != 0 || (uint64_t)st.st_ino != b.ino || (uint64_t)st.st_dev != b.dev) {
    close(f);
    return SYMM_SUCCESS;
  }
  *fd = f;
  return SYMM_SUCCESS;
}

symm_result_t host_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  uint64_t offset = 0;
  if (local->user) SYMM_CHECK(host_check_user_layout(comm, local, peer, info, &offset));
  else SYMM_CHECK(host_check_layout(comm, local, peer, info));
  int fd = -1;
  SYMM_CHECK(host_open_by_proc(comm, peer, info, &fd));
  if (fd < 0) SYMM_CHECK(symm_fdx_fetch(host_state(comm)->fdx, peer, info->id, &fd));
  symm_result_t res = SYMM_SUCCESS;
  SYMM_CHECK_GOTO(local->user ? host_check_user_file(fd, peer, offset + info->alloc_bytes)
                              : symm_fdx_check_memfd(fd, peer, info->alloc_bytes),
                  res, out);
  void *p = mmap(NULL, info->alloc_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
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
