/*
 * nvshmem backend lifecycle: probe (the host library and a CUDA device),
 * init (NVLS off, the route this rank would start NVSHMEM by published),
 * startup (the process's NVSHMEM instance started or shared,
 * nvshmem_instance.c), fini.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvshmem/nvshmem.h"

symm_result_t nvsh_probe(char *why, size_t why_len) {
  char reason[768] = "";
  int count = 0;
  const symm_cu_driver_t *drv = NULL;
  if (!nvsh_lib_get(reason, sizeof reason)) goto unusable;
  drv = symm_cu_driver_init(reason, sizeof reason);
  if (!drv) goto unusable;
  ncu_result res = drv->cuDeviceGetCount(&count);
  if (res != NCU_SUCCESS || count < 1) {
    snprintf(reason, sizeof reason, "no CUDA device visible (%s)",
             res != NCU_SUCCESS ? symm_cu_error(res) : "device count 0");
    goto unusable;
  }
  return SYMM_SUCCESS;
unusable:
  if (why && why_len) snprintf(why, why_len, "%s", reason);
  return SYMM_ERR_UNSUPPORTED;
}

/* NVLink multicast stays off (the GPU safety rule): NVSHMEM reads its
 * environment when it first runs (nvshmemx_get_uniqueid or init), and
 * child processes inherit the setting. */
static void nvsh_disable_nvls(void) {
  const char *v = getenv("NVSHMEM_DISABLE_NVLS");
  if (v && strcmp(v, "1") == 0) return;
  if (v && *v)
    SYMM_WARN(BACKEND, "nvshmem: NVSHMEM_DISABLE_NVLS=%s overridden to 1: symmem never lets a "
              "provider use NVLink multicast", v);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
}

/* Who this process is to its peers: random once per process, so that
 * communicators over the same processes in the same order see the same
 * world. */
static pthread_once_t nvsh_token_once = PTHREAD_ONCE_INIT;
static uint8_t nvsh_token[16];
static void nvsh_make_token(void) { symm_random_bytes(nvsh_token, sizeof nvsh_token); }

symm_result_t nvsh_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  (void)caps;
  char why[768] = "";
  nvsh_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  symm_backend_set_state(comm, st);
  st->gpu = symm_gpu_of(comm);
  if (!st->gpu) return symm_error(SYMM_ERR_INTERNAL, "nvshmem: the GPU engine is not started");
  st->lib = nvsh_lib_get(why, sizeof why);
  if (!st->lib) return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "nvshmem: %s", why);
  st->rank = symm_comm_rank(comm);
  st->size = symm_comm_size(comm);
  nvsh_disable_nvls();

  char why_route[768] = "";
  const nvsh_route_t route = nvsh_boot_route(st->lib, why_route, sizeof why_route);
  if (route == NVSH_ROUTE_NONE)
    return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "nvshmem: SYMM_NVSHMEM_BOOTSTRAP=plugin, but "
                      "%s", why_route);
  SYMM_INFO(BACKEND, "nvshmem: rank %d can start NVSHMEM %s (%s)", st->rank,
            route == NVSH_ROUTE_PLUGIN ? "through symmem's bootstrap plugin"
                                       : "from rank 0's unique id", why_route);
  nvsh_rank_info_t *me = calloc(1, sizeof *me);
  if (!me) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  me->magic = NVSH_INFO_MAGIC;
  me->route = (uint32_t)route;
  pthread_once(&nvsh_token_once, nvsh_make_token);
  memcpy(me->token, nvsh_token, sizeof me->token);
  symm_random_bytes(me->nonce, sizeof me->nonce);
  nvsh_instance_held(&me->held_id, &me->held_world);
  me->boot_world = nvsh_boot_world();
  blob->data = me;
  blob->len = sizeof *me;
  return SYMM_SUCCESS;
}

symm_result_t nvsh_startup(symm_comm_t *comm, const symm_blob_t *all) {
  nvsh_state_t *st = symm_backend_state(comm);
  const nvsh_rank_info_t **ranks = calloc((size_t)st->size, sizeof *ranks);
  symm_result_t res = SYMM_SUCCESS;
  if (!ranks) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  for (int r = 0; r < st->size; r++) {
    ranks[r] = all[r].data;
    if (!ranks[r] || all[r].len != sizeof *ranks[r] || ranks[r]->magic != NVSH_INFO_MAGIC) {
      res = symm_error(SYMM_ERR_PROTOCOL, "nvshmem: rank %d published %zu bytes at init, not "
                       "%zu", r, all[r].len, sizeof *ranks[r]);
      goto out;
    }
  }
  ncu_context saved;
  SYMM_CHECK_GOTO(symm_gpu_enter(st->gpu, &saved), res, out);
  res = nvsh_instance_join(comm, st, ranks);
  symm_gpu_leave(st->gpu, saved);
  if (res == SYMM_SUCCESS) {
    int unreachable = 0;
    for (int r = 0; r < st->size; r++) unreachable += !st->reachable[r];
    SYMM_INFO(BACKEND, "nvshmem: rank %d is PE %d of %d (%s, started %s), %d peer(s) beyond "
              "load/store", st->rank, st->lib->my_pe(), st->lib->n_pes(), st->lib->path,
              st->route == NVSH_ROUTE_PLUGIN ? "through symmem's bootstrap plugin"
                                             : "from rank 0's unique id", unreachable);
  }
out:
  free(ranks);
  return res;
}

void nvsh_fini(symm_comm_t *comm) {
  nvsh_state_t *st = symm_backend_state(comm);
  if (!st) return;
  nvsh_instance_leave(comm, st);
  free(st);
  symm_backend_set_state(comm, NULL);
}

size_t nvsh_granularity(symm_comm_t *comm) {
  (void)comm;
  /* NVSHMEM sub-allocates its heap: a page keeps the signal pad apart from
   * the data without wasting a 2 MiB granule per tensor. */
  return 4096;
}

bool nvsh_peer_reachable(symm_comm_t *comm, int peer) {
  const nvsh_state_t *st = symm_backend_state(comm);
  return st && st->reachable && peer >= 0 && peer < st->size && st->reachable[peer];
}
