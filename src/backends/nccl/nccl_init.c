/*
 * nccl backend lifecycle: probe (is a usable libnccl here, and if not,
 * why), init (NVLS off, rank 0's unique id into the blob, or the
 * communicator the parent's ncclCommSplit made for a group), startup (the
 * communicator from rank 0's id, non-blocking where the library can, and
 * which peers this rank can load and store), fini, describe.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nccl/nccl.h"

/* The library, and a device for it. */
symm_result_t nccl_probe(char *why, size_t why_len) {
  char reason[1024] = "";
  const symm_nccl_lib_t *lib = nccl_library(reason, sizeof reason);
  if (lib) nccl_missing(lib, nccl_library_path(), reason, sizeof reason);
  if (lib && !reason[0]) {
    const symm_cu_driver_t *drv = symm_cu_driver_init(reason, sizeof reason);
    int count = 0;
    if (drv && (drv->cuDeviceGetCount(&count) != NCU_SUCCESS || count < 1))
      snprintf(reason, sizeof reason, "NCCL found (%s) but no CUDA device is visible",
               nccl_library_path());
    else if (drv)
      return SYMM_SUCCESS;
  }
  if (why && why_len) snprintf(why, why_len, "%s", reason);
  return SYMM_ERR_UNSUPPORTED;
}

/* NVLS (NVLink multicast) stays off: NCCL reads this when a communicator
 * is made, and children inherit it. */
static void nccl_nvls_off(void) {
  const char *v = getenv("NCCL_NVLS_ENABLE");
  if (v && strcmp(v, "0") != 0)
    SYMM_WARN(BACKEND, "nccl: NCCL_NVLS_ENABLE=%s replaced by 0: symmem creates no NVLink "
              "multicast objects", v);
  if (!v || strcmp(v, "0") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1);
}

symm_result_t nccl_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  char why[1024] = "";
  nccl_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "nccl: out of memory");
  symm_backend_set_state(comm, st);
  st->gpu = symm_gpu_of(comm);
  if (!st->gpu) return symm_error(SYMM_ERR_INTERNAL, "nccl: the GPU engine is not started");
  st->lib = nccl_library(why, sizeof why);
  if (!st->lib) return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "nccl: %s", why);
  /* A group's communicator from its parent's ncclCommSplit: the state
   * owns it from here (fini), whatever fails below. */
  nccl_split_child_t *split = symm_comm_take_split_handle(comm);
  if (split) {
    st->comm = split->comm;
    st->nonblocking = split->nonblocking;
    st->from_split = true;
    free(split);
  }
  st->rank = symm_comm_rank(comm);
  st->size = symm_comm_size(comm);
  st->reachable = calloc((size_t)st->size, sizeof *st->reachable);
  if (!st->reachable) return symm_error(SYMM_ERR_NO_MEMORY, "nccl: out of memory");
  /* Without peer pointers the GPU engine has nothing to build a device
   * array from. */
  if (!st->lib->get_peer_device_pointer) caps->device_peer_array = false;
  nccl_nvls_off();

  nccl_rank_info_t *me = calloc(1, sizeof *me);
  if (!me) return symm_error(SYMM_ERR_NO_MEMORY, "nccl: out of memory");
  me->magic = NCCL_INFO_MAGIC;
  me->version = st->lib->version;
  me->split = st->from_split;
  if (st->rank == 0 && !st->from_split) {
    ncu_context saved;
    symm_result_t res = symm_gpu_enter(st->gpu, &saved);
    int rc = res == SYMM_SUCCESS ? st->lib->get_unique_id(&me->id) : 0;
    if (res == SYMM_SUCCESS) symm_gpu_leave(st->gpu, saved);
    if (res == SYMM_SUCCESS && rc != SYMM_NCCL_SUCCESS)
      res = symm_error(SYMM_ERR_BACKEND, "nccl: ncclGetUniqueId failed: %s",
                       nccl_result_text(st, rc));
    if (res != SYMM_SUCCESS) {
      free(me);
      return res;
    }
    me->has_id = 1;
  }
  blob->data = me;
  blob->len = sizeof *me;
  return SYMM_SUCCESS;
}

/* Every rank runs the same NCCL, and rank 0 sent the id, or every rank's
 * communicator came from the parent's ncclCommSplit. */
static symm_result_t nccl_check_blobs(const nccl_state_t *st, const symm_blob_t *all) {
  for (int r = 0; r < st->size; r++) {
    const nccl_rank_info_t *o = all[r].data;
    if (!o || all[r].len != sizeof *o || o->magic != NCCL_INFO_MAGIC)
      return symm_error(SYMM_ERR_PROTOCOL, "nccl: rank %d published %zu bytes at init, not an "
                        "nccl rank record of %zu", r, all[r].len, sizeof *o);
    if (o->version != st->lib->version) {
      char a[32], b[32];
      nccl_version_text(o->version, a, sizeof a);
      nccl_version_text(st->lib->version, b, sizeof b);
      return symm_error(SYMM_ERR_MISMATCH, "nccl: rank %d loaded NCCL %s, rank %d NCCL %s; every "
                        "rank must run the same NCCL", r, a, st->rank, b);
    }
    if (o->split != st->from_split)
      return symm_error(SYMM_ERR_PROTOCOL, "nccl: rank %d's NCCL communicator %s from the "
                        "parent's ncclCommSplit, rank %d's %s", r,
                        o->split ? "came" : "did not come", st->rank,
                        st->from_split ? "did" : "did not");
  }
  if (!st->from_split && !((const nccl_rank_info_t *)all[0].data)->has_id)
    return symm_error(SYMM_ERR_PROTOCOL, "nccl: rank 0 published no NCCL unique id");
  return SYMM_SUCCESS;
}

/* ncclCommInitRankConfig where present (non-blocking, so that the waits
 * keep to our timeout), else ncclCommInitRank. */
static symm_result_t nccl_make_comm(symm_comm_t *comm, nccl_state_t *st,
                                    const symm_nccl_unique_id_t *id) {
  int rc;
  if (st->lib->comm_init_rank_config) {
    symm_nccl_config_t cfg;
    symm_nccl_config_init(&cfg);
    snprintf(st->comm_name, sizeof st->comm_name, "symmem %s/%d", symm_comm_job_id(comm),
             symm_comm_index(comm));
    cfg.comm_name = st->comm_name;
    cfg.blocking = 0;
    st->nonblocking = true;
    rc = st->lib->comm_init_rank_config(&st->comm, st->size, *id, st->rank, &cfg);
  } else {
    rc = st->lib->comm_init_rank(&st->comm, st->size, *id, st->rank);
  }
  return nccl_call(comm, st, rc, st->nonblocking ? "ncclCommInitRankConfig" : "ncclCommInitRank");
}

/* Which peers' memory this rank loads and stores: NCCL's answer for a
 * window registered for the purpose (every rank registers it here, at the
 * same point).  Without ncclGetPeerDevicePointer, none. */
static symm_result_t nccl_find_reach(symm_comm_t *comm, nccl_state_t *st) {
  st->reachable[st->rank] = true;
  if (!st->lib->get_peer_device_pointer) return SYMM_SUCCESS;
  void *ptr = NULL;
  symm_nccl_window_t win = NULL;
  int rc = st->lib->mem_alloc(&ptr, SYMM_NCCL_WIN_ALIGNMENT);
  if (rc != SYMM_NCCL_SUCCESS) {
    symm_result_t err = symm_error(rc == SYMM_NCCL_SYSTEM_ERROR ? SYMM_ERR_NO_MEMORY : SYMM_ERR_BACKEND,
                                   "nccl: ncclMemAlloc(%d bytes) failed: %s",
                                   SYMM_NCCL_WIN_ALIGNMENT, nccl_result_text(st, rc));
    nccl_publish_failure(comm, err);
    return err;
  }
  symm_result_t res = nccl_window_register(comm, st, ptr, SYMM_NCCL_WIN_ALIGNMENT, &win);
  for (int r = 0; res == SYMM_SUCCESS && r < st->size; r++) {
    void *p = NULL;
    if (r == st->rank) continue;
    rc = st->lib->get_peer_device_pointer(win, 0, r, &p);
    if (rc != SYMM_NCCL_SUCCESS)
      res = symm_error(SYMM_ERR_BACKEND, "nccl: ncclGetPeerDevicePointer(rank %d) failed: %s", r,
                       nccl_result_text(st, rc));
    st->reachable[r] = p != NULL;
  }
  if (win) nccl_window_deregister(comm, st, win);
  st->lib->mem_free(ptr);
  return res;
}

symm_result_t nccl_startup(symm_comm_t *comm, const symm_blob_t *all) {
  nccl_state_t *st = symm_backend_state(comm);
  SYMM_CHECK(nccl_check_blobs(st, all));
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  symm_result_t res;
  if (st->from_split)
    SYMM_CHECK_GOTO(nccl_split_check(comm, st), res, out);
  else
    SYMM_CHECK_GOTO(nccl_make_comm(comm, st, &((const nccl_rank_info_t *)all[0].data)->id), res,
                    out);
  SYMM_CHECK_GOTO(nccl_find_reach(comm, st), res, out);
  int near = 0;
  for (int r = 0; r < st->size; r++) near += st->reachable[r];
  char v[32];
  nccl_version_text(st->lib->version, v, sizeof v);
  SYMM_INFO(BACKEND, "nccl: rank %d of %d on GPU %d, NCCL %s (%s), %s%s, %d of %d ranks "
            "load/store reachable%s", st->rank, st->size, symm_gpu_ordinal(st->gpu), v,
            nccl_library_path(), st->nonblocking ? "non-blocking" : "blocking",
            st->from_split ? ", from the parent's ncclCommSplit" : "", near, st->size,
            st->lib->get_peer_device_pointer ? "" : " (no ncclGetPeerDevicePointer)");
out:
  symm_gpu_leave(st->gpu, saved);
  return res;
}

void nccl_fini(symm_comm_t *comm) {
  nccl_state_t *st = symm_backend_state(comm);
  if (!st) return;
  if (st->comm) {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    /* A communicator whose peer is gone cannot be finalised. */
    if (symm_comm_first_gone(comm) >= 0) nccl_abort(st);
    else st->lib->comm_destroy(st->comm);
    st->comm = NULL;
    if (entered) symm_gpu_leave(st->gpu, saved);
  }
  free(st->reachable);
  free(st);
  symm_backend_set_state(comm, NULL);
}

size_t nccl_granularity(symm_comm_t *comm) {
  (void)comm;
  return SYMM_NCCL_WIN_ALIGNMENT;
}

bool nccl_peer_reachable(symm_comm_t *comm, int peer) {
  const nccl_state_t *st = symm_backend_state(comm);
  return st && peer >= 0 && peer < st->size && st->reachable[peer];
}

symm_result_t nccl_backend_handle(symm_comm_t *comm, void **handle) {
  const nccl_state_t *st = symm_backend_state(comm);
  if (!st || !st->comm)
    return symm_error(SYMM_ERR_STATE, "nccl: the NCCL communicator was aborted after an error");
  *handle = st->comm;
  return SYMM_SUCCESS;
}

void nccl_describe(FILE *out) {
  char why[1024] = "", v[32];
  const symm_nccl_lib_t *lib = nccl_library(why, sizeof why);
  if (!lib) return; /* symmem-info shows the probe's reason */
  nccl_version_text(lib->version, v, sizeof v);
  fprintf(out, "library: %s, NCCL %s (version code %d)\n", nccl_library_path(), v, lib->version);
  if (nccl_library_choice()[0]) fprintf(out, "chosen: %s\n", nccl_library_choice());
  nccl_missing(lib, nccl_library_path(), why, sizeof why);
  if (why[0]) fprintf(out, "unusable: %s\n", why);
  if (lib->get_peer_device_pointer)
    fprintf(out, "peer pointers: yes (ncclGetPeerDevicePointer): remote views, device peer "
            "arrays, symmem's collectives and signals where NCCL maps the peer\n");
  else
    fprintf(out, "peer pointers: no (ncclGetPeerDevicePointer needs NCCL 2.29.2, found %s): "
            "remote views refused, collectives run NCCL's own on the window\n", v);
  fprintf(out, "init: %s\n", lib->comm_init_rank_config
                                 ? "ncclCommInitRankConfig, non-blocking (waits keep to "
                                   "SYMM_TIMEOUT_MS, a lost peer aborts)"
                                 : "ncclCommInitRank, blocking (no ncclCommInitRankConfig)");
  if (lib->comm_split)
    fprintf(out, "groups: ncclCommSplit (symm_comm_split makes each group's NCCL communicator "
            "from its parent's)\n");
  else
    fprintf(out, "groups: a new NCCL communicator per group (ncclGetUniqueId, "
            "ncclCommInitRank): this NCCL has no ncclCommSplit (NCCL 2.18 and later have it)\n");
  fprintf(out, "all-to-all: %s\n", lib->all_to_all ? "ncclAlltoAll" : "ncclSend/ncclRecv in a group");
  fprintf(out, "NVLS: off (NCCL_NVLS_ENABLE=0 set before the communicator is made)\n");
}
