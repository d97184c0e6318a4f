/*
 * Native backend lifecycle: probe (is CUDA VMM usable here, and if not,
 * why), init (device choice, primary context, granularity, handle kind,
 * fd exchange, what the ranks agree on), fini, and the helpers every other
 * file of the backend uses (context switching, error text).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backends/native/native.h"

/* Tag of the init all-gather (distinct from the core's SYMM_OP_*), so a
 * rank in another collective is reported as a mismatch. */
#define NATIVE_OP_INIT 0x4e410001u

/* ---------------------------------------------------------------- helpers */

symm_result_t native_cu_fail(ncu_result res, const char *fmt, ...) {
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  symm_result_t code = res == NCU_ERROR_OUT_OF_MEMORY ? SYMM_ERR_NO_MEMORY : SYMM_ERR_BACKEND;
  return symm_error(code, "%s failed: %s", what, symm_cu_error(res));
}

symm_result_t native_ctx_enter(native_state_t *st, ncu_context *saved) {
  *saved = NULL;
  ncu_result res = st->drv->cuCtxGetCurrent(saved);
  if (res != NCU_SUCCESS) return native_cu_fail(res, "cuCtxGetCurrent");
  if (*saved == st->ctx) return SYMM_SUCCESS;
  res = st->drv->cuCtxSetCurrent(st->ctx);
  if (res != NCU_SUCCESS) return native_cu_fail(res, "cuCtxSetCurrent(device %d)", st->ordinal);
  return SYMM_SUCCESS;
}

void native_ctx_leave(native_state_t *st, ncu_context saved) {
  /* Put back a context the application chose; a thread that had none keeps
   * ours, so that its CUDA runtime calls land on the communicator's GPU. */
  if (saved && saved != st->ctx) st->drv->cuCtxSetCurrent(saved);
}

ncu_alloc_prop native_alloc_prop(int ordinal, int handle_types) {
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = handle_types;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = ordinal;
  return prop;
}

static int native_attr(const symm_cu_driver_t *drv, int attr, ncu_device dev) {
  int v = 0;
  if (drv->cuDeviceGetAttribute(&v, attr, dev) != NCU_SUCCESS) return 0;
  return v;
}

/* ------------------------------------------------------------------ probe */

symm_result_t native_probe(char *why, size_t why_len) {
  char reason[512] = "";
  const symm_cu_driver_t *drv = symm_cu_driver_init(reason, sizeof reason);
  int count = 0, vmm = 0, fd = 0;
  if (!drv) goto unusable;
  ncu_result res = drv->cuDeviceGetCount(&count);
  if (res != NCU_SUCCESS || count < 1) {
    snprintf(reason, sizeof reason, "no CUDA device visible (%s)",
             res != NCU_SUCCESS ? symm_cu_error(res) : "device count 0");
    goto unusable;
  }
  for (int i = 0; i < count; i++) {
    ncu_device dev;
    if (drv->cuDeviceGet(&dev, i) != NCU_SUCCESS) continue;
    if (native_attr(drv, NCU_DEV_ATTR_VMM_SUPPORTED, dev)) {
      vmm++;
      if (native_attr(drv, NCU_DEV_ATTR_POSIX_FD_SUPPORTED, dev) ||
          native_attr(drv, NCU_DEV_ATTR_FABRIC_SUPPORTED, dev))
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

/* Picks the ordinal for this rank: comm->device, which the core set from
 * the config, SYMM_DEVICE or the local rank.  An ordinal from the local
 * rank wraps around the visible devices: a launcher that shows each process
 * only its own GPU (CUDA_VISIBLE_DEVICES per rank, Slurm --gpus-per-task)
 * leaves one device per process, and ranks that really share a GPU are
 * refused later by its UUID (native_check_shared).  An explicit ordinal
 * past the visible devices wraps only with SYMM_ALLOW_SHARED_DEVICE. */
static symm_result_t native_pick_device(symm_comm_t *comm, native_state_t *st) {
  int count = 0;
  ncu_result cu = st->drv->cuDeviceGetCount(&count);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuDeviceGetCount");
  if (count < 1) return symm_error(SYMM_ERR_UNSUPPORTED, "native: no CUDA device is visible");
  int want = comm->device >= 0 ? comm->device : (comm->local_rank >= 0 ? comm->local_rank : 0);
  if (want >= count && !comm->device_explicit) {
    SYMM_INFO(BACKEND, "native: rank %d: local rank %d, %d GPU(s) visible: GPU %d", comm->rank,
              want, count, want % count);
    want %= count;
  }
  if (want >= count) {
    if (!symm_settings()->SYMM_ALLOW_SHARED_DEVICE) {
      const char *vis = getenv("CUDA_VISIBLE_DEVICES");
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "native: rank %d asks for GPU %d (SYMM_DEVICE or the config) but only %d "
                        "CUDA device(s) are visible (CUDA_VISIBLE_DEVICES=%s); set SYMM_DEVICE to "
                        "one of them, or SYMM_ALLOW_SHARED_DEVICE=1 to let several ranks share a GPU",
                        comm->rank, want, count, vis ? vis : "unset");
    }
    SYMM_INFO(BACKEND, "native: rank %d: GPU %d not present, sharing GPU %d (%d visible)",
              comm->rank, want, want % count, count);
    want %= count;
  }
  st->ordinal = want;
  cu = st->drv->cuDeviceGet(&st->dev, want);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuDeviceGet(%d)", want);
  if (comm->device != want) {
    comm->device = want;
    symm_log_set_device(want);
  }
  return SYMM_SUCCESS;
}

/* The checks the issue asks for up front: VMM, unified addressing, and at
 * least one exportable handle type. */
static symm_result_t native_check_device(native_state_t *st, bool *fd_ok, bool *fabric_attr) {
  char name[128] = "?";
  st->drv->cuDeviceGetName(name, (int)sizeof name, st->dev);
  if (!native_attr(st->drv, NCU_DEV_ATTR_VMM_SUPPORTED, st->dev))
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: GPU %d (%s) does not support virtual memory management "
                      "(cuMemCreate); use the cuda backend", st->ordinal, name);
  if (!native_attr(st->drv, NCU_DEV_ATTR_UNIFIED_ADDRESSING, st->dev))
    return symm_error(SYMM_ERR_UNSUPPORTED, "native: GPU %d (%s) lacks unified addressing",
                      st->ordinal, name);
  *fd_ok = native_attr(st->drv, NCU_DEV_ATTR_POSIX_FD_SUPPORTED, st->dev) != 0;
  *fabric_attr = native_attr(st->drv, NCU_DEV_ATTR_FABRIC_SUPPORTED, st->dev) != 0;
  return SYMM_SUCCESS;
}

static symm_result_t native_query_granularity(native_state_t *st, int handle_types,
                                              size_t *min, size_t *rec) {
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, handle_types);
  ncu_result cu = st->drv->cuMemGetAllocationGranularity(min, &prop, NCU_GRANULARITY_MINIMUM);
  if (cu == NCU_SUCCESS)
    cu = st->drv->cuMemGetAllocationGranularity(rec, &prop, NCU_GRANULARITY_RECOMMENDED);
  if (cu != NCU_SUCCESS)
    return native_cu_fail(cu, "cuMemGetAllocationGranularity(device %d, handle types 0x%x)",
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

static uint64_t native_host_hash(void) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return symm_hash64(host, strlen(host), 0x6e6174697665ull);
}

/* Everything of init that involves only this process. */
static symm_result_t native_setup_local(symm_comm_t *comm, native_state_t *st,
                                        native_rank_info_t *me) {
  char why[512] = "";
  st->drv = symm_cu_driver_init(why, sizeof why);
  if (!st->drv) return symm_error(SYMM_ERR_UNSUPPORTED, "native: %s", why);
  SYMM_CHECK(native_pick_device(comm, st));
  bool fd_attr = false, fabric_attr = false;
  SYMM_CHECK(native_check_device(st, &fd_attr, &fabric_attr));

  ncu_result cu = st->drv->cuDevicePrimaryCtxRetain(&st->ctx, st->dev);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuDevicePrimaryCtxRetain(%d)", st->ordinal);
  st->ctx_retained = true;
  /* Left current on purpose: the application's CUDA runtime calls on this
   * thread then use the same (primary) context and device.  What was current
   * before is put back if init fails (native_init). */
  st->caller_saved = st->drv->cuCtxGetCurrent(&st->caller_ctx) == NCU_SUCCESS;
  cu = st->drv->cuCtxSetCurrent(st->ctx);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuCtxSetCurrent(device %d)", st->ordinal);
  cu = st->drv->cuStreamCreate(&st->stream, NCU_STREAM_NON_BLOCKING);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuStreamCreate");

  /* Query with both handle-type sets and keep the larger: the kind is only
   * agreed after the all-gather, and a larger power of two serves both. */
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

  me->ordinal = st->ordinal;
  me->granularity = st->gran;
  me->host_hash = native_host_hash();
  if (st->drv->cuDeviceGetPCIBusId(me->pci_bus_id, (int)sizeof me->pci_bus_id, st->dev) !=
      NCU_SUCCESS)
    snprintf(me->pci_bus_id, sizeof me->pci_bus_id, "ordinal-%d", st->ordinal);
  me->pci_bus_id[sizeof me->pci_bus_id - 1] = 0; /* a driver that filled the buffer */
  ncu_uuid uuid;
  memset(&uuid, 0, sizeof uuid);
  /* Without a UUID the PCI bus id names the GPU on this host (all-zero
   * UUIDs would make every pair of ranks look like they share one). */
  if (st->drv->cuDeviceGetUuid(&uuid, st->dev) == NCU_SUCCESS)
    memcpy(me->uuid, uuid.bytes, sizeof me->uuid);
  else
    memcpy(me->uuid, me->pci_bus_id, sizeof me->uuid < sizeof me->pci_bus_id
                                         ? sizeof me->uuid : sizeof me->pci_bus_id);
  return SYMM_SUCCESS;
}

/* Several ranks on one GPU only when asked: otherwise it is almost always a
 * launch mistake (all ranks on GPU 0) that would silently serialise them. */
static symm_result_t native_check_shared(symm_comm_t *comm, const native_state_t *st) {
  if (symm_settings()->SYMM_ALLOW_SHARED_DEVICE) return SYMM_SUCCESS;
  for (int a = 0; a < st->size; a++)
    for (int b = a + 1; b < st->size; b++)
      if (memcmp(st->ranks[a].uuid, st->ranks[b].uuid, sizeof st->ranks[a].uuid) == 0 &&
          st->ranks[a].host_hash == st->ranks[b].host_hash)
        return symm_error(SYMM_ERR_INVALID_ARG,
                          "native: ranks %d and %d both use GPU %s; give each rank its own GPU "
                          "(SYMM_DEVICE, CUDA_VISIBLE_DEVICES) or set SYMM_ALLOW_SHARED_DEVICE=1",
                          a, b, st->ranks[a].pci_bus_id);
  return SYMM_SUCCESS;
}

static const char *native_kinds_text(uint32_t kinds) {
  bool fd = kinds & (1u << NATIVE_HANDLE_FD), fabric = kinds & (1u << NATIVE_HANDLE_FABRIC);
  return fd && fabric ? "fd+fabric" : fd ? "fd" : fabric ? "fabric" : "none";
}

/* One handle kind and one granularity for the whole communicator: fabric
 * if every rank can export it, else fds. */
static symm_result_t native_agree_kind(native_state_t *st) {
  uint32_t common = ~0u;
  size_t gran = 0;
  for (int r = 0; r < st->size; r++) {
    common &= st->ranks[r].kinds;
    if (st->ranks[r].granularity > gran) gran = (size_t)st->ranks[r].granularity;
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
      if (st->ranks[r].kinds != st->ranks[st->rank].kinds) other = r;
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "native: no handle kind usable by every rank (rank %d can use %s, rank %d "
                      "%s)", st->rank, native_kinds_text(st->ranks[st->rank].kinds), other,
                      native_kinds_text(st->ranks[other].kinds));
  }
  if (gran == 0 || (gran & (gran - 1)) != 0)
    return symm_error(SYMM_ERR_INTERNAL, "native: granularity %zu is not a power of two", gran);
  st->gran = gran;
  return SYMM_SUCCESS;
}

/* POSIX fds travel over Unix sockets, which do not leave a host: with fd
 * handles every rank must be on this host.  Refused here, at init, with the
 * way out, rather than at every rendezvous. */
static symm_result_t native_check_hosts(const native_state_t *st) {
  if (st->kind != NATIVE_HANDLE_FD) return SYMM_SUCCESS;
  for (int r = 0; r < st->size; r++)
    if (st->ranks[r].host_hash != st->ranks[st->rank].host_hash)
      return symm_error(SYMM_ERR_UNSUPPORTED,
                        "native: rank %d is on another host than rank %d, and not every rank "
                        "can export fabric handles; POSIX-fd handles do not leave a host (GPUs "
                        "of one NVLink domain across hosts need fabric handles and IMEX, "
                        "SYMM_NATIVE_HANDLE=fabric)", r, st->rank);
  return SYMM_SUCCESS;
}

/* Each rank's GPU as an ordinal of this process, and whether ours reaches it. */
static symm_result_t native_map_peers_devices(native_state_t *st) {
  st->peer_ordinal = malloc(sizeof(int) * (size_t)st->size);
  st->peer_access = malloc(sizeof(int) * (size_t)st->size);
  if (!st->peer_ordinal || !st->peer_access)
    return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  uint64_t here = st->ranks[st->rank].host_hash;
  for (int r = 0; r < st->size; r++) {
    ncu_device d;
    st->peer_ordinal[r] = -1;
    st->peer_access[r] = -1;
    if (st->ranks[r].host_hash != here) continue;
    if (st->drv->cuDeviceGetByPCIBusId(&d, st->ranks[r].pci_bus_id) != NCU_SUCCESS) continue;
    st->peer_ordinal[r] = d;
    int can = 0;
    if (d == st->dev)
      can = 1;
    else if (st->drv->cuDeviceCanAccessPeer(&can, st->dev, d) != NCU_SUCCESS)
      can = -1;
    st->peer_access[r] = can;
  }
  return SYMM_SUCCESS;
}

static void native_state_destroy(native_state_t *st) {
  if (!st) return;
  /* The pad heap first: its fds are in the fd exchange, its handles need
   * the context.  Every tensor (and peer mapping) is gone by now. */
  if (st->heap_lock_ready) {
    ncu_context saved = NULL;
    bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
    native_heap_fini(st);
    if (entered) native_ctx_leave(st, saved);
  }
  if (st->fdx) symm_fdx_stop(st->fdx);
  if (st->drv && st->ctx_retained) {
    ncu_context saved = NULL;
    bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
    if (st->stream) st->drv->cuStreamDestroy(st->stream);
    if (entered) native_ctx_leave(st, saved);
    st->drv->cuDevicePrimaryCtxRelease(st->dev);
    /* If ours was the last reference the context is destroyed; it must not
     * stay current on this thread.  If the runtime (or another
     * communicator) still holds it, it stays as the application had it. */
    unsigned int flags = 0;
    int active = 1;
    ncu_context cur = NULL;
    if (st->drv->cuDevicePrimaryCtxGetState(st->dev, &flags, &active) == NCU_SUCCESS &&
        !active && st->drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == st->ctx)
      st->drv->cuCtxSetCurrent(NULL);
  }
  free(st->ranks);
  free(st->peer_ordinal);
  free(st->peer_access);
  free(st);
}

/* Frees what a failed init made and leaves this thread's context as init
 * found it. */
static void native_init_failed(native_state_t *st) {
  const symm_cu_driver_t *drv = st->drv;
  const bool put_back = st->caller_saved;
  ncu_context caller = st->caller_ctx;
  native_state_destroy(st);
  if (drv && put_back) drv->cuCtxSetCurrent(caller);
}

symm_result_t native_init(symm_comm_t *comm) {
  native_state_t *st = calloc(1, sizeof *st);
  if (!st) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  st->size = comm->size;
  st->rank = comm->rank;
  st->ranks = calloc((size_t)comm->size, sizeof *st->ranks);
  if (!st->ranks) {
    free(st);
    return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  }

  /* The local part may fail on some ranks only; every rank still joins the
   * all-gather so that none waits for a rank that gave up. */
  native_rank_info_t me;
  memset(&me, 0, sizeof me);
  symm_result_t res = native_setup_local(comm, st, &me);
  char saved[1024] = "";
  if (res != SYMM_SUCCESS) {
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    size_t len = strnlen(saved, sizeof me.why - 1); /* truncation is fine */
    memcpy(me.why, saved, len);
  }
  me.status = (int32_t)res;
  symm_result_t gres = symm_comm_allgather_op(comm, NATIVE_OP_INIT, &me, sizeof me, st->ranks);
  if (res != SYMM_SUCCESS) {
    symm_error_restore(saved);
    goto fail;
  }
  if ((res = gres) != SYMM_SUCCESS) goto fail;
  for (int r = 0; r < comm->size; r++) /* peers' strings: terminated whatever came */
    st->ranks[r].pci_bus_id[sizeof st->ranks[r].pci_bus_id - 1] = 0;
  for (int r = 0; r < comm->size; r++)
    if (st->ranks[r].status != SYMM_SUCCESS) {
      res = symm_error((symm_result_t)st->ranks[r].status, "native: setup failed on rank %d: %.*s",
                       r, (int)sizeof st->ranks[r].why, st->ranks[r].why);
      goto fail;
    }
  SYMM_CHECK_GOTO(native_check_shared(comm, st), res, fail);
  SYMM_CHECK_GOTO(native_agree_kind(st), res, fail);
  SYMM_CHECK_GOTO(native_check_hosts(st), res, fail);
  SYMM_CHECK_GOTO(native_map_peers_devices(st), res, fail);
  native_heap_init(st); /* needs the agreed granularity */

  SYMM_INFO(BACKEND, "native: rank %d on GPU %d (%s), granularity %zu (min %zu), %s handles",
            comm->rank, st->ordinal, me.pci_bus_id, st->gran, st->gran_min,
            st->kind == NATIVE_HANDLE_FABRIC ? "fabric" : "POSIX fd");
  comm->backend_state = st;
  return SYMM_SUCCESS;
fail:
  native_init_failed(st);
  return res;
}

void native_fini(symm_comm_t *comm) {
  native_state_destroy(comm->backend_state);
  comm->backend_state = NULL;
}

size_t native_granularity(symm_comm_t *comm) {
  const native_state_t *st = comm->backend_state;
  /* 2 MiB is what every VMM-capable GPU reports; only reached if the core
   * asks before init, which it does not. */
  return st ? st->gran : (size_t)2 << 20;
}
