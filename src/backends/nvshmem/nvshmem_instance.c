/*
 * The process's NVSHMEM instance: started by nvshmemx_hostlib_init_attr
 * with rank 0's unique id (NVSHMEMX_INIT_WITH_UNIQUEID: no MPI, no PMI),
 * shared by the communicators of the same world, finalised by the last.
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
  uint64_t uid_hash;      /* of the unique id it started from: names it */
  uint64_t world;         /* hash of its ranks' process tokens, in rank order */
  int rank, size;
  const nvsh_lib_t *lib;
  void *probe;            /* NVSH_PROBE_BYTES from nvshmem_malloc */
  bool *reachable;        /* [size]: nvshmem_ptr(probe, r) != NULL */
  uint64_t mallocs;
} nvsh_instance_t;

static pthread_mutex_t nvsh_lock = PTHREAD_MUTEX_INITIALIZER;
static nvsh_instance_t nvsh_inst;

void nvsh_instance_held(uint64_t *uid_hash, uint64_t *world) {
  pthread_mutex_lock(&nvsh_lock);
  *uid_hash = nvsh_inst.refs ? nvsh_inst.uid_hash : 0;
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

/* nvshmemx_hostlib_init_attr with rank 0's unique id, then the checks that
 * it made this rank the PE we expect, and the reachability of every PE. */
static symm_result_t nvsh_instance_start(nvsh_state_t *st, const nvsh_uid_t *uid,
                                         nvsh_instance_t *in) {
  const nvsh_lib_t *lib = st->lib;
  nvsh_init_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.version = NVSH_STRUCT_VERSION(2, nvsh_init_attr_t);
  attr.args.version = NVSH_STRUCT_VERSION(2, nvsh_init_args_t);
  attr.args.uid_args.version = NVSH_STRUCT_VERSION(1, nvsh_uid_args_t);
  attr.args.uid_args.myrank = attr.args.uid_args.nranks = -1;
  attr.args.cuda_device_id = -1; /* the GPU engine made our device's context current */
  int rc = lib->set_attr_uniqueid_args(st->rank, st->size, uid, &attr);
  if (rc != 0)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_set_attr_uniqueid_args(rank %d of %d) "
                      "failed: %d", st->rank, st->size, rc);
  rc = lib->hostlib_init_attr(NVSH_INIT_WITH_UNIQUEID, &attr);
  if (rc != 0)
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_hostlib_init_attr (unique id of rank "
                      "0, PE %d of %d) failed: %d (NVSHMEM_DEBUG=INFO says why)", st->rank,
                      st->size, rc);
  in->refs = 1;
  in->lib = lib;
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

/* Whether every rank holds the instance this one holds, started for this
 * world (then it is shared). */
static bool nvsh_all_hold(const nvsh_rank_info_t *const *ranks, int size, uint64_t world) {
  for (int r = 0; r < size; r++)
    if (!ranks[r]->held_uid || ranks[r]->held_uid != ranks[0]->held_uid ||
        ranks[r]->held_world != world)
      return false;
  return true;
}

static symm_result_t nvsh_refuse(const nvsh_state_t *st, const nvsh_rank_info_t *const *ranks) {
  int holder = -1, free_rank = -1;
  for (int r = 0; r < st->size; r++) {
    if (ranks[r]->held_uid && holder < 0) holder = r;
    if (!ranks[r]->held_uid && free_rank < 0) free_rank = r;
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
  (void)comm;
  const uint64_t world = nvsh_world_of(ranks, st->size);
  bool none = true;
  for (int r = 0; r < st->size; r++) none &= ranks[r]->held_uid == 0;
  if (!none && !nvsh_all_hold(ranks, st->size, world)) return nvsh_refuse(st, ranks);
  if (none && !ranks[0]->has_uid)
    return symm_error(SYMM_ERR_PROTOCOL, "nvshmem: rank 0 published no unique id");

  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&nvsh_lock);
  const uint64_t mine = nvsh_inst.refs ? nvsh_inst.uid_hash : 0;
  if (mine != ranks[st->rank]->held_uid) {
    res = symm_error(SYMM_ERR_STATE, "nvshmem: this process's NVSHMEM instance came or went "
                     "while the communicator started (communicators created and destroyed "
                     "concurrently)");
  } else if (!none) {
    nvsh_inst.refs++;
    st->joined = true;
  } else {
    nvsh_instance_t in;
    memset(&in, 0, sizeof in);
    res = nvsh_instance_start(st, &ranks[0]->uid, &in);
    in.uid_hash = symm_hash64(&ranks[0]->uid, sizeof ranks[0]->uid, world);
    in.world = world;
    nvsh_inst = in;
    st->joined = in.refs > 0; /* started, even if a check after failed: fini stops it */
  }
  if (st->joined) st->reachable = nvsh_inst.reachable;
  pthread_mutex_unlock(&nvsh_lock);
  return res;
}

void nvsh_instance_leave(symm_comm_t *comm, nvsh_state_t *st) {
  if (!st->joined) return;
  pthread_mutex_lock(&nvsh_lock);
  if (--nvsh_inst.refs == 0) {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    nvsh_instance_stop(comm, &nvsh_inst);
    if (entered) symm_gpu_leave(st->gpu, saved);
  }
  pthread_mutex_unlock(&nvsh_lock);
  st->joined = false;
  st->reachable = NULL;
}
