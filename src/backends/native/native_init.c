/*
 * Native backend lifecycle: probe (is CUDA VMM usable here, and if not,
 * why), init (on the device the GPU engine picked: VMM support,
 * granularity, handle kinds, fd exchange), startup (the handle kind and
 * granularity every rank can use, hosts), fini.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/native/native.h"

/* ------------------------------------------------------------------ probe */

symm_result_t native_probe(char *why, size_t why_len) {
  char reason[512] = "";
  int count = 0, vmm = 0, fd = 0;
  const symm_cu_driver_t *drv = symm_gpu_probe(reason, sizeof reason, &count);
  if (!drv) goto unusable;
  for (int i = 0; i < count; i++) {
    ncu_device dev;
    if (drv->cuDeviceGet(&dev, i) != NCU_SUCCESS) continue;
    if (symm_gpu_attr(drv, NCU_DEV_ATTR_VMM_SUPPORTED, dev)) {
      vmm++;
      if (symm_gpu_attr(drv, NCU_DEV_ATTR_POSIX_FD_SUPPORTED, dev) ||
          symm_gpu_attr(drv, NCU_DEV_ATTR_FABRIC_SUPPORTED, dev))
        fd++;
    }
  }
  if (!vmm) {
    snprintf(reason, sizeof reason,
             "none of the %d CUDA device(s) supports virtual memory management "
             "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0)", count);
    goto unusable;
  }
  if (!fd) {
    snprintf(reason, sizeof reason,
             "no CUDA device can export VMM memory as a POSIX fd or fabric handle");
    goto unusable;
  }
  return SYMM_SUCCESS;
unusable:
  if (why && why_len) snprintf(why, why_len, "%s", reason);
  return SYMM_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------------------- init */

/* What the backend needs of the device: VMM, unified addressing, and at
 * least one exportable handle type. */
static symm_result_t native_check_device(native_state_t *st, bool *fd_ok, bool *fabric_attr) {
  char name[128] = "?";
  const ncu_device dev = symm_gpu_device(st->gpu);
  st->drv->cuDeviceGetName(name, (int)sizeof name, dev);
  if (!symm_gpu_attr(st->drv, NCU_DEV_ATTR_VMM_SUPPORTED, dev))
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: GPU %d (%s) does not support virtual memory management "
                      "(cuMemCreate); use the cuda backend", st->ordinal, name);
  if (!symm_gpu_attr(st->drv, NCU_DEV_ATTR_UNIFIED_ADDRESSING, dev))
    return symm_error(SYMM_ERR_UNSUPPORTED, "native: GPU %d (%s) lacks unified addressing",
                      st->ordinal, name);
  *fd_ok = symm_gpu_attr(st->drv, NCU_DEV_ATTR_POSIX_FD_SUPPORTED, dev) != 0;
  *fabric_attr = symm_gpu_attr(st->drv, NCU_DEV_ATTR_FABRIC_SUPPORTED, dev) != 0;
  return SYMM_SUCCESS;
}

static symm_result_t native_query_granularity(native_state_t *st, int handle_types,
                                              size_t *min, size_t *rec) {
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, handle_types);
  ncu_result cu = st->drv->cuMemGetAllocationGranularity(min, &prop, NCU_GRANULARITY_MINIMUM);
  if (cu == NCU_SUCCESS)
    cu = st->drv->cuMemGetAllocationGranularity(rec, &prop, NCU_GRANULARITY_RECOMMENDED);
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "cuMemGetAllocationGranularity(device %d, handle types 0x%x)",
                          st->ordinal, handle_types);
  if (*rec < *min) *rec = *min;
  return SYMM_SUCCESS;
}

/* Whether a fabric handle can really be exported here: devices report the
 * capability even where the export needs an IMEX channel that is missing,
 * so the only reliable test is one small allocation exported for real. */
static bool native_fabric_works(native_state_t *st, size_t gran, char *why, size_t why_len) {
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, NCU_HANDLE_FABRIC | NCU_HANDLE_POSIX_FD);
  ncu_mem_handle h;
  ncu_result cu = st->drv->cuMemCreate(&h, gran, &prop, 0);
  if (cu != NCU_SUCCESS) {
    snprintf(why, why_len, "cuMemCreate with fabric handles failed: %s", symm_cu_error(cu));
    return false;
  }
  ncu_fabric_handle fh;
  cu = st->drv->cuMemExportToShareableHandle(&fh, h, NCU_HANDLE_FABRIC, 0);
  st->drv->cuMemRelease(h);
  if (cu != NCU_SUCCESS) {
    snprintf(why, why_len, "fabric export failed (no IMEX channel?): %s", symm_cu_error(cu));
    return false;
  }
  return true;
}

/* Which handle kinds this rank can use, under SYMM_NATIVE_HANDLE. */
static symm_result_t native_local_kinds(native_state_t *st, bool fd_attr, bool fabric_attr,
                                        uint32_t *kinds) {
  const char *mode = symm_settings()->SYMM_NATIVE_HANDLE.name;
  if (!mode) mode = "auto";
  bool want_fd = strcasecmp(mode, "fd") == 0, want_fabric = strcasecmp(mode, "fabric") == 0;
  if (!want_fd && !want_fabric && strcasecmp(mode, "auto") != 0)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native: SYMM_NATIVE_HANDLE=%s; expected auto, fd or fabric", mode);
  *kinds = 0;
  if (fd_attr && !want_fabric) *kinds |= 1u << NATIVE_HANDLE_FD;
  if (!want_fd) {
    char why[384] = "the device does not support fabric handles";
    if (fabric_attr && native_fabric_works(st, st->gran, why, sizeof why))
      *kinds |= 1u << NATIVE_HANDLE_FABRIC;
    else if (want_fabric)
      return symm_error(SYMM_ERR_UNSUPPORTED,
                        "native: SYMM_NATIVE_HANDLE=fabric but GPU %d cannot export fabric "
                        "handles: %s", st->ordinal, why);
    else
      SYMM_INFO(BACKEND, "native: fabric handles unusable on GPU %d (%s); using POSIX fds",
                st->ordinal, why);
  }
  if (want_fd && !fd_attr)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: SYMM_NATIVE_HANDLE=fd but GPU %d cannot export POSIX fds",
                      st->ordinal);
  if (!*kinds)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: GPU %d can export neither POSIX fds nor fabric handles",
                      st->ordinal);
  return SYMM_SUCCESS;
}

/* Everything of init: this process only, on the device the GPU engine
 * picked and left current. */
static symm_result_t native_setup_local(symm_comm_t *comm, native_state_t *st,
                                        native_rank_info_t *me) {
  bool fd_attr = false, fabric_attr = false;
  SYMM_CHECK(native_check_device(st, &fd_attr, &fabric_attr));
  /* Query with both handle-type sets and keep the larger: the kind is only
   * agreed at startup, and a larger power of two serves both. */
  size_t min = 0, rec = 0, min2 = 0, rec2 = 0;
  SYMM_CHECK(native_query_granularity(st, NCU_HANDLE_POSIX_FD, &min, &rec));
  if (fabric_attr &&
      native_query_granularity(st, NCU_HANDLE_FABRIC | NCU_HANDLE_POSIX_FD, &min2, &rec2) !=
          SYMM_SUCCESS)
    min2 = rec2 = 0;
  st->gran_min = min > min2 ? min : min2;
  st->gran = rec > rec2 ? rec : rec2;

  SYMM_CHECK(native_local_kinds(st, fd_attr, fabric_attr, &me->kinds));
  SYMM_CHECK(symm_fdx_start(comm, &st->fdx));
  me->granularity = st->gran;
  return SYMM_SUCCESS;
}

static const char *native_kinds_text(uint32_t kinds) {
  bool fd = kinds & (1u << NATIVE_HANDLE_FD), fabric = kinds & (1u << NATIVE_HANDLE_FABRIC);
  return fd && fabric ? "fd+fabric" : fd ? "fd" : fabric ? "fabric" : "none";
}

/* One handle kind and one granularity for the whole communicator: fabric
 * if every rank can export it, else fds. */
static symm_result_t native_agree_kind(native_state_t *st, const native_rank_info_t *const *ranks) {
  uint32_t common = ~0u;
  size_t gran = 0;
  for (int r = 0; r < st->size; r++) {
    common &= ranks[r]->kinds;
    if (ranks[r]->granularity > gran) gran = (size_t)ranks[r]->granularity;
  }
  if (common & (1u << NATIVE_HANDLE_FABRIC)) {
    st->kind = NATIVE_HANDLE_FABRIC;
    st->handle_types = NCU_HANDLE_FABRIC | NCU_HANDLE_POSIX_FD;
  } else if (common & (1u << NATIVE_HANDLE_FD)) {
    st->kind = NATIVE_HANDLE_FD;
    st->handle_types = NCU_HANDLE_POSIX_FD;
  } else {
    int other = st->rank;
    for (int r = 0; r < st->size; r++)
      if (ranks[r]->kinds != ranks[st->rank]->kinds) other = r;
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: no handle kind usable by every rank (rank %d can use %s, rank %d "
                      "%s)", st->rank, native_kinds_text(ranks[st->rank]->kinds), other,
                      native_kinds_text(ranks[other]->kinds));
  }
  if (gran == 0 || (gran & (gran - 1)) != 0)
    return symm_error(SYMM_ERR_INTERNAL, "native: granularity %zu is not a power of two", gran);
  st->gran = gran;
  return SYMM_SUCCESS;
}

/* POSIX fds travel over Unix sockets, which do not leave a host: with fd
 * handles every rank must be on this host.  Refused here, at startup, with
 * the way out, rather than at every rendezvous. */
static symm_result_t native_check_hosts(symm_comm_t *comm, const native_state_t *st) {
  if (st->kind != NATIVE_HANDLE_FD) return SYMM_SUCCESS;
  for (int r = 0; r < st->size; r++) {
    if (symm_comm_peer_same_host(comm, r)) continue;
    char hosts[512];
    symm_comm_hosts_text(comm, hosts, sizeof hosts);
    const char *mine = symm_comm_peer_host(comm, st->rank);
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: the ranks run on several hosts, %s, this rank (%d) on %s, and "
                      "not every rank can export fabric handles; POSIX-fd handles do not leave "
                      "a host (GPUs of one NVLink domain across hosts need fabric handles and "
                      "IMEX, SYMM_NATIVE_HANDLE=fabric)", hosts, st->rank, mine ? mine : "?");
  }
  return SYMM_SUCCESS;
}

symm_result_t native_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob) {
  native_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  symm_backend_set_state(comm, st); /* native_fini frees what a failed init made */
  st->gpu = symm_gpu_of(comm);
  if (!st->gpu) return symm_error(SYMM_ERR_INTERNAL, "native: the GPU engine is not started");
  st->drv = symm_gpu_driver(st->gpu);
  st->ordinal = symm_gpu_ordinal(st->gpu);
  st->size = symm_comm_size(comm);
  st->rank = symm_comm_rank(comm);
  native_rank_info_t *me = calloc(1, sizeof *me);
  if (!me) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  symm_result_t res = native_setup_local(comm, st, me);
  if (res != SYMM_SUCCESS) {
    free(me);
    return res;
  }
  blob->data = me;
  blob->len = sizeof *me;
  return SYMM_SUCCESS;
}

symm_result_t native_startup(symm_comm_t *comm, const symm_blob_t *all) {
  native_state_t *st = symm_backend_state(comm);
  const native_rank_info_t **ranks = calloc((size_t)st->size, sizeof *ranks);
  symm_result_t res = SYMM_SUCCESS;
  if (!ranks) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  for (int r = 0; r < st->size; r++) {
    ranks[r] = all[r].data;
    if (!ranks[r] || all[r].len != sizeof *ranks[r]) {
      res = symm_error(SYMM_ERR_PROTOCOL, "native: rank %d published %zu bytes at init, not %zu",
                       r, all[r].len, sizeof *ranks[r]);
      goto out;
    }
  }
  SYMM_CHECK_GOTO(native_agree_kind(st, ranks), res, out);
  SYMM_CHECK_GOTO(native_check_hosts(comm, st), res, out);
  st->pad_bytes = symm_comm_signal_pad_bytes(comm);
  native_heap_init(st); /* needs the agreed granularity and the pad's size */
  SYMM_INFO(BACKEND, "native: rank %d on GPU %d (%s), granularity %zu (min %zu), %s handles",
            st->rank, st->ordinal, symm_gpu_peer_bus_id(st->gpu, st->rank), st->gran,
            st->gran_min, st->kind == NATIVE_HANDLE_FABRIC ? "fabric" : "POSIX fd");
out:
  free(ranks);
  return res;
}

void native_fini(symm_comm_t *comm) {
  native_state_t *st = symm_backend_state(comm);
  if (!st) return;
  /* The pad heap first: its fds are in the fd exchange, its handles need
   * the context.  Every tensor (and peer mapping) is gone by now. */
  if (st->heap_lock_ready) {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    native_heap_fini(st);
    if (entered) symm_gpu_leave(st->gpu, saved);
  }
  if (st->fdx) symm_fdx_stop(st->fdx);
  free(st);
  symm_backend_set_state(comm, NULL);
}

size_t native_granularity(symm_comm_t *comm) {
  const native_state_t *st = symm_backend_state(comm);
  /* 2 MiB is what every VMM-capable GPU reports; only reached if the core
   * asks before init, which it does not. */
  return st ? st->gran : (size_t)2 << 20;
}
