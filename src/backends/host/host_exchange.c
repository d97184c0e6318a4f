/* host backend: mapping a peer's memfd.  The fd is only needed for mmap; the
 * mapping keeps the memory alive after both the fd and the owner are gone.
 * What the peer advertised is checked here, where it is read, against the
 * fd itself and this rank's own allocation of the same tensor: a bad value
 * fails the mapping, and the rendezvous agrees on that on every rank. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdint.h>
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

/* A peer's registration (local->user: every rank's is): its file's pages
 * from the blob's file offset, with this rank's tensor bytes after
 * data_offset.  *file_offset: where the mapping starts in the file. */
static symm_result_t host_check_user_layout(symm_comm_t *comm, const symm_mem_t *local, int peer,
                                            const symm_exchange_info_t *info,
                                            uint64_t *file_offset) {
  const uint64_t page = host_state(comm)->page;
  memcpy(file_offset, info->blob, sizeof *file_offset);
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

symm_result_t host_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map) {
  uint64_t offset = 0;
  if (local->user) SYMM_CHECK(host_check_user_layout(comm, local, peer, info, &offset));
  else SYMM_CHECK(host_check_layout(comm, local, peer, info));
  int fd = -1;
  SYMM_CHECK(symm_fdx_fetch(host_state(comm)->fdx, peer, info->id, &fd));
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
