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
 */
#ifndef SYMM_NVSHMEM_H
#define SYMM_NVSHMEM_H

#include "backends/nvshmem/nvshmem_lib.h"
#include "symm_backend.h"
#include "symm_gpu.h"

/* What every rank publishes at init, read by every rank's startup. */
#define NVSH_INFO_MAGIC 0x4e565348u /* "NVSH" */
typedef struct nvsh_rank_info {
  uint32_t magic;
  uint32_t has_uid;       /* uid below is a fresh unique id (rank 0) */
  uint8_t token[16];      /* this process, random once per process */
  uint64_t held_uid;      /* the instance this process holds (its id's hash), 0: none */
  uint64_t held_world;    /* that instance's world */
  nvsh_uid_t uid;
} nvsh_rank_info_t;

/* symm_backend_state of an nvshmem communicator. */
typedef struct nvsh_state {
  const nvsh_lib_t *lib;
  symm_gpu_t *gpu;
  int rank, size;
  bool joined;            /* holds a reference on the instance */
  const bool *reachable;  /* [size]: the instance's, valid while joined */
  uint64_t coll_calls;    /* provider collectives run: which half of the staging */
} nvsh_state_t;

/* Entry points of the process's instance (nvshmem_instance.c); all take
 * the instance's lock. */
/* What this process holds now, for the init blob. */
void nvsh_instance_held(uint64_t *uid_hash, uint64_t *world);
/* Starts the instance from rank 0's unique id, or shares the one this
 * process holds, or refuses: the same decision on every rank, from every
 * rank's blob.  Sets st->joined and st->reachable. */
symm_result_t nvsh_instance_join(symm_comm_t *comm, nvsh_state_t *st,
                                 const nvsh_rank_info_t *const *ranks);
/* Drops st's reference; the last one finalises NVSHMEM (collective). */
void nvsh_instance_leave(symm_comm_t *comm, nvsh_state_t *st);
/* The count of nvshmem_malloc calls this instance made, after one more. */
uint64_t nvsh_instance_count_malloc(void);

/* Ops implemented in the files of this folder (nvshmem_ops.c tables them). */
SYMM_BACKEND_DECLARE_REQUIRED(nvsh);
symm_result_t nvsh_startup(symm_comm_t *comm, const symm_blob_t *all);
symm_result_t nvsh_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
bool nvsh_peer_reachable(symm_comm_t *comm, int peer);
symm_result_t nvsh_collective(symm_comm_t *comm, const symm_coll_args_t *args);
void nvsh_describe(FILE *out);

#endif /* SYMM_NVSHMEM_H */
