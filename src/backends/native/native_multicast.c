/*
 * NVLink multicast (NVLS) objects over a tensor's data.
 *
 * DESIGN.md's GPU safety rule: multicast can take a shared host's GPUs out
 * of service, so it stays off unless SYMM_ENABLE_MULTICAST=1 and none of the
 * NVLS-disabling variables is set.  The guard is the first statement of
 * native_multicast_map; until it passes, no multicast entry point is even
 * resolved, no driver call is made and no peer is contacted.  Devices that
 * report multicast support (H200s do) are no reason to go on: the guard,
 * not the attribute, keeps it off.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"

/* Entry points resolved only behind the guard. */
typedef struct native_mc_fns {
  ncu_result (*create)(ncu_mem_handle *mc, const ncu_mc_prop *prop);
  ncu_result (*add_device)(ncu_mem_handle mc, ncu_device dev);
  ncu_result (*bind_mem)(ncu_mem_handle mc, size_t mc_offset, ncu_mem_handle mem,
                         size_t mem_offset, size_t size, unsigned long long flags);
  ncu_result (*unbind)(ncu_mem_handle mc, ncu_device dev, size_t mc_offset, size_t size);
  ncu_result (*granularity)(size_t *gran, const ncu_mc_prop *prop, int option);
} native_mc_fns_t;

typedef struct native_mc {
  native_mc_fns_t fn;
  ncu_mem_handle mc;
  bool have_mc, bound, mapped;
  ncu_deviceptr va;
  size_t size;
  uint64_t key;        /* fd-exchange key of rank 0's export */
  bool published;
} native_mc_t;

static symm_result_t native_mc_resolve(const native_driver_t *drv, native_mc_fns_t *fn) {
  static const char *const names[] = {"cuMulticastCreate", "cuMulticastAddDevice",
                                      "cuMulticastBindMem", "cuMulticastUnbind",
                                      "cuMulticastGetGranularity"};
  void *ptrs[5];
  for (int i = 0; i < 5; i++) {
    ncu_result cu = native_driver_resolve(drv, names[i], &ptrs[i]);
    if (cu != NCU_SUCCESS)
      return symm_error(SYMM_ERR_UNSUPPORTED, "multicast: driver lacks %s (%s)", names[i],
                        native_cu_error(cu));
  }
  memcpy(&fn->create, &ptrs[0], sizeof ptrs[0]);
  memcpy(&fn->add_device, &ptrs[1], sizeof ptrs[1]);
  memcpy(&fn->bind_mem, &ptrs[2], sizeof ptrs[2]);
  memcpy(&fn->unbind, &ptrs[3], sizeof ptrs[3]);
  memcpy(&fn->granularity, &ptrs[4], sizeof ptrs[4]);
  return SYMM_SUCCESS;
}

/* Local preconditions: device support, one GPU per rank on one host, the
 * data in its own chunk (binding needs a granularity-aligned offset). */
static symm_result_t native_mc_check(native_state_t *st, const native_alloc_t *a,
                                     native_mc_t *m, ncu_mc_prop *prop) {
  int v = 0;
  st->drv->cuDeviceGetAttribute(&v, NCU_DEV_ATTR_MULTICAST_SUPPORTED, st->dev);
  if (!v)
    return symm_error(SYMM_ERR_UNSUPPORTED, "multicast: GPU %d does not support multicast",
                      st->ordinal);
  for (int r = 0; r < st->size; r++) {
    if (st->ranks[r].host_hash != st->ranks[st->rank].host_hash)
      return symm_error(SYMM_ERR_UNSUPPORTED, "multicast: rank %d is on another host", r);
    for (int q = 0; q < r; q++)
      if (memcmp(st->ranks[q].uuid, st->ranks[r].uuid, sizeof st->ranks[r].uuid) == 0)
        return symm_error(SYMM_ERR_UNSUPPORTED,
                          "multicast: ranks %d and %d share a GPU; a multicast object needs "
                          "one GPU per rank", q, r);
  }
  if (a->nchunks != 2)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "multicast: the data does not start at a granularity boundary");
  SYMM_CHECK(native_mc_resolve(st->drv, &m->fn));
  memset(prop, 0, sizeof *prop);
  prop->num_devices = (unsigned int)st->size;
  prop->handle_types = NCU_HANDLE_POSIX_FD;
  prop->size = a->len[a->data_chunk];
  size_t gran = 0;
  ncu_result cu = m->fn.granularity(&gran, prop, NCU_GRANULARITY_MINIMUM);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "multicast: cuMulticastGetGranularity");
  if (gran == 0 || prop->size % gran != 0)
    return symm_error(SYMM_ERR_UNSUPPORTED,
                      "multicast: data of %zu bytes is not a multiple of the multicast "
                      "granularity %zu", prop->size, gran);
  m->size = prop->size;
  return SYMM_SUCCESS;
}

/* Rank 0 makes the object and publishes it as an fd; the others import it. */
static symm_result_t native_mc_create_or_import(native_state_t *st, native_mc_t *m,
                                                const ncu_mc_prop *prop) {
  symm_result_t res = SYMM_SUCCESS;
  int fd = -1;
  if (st->rank == 0) {
    NATIVE_CU_GOTO(m->fn.create(&m->mc, prop), res, out, "multicast: cuMulticastCreate(%zu bytes)",
                   prop->size);
    m->have_mc = true;
    NATIVE_CU_GOTO(st->drv->cuMemExportToShareableHandle(&fd, m->mc, NCU_HANDLE_POSIX_FD, 0),
                   res, out, "multicast: cuMemExportToShareableHandle");
    SYMM_CHECK_GOTO(symm_fdx_publish(st->fdx, m->key, fd), res, out);
    m->published = true;
  }
out:
  if (fd >= 0) close(fd);
  return res;
}

static symm_result_t native_mc_import(native_state_t *st, native_mc_t *m) {
  if (st->rank == 0) return SYMM_SUCCESS;
  int fd = -1;
  SYMM_CHECK(symm_fdx_fetch(st->fdx, 0, m->key, &fd));
  ncu_result cu = st->drv->cuMemImportFromShareableHandle(&m->mc, (void *)(intptr_t)fd,
                                                          NCU_HANDLE_POSIX_FD);
  close(fd);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "multicast: importing rank 0's object");
  m->have_mc = true;
  return SYMM_SUCCESS;
}

static symm_result_t native_mc_bind_map(native_state_t *st, const native_alloc_t *a,
                                        native_mc_t *m) {
  symm_result_t res = SYMM_SUCCESS;
  NATIVE_CU_GOTO(m->fn.bind_mem(m->mc, 0, a->h[a->data_chunk], 0, m->size, 0), res, out,
                 "multicast: cuMulticastBindMem(%zu bytes)", m->size);
  m->bound = true;
  NATIVE_CU_GOTO(st->drv->cuMemAddressReserve(&m->va, m->size, st->gran, 0, 0), res, out,
                 "multicast: cuMemAddressReserve(%zu bytes)", m->size);
  NATIVE_CU_GOTO(st->drv->cuMemMap(m->va, m->size, 0, m->mc, 0), res, out,
                 "multicast: cuMemMap(%zu bytes)", m->size);
  m->mapped = true;
  ncu_access_desc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = NCU_LOCATION_DEVICE;
  acc.location.id = st->ordinal;
  acc.flags = NCU_ACCESS_READWRITE;
  NATIVE_CU_GOTO(st->drv->cuMemSetAccess(m->va, m->size, &acc, 1), res, out,
                 "multicast: cuMemSetAccess(%zu bytes)", m->size);
out:
  return res;
}

static void native_mc_release(native_state_t *st, native_mc_t *m) {
  if (m->published) symm_fdx_unpublish(st->fdx, m->key);
  m->published = false;
  if (m->mapped) st->drv->cuMemUnmap(m->va, m->size);
  if (m->va) st->drv->cuMemAddressFree(m->va, m->size);
  if (m->bound) m->fn.unbind(m->mc, st->dev, 0, m->size);
  if (m->have_mc) st->drv->cuMemRelease(m->mc);
  m->mapped = m->bound = m->have_mc = false;
  m->va = 0;
}

/* The collective part.  Every step ends in an agreement, so that all ranks
 * leave together at the first failure anywhere. */
static symm_result_t native_mc_collective(symm_comm_t *comm, const symm_mem_t *mem,
                                          void **mc_data, void **priv) {
  native_state_t *st = comm->backend_state;
  native_mc_t *m = calloc(1, sizeof *m);
  if (!m) return symm_error(SYMM_ERR_NO_MEMORY, "multicast: out of memory");
  /* Collective calls come in the same order on every rank, so the count
   * names the same object everywhere. */
  m->key = (1ull << 62) | ++st->mc_seq;
  ncu_mc_prop prop;
  ncu_context saved = NULL;
  symm_result_t res = native_ctx_enter(st, &saved);
  bool entered = res == SYMM_SUCCESS;
  if (res == SYMM_SUCCESS) res = native_mc_check(st, mem->priv, m, &prop);
  SYMM_CHECK_GOTO(symm_comm_agree(comm, res, "multicast setup"), res, fail);
  res = native_mc_create_or_import(st, m, &prop);
  SYMM_CHECK_GOTO(symm_comm_agree(comm, res, "multicast create"), res, fail);
  res = native_mc_import(st, m);
  if (res == SYMM_SUCCESS) {
    ncu_result cu = m->fn.add_device(m->mc, st->dev);
    if (cu != NCU_SUCCESS)
      res = native_cu_fail(cu, "multicast: cuMulticastAddDevice(%d)", st->ordinal);
  }
  /* Every device must be added before any rank binds memory. */
  SYMM_CHECK_GOTO(symm_comm_agree(comm, res, "multicast add device"), res, fail);
  if (m->published) {
    symm_fdx_unpublish(st->fdx, m->key);
    m->published = false;
  }
  res = native_mc_bind_map(st, mem->priv, m);
  SYMM_CHECK_GOTO(symm_comm_agree(comm, res, "multicast bind"), res, fail);
  if (entered) native_ctx_leave(st, saved);
  *mc_data = (void *)(uintptr_t)m->va;
  *priv = m;
  SYMM_INFO(BACKEND, "native: multicast object of %zu bytes mapped at %p", m->size, *mc_data);
  return SYMM_SUCCESS;
fail:
  native_mc_release(st, m);
  if (entered) native_ctx_leave(st, saved);
  free(m);
  return res;
}

symm_result_t native_multicast_map(symm_comm_t *comm, const symm_mem_t *mem, void **mc_data,
                                   void **priv) {
  char why[256] = "";
  if (!symm_multicast_allowed(why, sizeof why))
    return symm_error(SYMM_ERR_UNSUPPORTED, "multicast refused: %s", why);
  /* ---- below here only with SYMM_ENABLE_MULTICAST=1 and no NVLS veto ---- */
  if (!comm || !mem || !mc_data || !priv)
    return symm_error(SYMM_ERR_INVALID_ARG, "multicast: NULL argument");
  *mc_data = NULL;
  *priv = NULL;
  if (comm->ops != &symm_native_ops || !comm->backend_state || !mem->priv)
    return symm_error(SYMM_ERR_UNSUPPORTED, "multicast needs the native backend");
  return native_mc_collective(comm, mem, mc_data, priv);
}

void native_multicast_unmap(symm_comm_t *comm, void *priv) {
  native_mc_t *m = priv;
  if (!comm || !m || !comm->backend_state) return;
  native_state_t *st = comm->backend_state;
  ncu_context saved = NULL;
  bool entered = native_ctx_enter(st, &saved) == SYMM_SUCCESS;
  native_mc_release(st, m);
  if (entered) native_ctx_leave(st, saved);
  free(m);
}
