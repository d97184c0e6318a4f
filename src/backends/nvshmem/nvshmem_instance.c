/*
 * The process's NVSHMEM instance: started by nvshmemx_hostlib_init_attr,
 * through symmem's bootstrap plugin (nvshmem_boot.c) or with rank 0's
 * unique id (NVSHMEMX_INIT_WITH_UNIQUEID), never MPI or PMI; shared by the
 * communicators of the same world, finalised by the last.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvshmem/nvshmem.h"

/* nvshmem_ptr answers per address; one small block of the heap, kept for
 * the instance's life, is what reachability is asked about. */
#define NVSH_PROBE_BYTES 4096

typedef struct nvsh_instance {
  int refs;               /* communicators joined; 0: no instance */
  uint64_t id;            /* names it: rank 0's nonce and the world, hashed */
  nvsh_route_t route;
  uint64_t world;         /* hash of its ranks' process tokens, in rank order */
  int rank, size;
  const nvsh_lib_t *lib;
  void *probe;            /* NVSH_PROBE_BYTES from nvshmem_malloc */
  bool *reachable;        /* [size]: nvshmem_ptr(probe, r) != NULL */
  uint64_t mallocs;
} nvsh_instance_t;

static pthread_mutex_t nvsh_lock = PTHREAD_MUTEX_INITIALIZER;
static nvsh_instance_t nvsh_inst;

void nvsh_instance_held(uint64_t *id, uint64_t *world) {
  pthread_mutex_lock(&nvsh_lock);
  *id = nvsh_inst.refs ? nvsh_inst.id : 0;
  *world = nvsh_inst.refs ? nvsh_inst.world : 0;
  pthread_mutex_unlock(&nvsh_lock);
}

uint64_t nvsh_instance_count_malloc(void) {
  pthread_mutex_lock(&nvsh_lock);
  uint64_t n = ++nvsh_inst.mallocs;
  pthread_mutex_unlock(&nvsh_lock);
  return n;
}

/* Frees the probe block and finalises NVSHMEM; both are collective, and
 * wait for every PE: skipped when a peer's process is gone (the process
 * keeps the heap until it exits). */
static void nvsh_instance_stop(symm_comm_t *comm, nvsh_instance_t *in) {
  int gone = symm_comm_first_gone(comm);
  if (gone >= 0) {
    SYMM_WARN(BACKEND, "nvshmem: rank %d's process is gone; NVSHMEM is not finalised (its "
              "collective finalize would wait for it), its heap stays until this process exits",
              gone);
  } else {
    if (in->probe) in->lib->free(in->probe);
    in->lib->hostlib_finalize();
  }
  free(in->reachable);
  memset(in, 0, sizeof *in);
}

static uint64_t nvsh_world_of(const nvsh_rank_info_t *const *ranks, int size) {
  uint64_t h = 0x6e767368ull;
  for (int r = 0; r < size; r++) h = symm_hash64(ranks[r]->token, sizeof ranks[r]->token, h);
  return h ? h : 1;
}

/* Rank 0's fresh unique id to every rank, in a round of the provider's:
 * rank 0 takes part also when nvshmemx_get_uniqueid failed, so that every
 * rank fails alike. */
static symm_result_t nvsh_uid_round(symm_comm_t *comm, const nvsh_state_t *st, nvsh_uid_t *uid) {
  struct {
    int32_t ok, rc;
    nvsh_uid_t uid;
  } mine, *all = calloc((size_t)st->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  memset(&mine, 0, sizeof mine);
  if (st->rank == 0) {
    mine.uid.version = NVSH_STRUCT_VERSION(1, nvsh_uid_t);
    mine.rc = st->lib->get_uniqueid(&mine.uid);
    mine.ok = mine.rc == 0;
  }
  symm_result_t res = symm_comm_provider_allgather(comm, &mine, sizeof mine, all);
  if (res == SYMM_SUCCESS && !all[0].ok)
    res = symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_get_uniqueid failed on rank 0: %d "
                     "(NVSHMEM_DEBUG=INFO says why)", (int)all[0].rc);
  if (res == SYMM_SUCCESS) *uid = all[0].uid;
  free(all);
  return res;
}

/* nvshmemx_hostlib_init_attr from rank 0's unique id (NVSHMEM's own
 * socket bootstrap). */
static symm_result_t nvsh_init_uniqueid(symm_comm_t *comm, const nvsh_state_t *st) {
  const nvsh_lib_t *lib = st->lib;
  nvsh_uid_t uid;
  SYMM_CHECK(nvsh_uid_round(comm, st, &uid));
  nvsh_init_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.version = NVSH_STRUCT_VERSION(2, nvsh_init_attr_t);
  attr.args.version = NVSH_STRUCT_VERSION(2, nvsh_init_args_t);
  attr.args.uid_args.version = NVSH_STRUCT_VERSION(1, nvsh_uid_args_t);
  attr.args.uid_args.myrank = attr.args.uid_args.nranks = -1;
  attr.args.cuda_device_id = -1; /* the GPU engine made our device's context current */
  int rc = lib->set_attr_uniqueid_args(st->rank, st->size, &uid, &attr);
  if (rc != 0)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_set_attr_uniqueid_args(rank %d of %d) "
                      "failed: %d", st->rank, st->size, rc);
  rc = lib->hostlib_init_attr(NVSH_INIT_WITH_UNIQUEID, &attr);
  if (rc != 0)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_hostlib_init_attr (unique id of rank "
                      "0, PE %d of %d) failed: %d (NVSHMEM_DEBUG=INFO says why)", st->rank,
                      st->size, rc);
  return SYMM_SUCCESS;
}

/* NVSHMEM started by `route`, then the checks that it made this rank the
 * PE we expect, and the reachability of every PE.  Collective. */
static symm_result_t nvsh_instance_start(symm_comm_t *comm, nvsh_state_t *st, nvsh_route_t route,
                                         uint64_t world, nvsh_instance_t *in) {
  const nvsh_lib_t *lib = st->lib;
  if (route == NVSH_ROUTE_PLUGIN)
    SYMM_CHECK(nvsh_boot_start(comm, lib, st->rank, st->size, world));
  else
    SYMM_CHECK(nvsh_init_uniqueid(comm, st));
  in->refs = 1;
  in->lib = lib;
  in->route = route;
  in->rank = st->rank;
  in->size = st->size;
  if (lib->my_pe() != st->rank || lib->n_pes() != st->size)
    return symm_error(SYMM_ERR_INTERNAL, "nvshmem: NVSHMEM made rank %d of %d PE %d of %d",
                      st->rank, st->size, lib->my_pe(), lib->n_pes());
  in->reachable = calloc((size_t)st->size, sizeof *in->reachable);
  if (!in->reachable) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  in->probe = lib->malloc(NVSH_PROBE_BYTES);
  if (!in->probe)
    return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: nvshmem_malloc(%d) failed right after "
                      "start-up (NVSHMEM_SYMMETRIC_SIZE sets the heap)", NVSH_PROBE_BYTES);
  for (int r = 0; r < st->size; r++)
    in->reachable[r] = r == st->rank || lib->ptr(in->probe, r) != NULL;
  return SYMM_SUCCESS;
}

/* The route every rank takes: the plugin where NVSHMEM keeps its plugin
 * bootstrap from an earlier instance (it would ignore a unique id), which
 * must then be this world's on every rank; else the plugin where every
 * rank can use it, else the unique id.  From every rank's blob: the same
 * on every rank. */
static symm_result_t nvsh_route_agreed(const nvsh_state_t *st,
                                       const nvsh_rank_info_t *const *ranks, uint64_t world,
                                       nvsh_route_t *route) {
  int kept = -1, uid_rank = -1;
  for (int r = 0; r < st->size; r++) {
    if (ranks[r]->boot_world && kept < 0) kept = r;
    if (ranks[r]->route != NVSH_ROUTE_PLUGIN && uid_rank < 0) uid_rank = r;
  }
  if (kept >= 0) {
    for (int r = 0; r < st->size; r++)
      if (ranks[r]->boot_world != world)
        return symm_error(SYMM_ERR_UNSUPPORTED, "nvshmem: rank %d's NVSHMEM keeps the bootstrap "
                          "of an earlier instance started through symmem's plugin (NVSHMEM keeps "
                          "a plugin bootstrap until the process exits), and rank %d's %s: a later "
                          "NVSHMEM instance must be of the same processes in the same rank order",
                          kept, r, ranks[r]->boot_world ? "is another world's" : "keeps none");
    if (ranks[st->rank]->route != NVSH_ROUTE_PLUGIN)
      SYMM_INFO(BACKEND, "nvshmem: NVSHMEM keeps the plugin's bootstrap of an earlier instance: "
                "started through it again, not from a unique id");
    *route = NVSH_ROUTE_PLUGIN;
    return SYMM_SUCCESS;
  }
  if (uid_rank >= 0 && ranks[st->rank]->route == NVSH_ROUTE_PLUGIN)
    SYMM_INFO(BACKEND, "nvshmem: rank %d starts NVSHMEM from a unique id (its "
              "SYMM_NVSHMEM_BOOTSTRAP, its plugin or its NVSHMEM), so every rank does", uid_rank);
  *route = uid_rank >= 0 ? NVSH_ROUTE_UNIQUEID : NVSH_ROUTE_PLUGIN;
  return SYMM_SUCCESS;
}

/* Whether every rank holds the instance this one holds, started for this
 * world (then it is shared). */
static bool nvsh_all_hold(const nvsh_rank_info_t *const *ranks, int size, uint64_t world) {
  for (int r = 0; r < size; r++)
    if (!ranks[r]->held_id || ranks[r]->held_id != ranks[0]->held_id ||
        ranks[r]->held_world != world)
      return false;
  return true;
}

static symm_result_t nvsh_refuse(const nvsh_state_t *st, const nvsh_rank_info_t *const *ranks) {
  int holder = -1, free_rank = -1;
  for (int r = 0; r < st->size; r++) {
    if (ranks[r]->held_id && holder < 0) holder = r;
    if (!ranks[r]->held_id && free_rank < 0) free_rank = r;
  }
  if (free_rank >= 0)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "nvshmem: NVSHMEM runs one instance per process, and rank %d's process "
                      "already runs one for another communicator while rank %d's runs none; "
                      "destroy that communicator first, or create this one over the same "
                      "processes in the same rank order (it then shares the instance)",
                      holder, free_rank);
  return symm_error(SYMM_ERR_UNSUPPORTED,
                    "nvshmem: NVSHMEM runs one instance per process, and the ranks' processes "
                    "already run instances of other worlds (rank %d's is not this "
                    "communicator's ranks in this order); destroy those communicators first",
                    holder);
}

symm_result_t nvsh_instance_join(symm_comm_t *comm, nvsh_state_t *st,
                                 const nvsh_rank_info_t *const *ranks) {
  const uint64_t world = nvsh_world_of(ranks, st->size);
  bool none = true;
  for (int r = 0; r < st->size; r++) none &= ranks[r]->held_id == 0;
  if (!none && !nvsh_all_hold(ranks, st->size, world)) return nvsh_refuse(st, ranks);
  nvsh_route_t route = NVSH_ROUTE_NONE;
  if (none) SYMM_CHECK(nvsh_route_agreed(st, ranks, world, &route));

  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&nvsh_lock);
  const uint64_t mine = nvsh_inst.refs ? nvsh_inst.id : 0;
  if (mine != ranks[st->rank]->held_id) {
    res = symm_error(SYMM_ERR_STATE, "nvshmem: this process's NVSHMEM instance came or went "
                     "while the communicator started (communicators created and destroyed "
                     "concurrently)");
  } else if (!none) {
    nvsh_inst.refs++;
    st->joined = true;
  } else {
    nvsh_instance_t in;
    memset(&in, 0, sizeof in);
    res = nvsh_instance_start(comm, st, route, world, &in);
    nvsh_boot_use(NULL);
    in.id = symm_hash64(ranks[0]->nonce, sizeof ranks[0]->nonce, world) | 1;
    in.world = world;
    nvsh_inst = in;
    st->joined = in.refs > 0; /* started, even if a check after failed: fini stops it */
  }
  if (st->joined) {
    st->reachable = nvsh_inst.reachable;
    st->route = nvsh_inst.route;
  }
  pthread_mutex_unlock(&nvsh_lock);
  return res;
}

void nvsh_instance_leave(symm_comm_t *comm, nvsh_state_t *st) {
  if (!st->joined) return;
  pthread_mutex_lock(&nvsh_lock);
  if (--nvsh_inst.refs == 0) {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    nvsh_boot_use(comm); /* finalize's barrier rides this communicator's bootstrap */
    nvsh_instance_stop(comm, &nvsh_inst);
    nvsh_boot_use(NULL);
    if (entered) symm_gpu_leave(st->gpu, saved);
  }
  pthread_mutex_unlock(&nvsh_lock);
  st->joined = false;
  st->reachable = NULL;
}
