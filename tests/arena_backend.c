/*
 * A backend that lives in the tests, to prove that the seam holds: it sees
 * only symm_backend.h, and gets rendezvous, views, signals and every
 * collective from the core and the CPU engine.  It shares CPU memory
 * another way than the host backend: each rank makes one arena (a memfd)
 * at init, every peer maps every arena once at startup (the fds pass once,
 * through the backends' fd exchange), and an allocation is an offset into
 * its rank's arena, so that mapping a peer's allocation is an addition.
 *
 * Two tables: "arena" allocates and frees locally; "arena_coll" declares
 * its allocation, free and registration collective (like NVSHMEM's heap
 * and NCCL's windows), so that the core's cross-rank checks run; it counts
 * its registrations for the tests, and has "collectives of its own" (counted,
 * not run) for the case where some peer is unreachable: ARENA_UNREACHABLE
 * makes the last rank and the others unreachable from each other, and
 * ARENA_UNREACHABLE=hosts the ranks of different hosts (as a provider that
 * maps the memory of its own host only: tests/test-hosts.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena_backend.h"
#include "backends/util/fd_exchange.h"
#include "symm_backend.h"
#include "symm_util.h"

#define ARENA_BYTES ((size_t)512 << 20) /* sparse: only what is touched is memory */
#define ARENA_FD_ID 1u
#define ARENA_ALIGN ((size_t)4096)

typedef struct {
  symm_fdx_t *fdx;
  /* ARENA_UNREACHABLE: set, the last rank and the others do not reach
   * each other; "hosts", the ranks of different hosts do not. */
  enum { ARENA_REACH_ALL, ARENA_REACH_SPLIT, ARENA_REACH_HOST } reach;
  long provider_calls; /* collectives run by arena_coll's own `collective` */
  int fd;
  char **bases;      /* [size]: every rank's arena as mapped here */
  size_t next;       /* bump pointer into this rank's arena */
  long registered;   /* registrations alive (arena_coll) */
} arena_state_t;

static arena_state_t *arena(const symm_comm_t *comm) { return symm_backend_state(comm); }

static symm_result_t arena_probe(char *why, size_t why_len) {
  (void)why, (void)why_len;
  return SYMM_SUCCESS;
}

static void arena_fini(symm_comm_t *comm) {
  arena_state_t *st = arena(comm);
  if (!st) return;
  for (int r = 0; st->bases && r < symm_comm_size(comm); r++)
    if (st->bases[r]) munmap(st->bases[r], ARENA_BYTES);
  if (st->fdx) symm_fdx_stop(st->fdx);
  if (st->fd >= 0) close(st->fd);
  free(st->bases);
  free(st);
  symm_backend_set_state(comm, NULL);
}

static symm_result_t arena_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  (void)caps, (void)blob;
  arena_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "arena: out of memory");
  st->fd = -1;
  const char *unreachable = getenv("ARENA_UNREACHABLE");
  st->reach = !unreachable ? ARENA_REACH_ALL
              : strcmp(unreachable, "hosts") == 0 ? ARENA_REACH_HOST : ARENA_REACH_SPLIT;
  symm_backend_set_state(comm, st);
  st->bases = calloc((size_t)symm_comm_size(comm), sizeof *st->bases);
  if (!st->bases) return symm_error(SYMM_ERR_NO_MEMORY, "arena: out of memory");
  st->fd = memfd_create("symmem-test-arena", MFD_CLOEXEC);
  if (st->fd < 0 || ftruncate(st->fd, (off_t)ARENA_BYTES) != 0)
    return symm_error_errno("arena: memfd of %zu bytes", ARENA_BYTES);
  char *mine = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, st->fd, 0);
  if (mine == MAP_FAILED) return symm_error_errno("arena: mmap");
  st->bases[symm_comm_rank(comm)] = mine;
  SYMM_CHECK(symm_fdx_start(comm, &st->fdx));
  return symm_fdx_publish(st->fdx, ARENA_FD_ID, st->fd);
}

static bool arena_peer_reachable(symm_comm_t *comm, int peer);

/* Every reachable peer's arena, once. */
static symm_result_t arena_startup(symm_comm_t *comm, const symm_blob_t *all) {
  (void)all;
  arena_state_t *st = arena(comm);
  for (int r = 0; r < symm_comm_size(comm); r++) {
    if (st->bases[r] || (st->reach == ARENA_REACH_HOST && !arena_peer_reachable(comm, r)))
      continue;
    int fd = -1;
    SYMM_CHECK(symm_fdx_fetch(st->fdx, r, ARENA_FD_ID, &fd));
    void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return symm_error_errno("arena: mapping rank %d's arena", r);
    st->bases[r] = p;
  }
  return SYMM_SUCCESS;
}

static size_t arena_granularity(symm_comm_t *comm) {
  (void)comm;
  return ARENA_ALIGN;
}

/* Bump allocation: freed memory is not reused by the backend (the core's
 * pool reuses it), which is enough for tests. */
static symm_result_t arena_alloc(symm_comm_t *comm, symm_mem_t *mem) {
  arena_state_t *st = arena(comm);
  if (mem->alloc_bytes > ARENA_BYTES - st->next)
    return symm_error(SYMM_ERR_NO_MEMORY, "arena: %zu bytes do not fit (%zu of %zu used)",
                      mem->alloc_bytes, st->next, ARENA_BYTES);
  mem->base = st->bases[symm_comm_rank(comm)] + st->next;
  mem->priv = (void *)(uintptr_t)st->next;
  mem->pad_offset = 0;
  st->next += mem->alloc_bytes;
  memset(mem->base, 0, mem->pad_bytes);
  return SYMM_SUCCESS;
}

static void arena_free(symm_comm_t *comm, symm_mem_t *mem) {
  (void)comm;
  /* Give the pages back; the range stays the arena's. */
  madvise(mem->base, mem->alloc_bytes, MADV_REMOVE);
}

/* ARENA_EXPORT_FAIL=<rank>: that rank's export fails, as a provider's
 * could (tests/test-limits.c). */
static symm_result_t arena_export(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info) {
  const char *fail = getenv("ARENA_EXPORT_FAIL");
  if (fail && *fail && atoi(fail) == symm_comm_rank(comm))
    return symm_error(SYMM_ERR_NO_MEMORY, "arena: export refused (ARENA_EXPORT_FAIL)");
  uint64_t off = (uint64_t)(uintptr_t)mem->priv;
  memcpy(info->blob, &off, sizeof off);
  return SYMM_SUCCESS;
}

/* With ARENA_UNREACHABLE, as ranks on two hosts would be: the last rank
 * alone on one, the others on another; with "hosts", as they are. */
static bool arena_peer_reachable(symm_comm_t *comm, int peer) {
  const int last = symm_comm_size(comm) - 1, me = symm_comm_rank(comm);
  switch (arena(comm)->reach) {
  case ARENA_REACH_SPLIT: return peer == me || (peer != last && me != last);
  case ARENA_REACH_HOST: return symm_comm_peer_same_host(comm, peer);
  default: return true;
  }
}

static symm_result_t arena_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer,
                                    const symm_exchange_info_t *info, symm_peer_map_t *map) {
  (void)local;
  uint64_t off;
  memcpy(&off, info->blob, sizeof off);
  if (off > ARENA_BYTES || info->alloc_bytes > ARENA_BYTES - off)
    return symm_error(SYMM_ERR_PROTOCOL, "arena: rank %d's allocation lies outside its arena",
                      peer);
  char *where = arena(comm)->bases[peer] ? arena(comm)->bases[peer] + off : NULL;
  /* Unreachable: shared, but not by loads and stores from here; arena_coll's
   * "provider" transfers (arena_one_sided) still reach it, at priv. */
  map->base = arena_peer_reachable(comm, peer) ? where : NULL;
  map->priv = where;
  return SYMM_SUCCESS;
}

static void arena_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map) {
  (void)comm, (void)map; /* the arena stays mapped until fini */
}

static symm_result_t arena_register(symm_comm_t *comm, symm_mem_t *mem) {
  (void)mem;
  arena(comm)->registered++;
  return SYMM_SUCCESS;
}

static void arena_deregister(symm_comm_t *comm, symm_mem_t *mem) {
  (void)mem;
  arena(comm)->registered--;
}

/* arena_coll's "provider" collectives: counted, and run by nothing (the
 * tests check that the core routes to them). */
static symm_result_t arena_provider_collective(symm_comm_t *comm,
                                               const struct symm_coll_args *args) {
  (void)args;
  arena(comm)->provider_calls++;
  return SYMM_SUCCESS;
}

/* arena_coll's "provider" one-sided transfers to peers it does not map:
 * through the arena (shared underneath), counted; a signal is a release
 * store of 1. */
static symm_result_t arena_one_sided(symm_comm_t *comm, int op, const symm_peer_map_t *map,
                                     int peer, size_t offset, void *local, size_t bytes,
                                     void *stream) {
  (void)stream;
  char *remote = map->priv;
  if (!remote)
    return symm_error(SYMM_ERR_UNSUPPORTED, "arena: rank %d's arena is not here", peer);
  arena(comm)->provider_calls++;
  if (op == SYMM_ONE_SIDED_SIGNAL) {
    /* As the engine's put: wait (within the timeout) for the last signal's
     * consumption, then 0 -> 1 with release. */
    _Atomic uint32_t *slot = (_Atomic uint32_t *)(remote + offset);
    const uint64_t end = symm_deadline_after(symm_comm_timeout_ms(comm));
    for (uint32_t empty = 0; !atomic_compare_exchange_weak_explicit(
             slot, &empty, 1u, memory_order_release, memory_order_relaxed);
         empty = 0)
      if (symm_now_ns() > end)
        return symm_error(SYMM_ERR_TIMEOUT, "arena: rank %d did not consume a signal", peer);
  } else if (op == SYMM_ONE_SIDED_PUT)
    memcpy(remote + offset, local, bytes);
  else
    memcpy(local, remote + offset, bytes);
  return SYMM_SUCCESS;
}

#define ARENA_OPS(id_, name_, caps_, coll_, one_sided_)                         \
  {                                                                             \
    .version = 5, .name = name_, .id = (symm_backend_t)(id_),                   \
    .mem_kind = SYMM_MEM_HOST, .caps = caps_, .probe = arena_probe,             \
    .init = arena_init, .startup = arena_startup, .fini = arena_fini,           \
    .granularity = arena_granularity, .alloc = arena_alloc, .free = arena_free, \
    .export_mem = arena_export, .map_peer = arena_map_peer,                     \
    .unmap_peer = arena_unmap_peer, .register_mem = arena_register,             \
    .deregister_mem = arena_deregister, .peer_reachable = arena_peer_reachable, \
    .collective = coll_, .one_sided = one_sided_,                               \
  }

static const symm_backend_ops_t arena_ops =
    ARENA_OPS(ARENA_BACKEND_ID, "arena", {0}, NULL, NULL);
static const symm_backend_ops_t arena_coll_ops =
    ARENA_OPS(ARENA_COLL_BACKEND_ID, "arena_coll",
              ((symm_backend_caps_t){.collective_alloc = true, .collective_free = true,
                                     .registers = true}),
              arena_provider_collective, arena_one_sided);

void arena_backends_register(void) {
  static int done;
  if (done++) return;
  if (symm_backend_register(&arena_ops) != SYMM_SUCCESS ||
      symm_backend_register(&arena_coll_ops) != SYMM_SUCCESS) {
    fprintf(stderr, "arena backends: %s\n", symm_last_error());
    abort();
  }
}

long arena_registered(const symm_comm_t *comm) { return arena(comm)->registered; }
long arena_provider_calls(const symm_comm_t *comm) { return arena(comm)->provider_calls; }
