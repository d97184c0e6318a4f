/*
 * State shared by the files of the nvshmem backend: memory from NVSHMEM's
 * symmetric heap (nvshmem_malloc, collective), peers' memory from
 * nvshmem_ptr, NVSHMEM's own team collectives where some peer is not
 * load/store reachable.  The device, its context and every other
 * collective and signal are the GPU engine's (symm_gpu.h).
 *
 * NVSHMEM is one instance per process (one PE per process, PE = rank).  A
 * communicator whose ranks are the same processes in the same order as the
 * instance's shares it (counted references: the last one to go finalises
 * it); any other communicator is refused while an instance is up.  Two
 * communicators that share one instance allocate from one heap, whose
 * nvshmem_malloc and nvshmem_free are collective over the whole instance:
 * their allocations and frees must come in the same order on every rank.
 *
 * NVSHMEM starts one of two ways (SYMM_NVSHMEM_BOOTSTRAP, agreed by every
 * rank at startup): through symmem's bootstrap plugin (nvshmem_boot.c),
 * whose rounds ride the bootstrap of the communicator whose call is in
 * NVSHMEM, or from rank 0's unique id over NVSHMEM's own socket bootstrap.
 * NVSHMEM keeps a plugin bootstrap until the process exits, also past
 * nvshmemx_hostlib_finalize, and starts a later instance on it: such a
 * process starts NVSHMEM again only through the plugin and for the same
 * processes in the same order.  Its finalize is a round over the last
 * communicator's bootstrap, so communicators that share an instance are
 * destroyed in the same order on every rank.
 */
#ifndef SYMM_NVSHMEM_H
#define SYMM_NVSHMEM_H

#include "backends/nvshmem/nvshmem_lib.h"
#include "symm_backend.h"
#include "symm_gpu.h"

/* How NVSHMEM is started: 0 none (refused). */
typedef enum { NVSH_ROUTE_NONE = 0, NVSH_ROUTE_UNIQUEID = 1, NVSH_ROUTE_PLUGIN = 2 } nvsh_route_t;

/* What every rank publishes at init, read by every rank's startup. */
#define NVSH_INFO_MAGIC 0x4e565349u /* "NVSI" */
typedef struct nvsh_rank_info {
  uint32_t magic;
  uint32_t route;         /* nvsh_route_t this rank can and would use */
  uint8_t token[16];      /* this process, random once per process */
  uint8_t nonce[16];      /* fresh at each init: rank 0's names a new instance */
  uint64_t held_id;       /* the instance this process holds, 0: none */
  uint64_t held_world;    /* that instance's world */
  uint64_t boot_world;    /* NVSHMEM keeps the plugin's bootstrap for this world, 0: none */
} nvsh_rank_info_t;

/* symm_backend_state of an nvshmem communicator. */
typedef struct nvsh_state {
  const nvsh_lib_t *lib;
  symm_gpu_t *gpu;
  int rank, size;
  bool joined;            /* holds a reference on the instance */
  nvsh_route_t route;     /* how the instance was started, once joined */
  const bool *reachable;  /* [size]: the instance's, valid while joined */
  uint64_t coll_calls;    /* provider collectives run: which half of the staging */
} nvsh_state_t;

/* Entry points of the process's instance (nvshmem_instance.c); all take
 * the instance's lock. */
/* What this process holds now, for the init blob. */
void nvsh_instance_held(uint64_t *id, uint64_t *world);
/* Starts the instance (through the plugin or from rank 0's unique id, as
 * every rank's blob decides), or shares the one this process holds, or
 * refuses: the same decision on every rank.  Sets st->joined and
 * st->reachable. */
symm_result_t nvsh_instance_join(symm_comm_t *comm, nvsh_state_t *st,
                                 const nvsh_rank_info_t *const *ranks);
/* Drops st's reference; the last one finalises NVSHMEM (collective). */
void nvsh_instance_leave(symm_comm_t *comm, nvsh_state_t *st);
/* The count of heap calls this instance made (nvshmem_malloc, and
 * nvshmemx_buffer_register_symmetric), after one more. */
uint64_t nvsh_instance_count_malloc(void);

/* NVSHMEM over symmem's bootstrap (nvshmem_boot.c). */
/* The route SYMM_NVSHMEM_BOOTSTRAP asks for with this library (loading the
 * plugin once per process where it is wanted), and why in why[cap];
 * NVSH_ROUTE_NONE when the plugin is asked for and cannot be used. */
nvsh_route_t nvsh_boot_route(const nvsh_lib_t *lib, char *why, size_t cap);
/* The plugin's path once loaded, else NULL. */
const char *nvsh_boot_plugin_path(void);
/* The world whose plugin bootstrap this process's NVSHMEM keeps, 0: none. */
uint64_t nvsh_boot_world(void);
/* nvshmemx_hostlib_init_attr through the plugin, bound to comm's bootstrap
 * as PE rank of size (world: the ranks' processes).  The rounds ride
 * comm's bootstrap until nvsh_boot_use changes it. */
symm_result_t nvsh_boot_start(symm_comm_t *comm, const nvsh_lib_t *lib, int rank, int size,
                              uint64_t world);
/* The communicator whose bootstrap NVSHMEM's next rounds ride: the one
 * whose call goes into NVSHMEM now (NULL after: a round then fails). */
void nvsh_boot_use(symm_comm_t *comm);

/* The user's memory registered with NVSHMEM (symm_mem_t.priv of a
 * registration, nvshmem_register.c): NVSHMEM's symmetric address for it,
 * the bytes registered, and which heap call of the instance made it (the
 * peers' must be the same one). */
typedef struct nvsh_user {
  void *sym;
  size_t bytes;
  uint64_t nth;
} nvsh_user_t;

/* Ops implemented in the files of this folder (nvshmem_ops.c tables them). */
SYMM_BACKEND_DECLARE_REQUIRED(nvsh);
symm_result_t nvsh_startup(symm_comm_t *comm, const symm_blob_t *all);
symm_result_t nvsh_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
bool nvsh_peer_reachable(symm_comm_t *comm, int peer);
symm_result_t nvsh_collective(symm_comm_t *comm, const symm_coll_args_t *args);
void nvsh_describe(FILE *out);
symm_result_t nvsh_check_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes);
symm_result_t nvsh_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem);
void nvsh_deregister_user(symm_comm_t *comm, symm_mem_t *mem);

#endif /* SYMM_NVSHMEM_H */
