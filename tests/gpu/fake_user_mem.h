/* Memory a user brings to symm_tensor_register, made through the
 * communicator's driver (the fake one in the fake tests): a VMM mapping of
 * its own, exportable as a POSIX fd, and a cuMemAlloc block, which the
 * providers that register only VMM memory refuse.  Header-only: each
 * fake-test program includes it once. */
#ifndef SYMM_FAKE_USER_MEM_H
#define SYMM_FAKE_USER_MEM_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "symm_gpu.h"
#include "symmem.h"

/* A VMM allocation of `bytes` (a multiple of the granularity), mapped
 * read-write for the communicator's GPU; NULL if the driver refused. */
typedef struct fake_user_vmm {
  ncu_mem_handle h;
  ncu_deviceptr va;
  size_t bytes;
} fake_user_vmm_t;

static inline void *fake_user_vmm(symm_comm_t *comm, size_t bytes, fake_user_vmm_t *m) {
  symm_gpu_t *gpu = symm_gpu_of(comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = NCU_HANDLE_POSIX_FD;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = symm_gpu_ordinal(gpu);
  ncu_access_desc acc = {{NCU_LOCATION_DEVICE, symm_gpu_ordinal(gpu)}, NCU_ACCESS_READWRITE};
  m->bytes = bytes;
  ncu_context saved;
  if (symm_gpu_enter(gpu, &saved) != SYMM_SUCCESS) return NULL;
  bool ok = drv->cuMemCreate(&m->h, bytes, &prop, 0) == NCU_SUCCESS &&
            drv->cuMemAddressReserve(&m->va, bytes, 0, 0, 0) == NCU_SUCCESS &&
            drv->cuMemMap(m->va, bytes, 0, m->h, 0) == NCU_SUCCESS &&
            drv->cuMemSetAccess(m->va, bytes, &acc, 1) == NCU_SUCCESS;
  symm_gpu_leave(gpu, saved);
  return ok ? (void *)(uintptr_t)m->va : NULL;
}

static inline void fake_user_vmm_free(symm_comm_t *comm, fake_user_vmm_t *m) {
  symm_gpu_t *gpu = symm_gpu_of(comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_context saved;
  if (symm_gpu_enter(gpu, &saved) != SYMM_SUCCESS) return;
  drv->cuMemUnmap(m->va, m->bytes);
  drv->cuMemAddressFree(m->va, m->bytes);
  drv->cuMemRelease(m->h);
  symm_gpu_leave(gpu, saved);
}

/* The driver's VMM granularity for the communicator's GPU. */
static inline size_t fake_user_granularity(symm_comm_t *comm) {
  symm_gpu_t *gpu = symm_gpu_of(comm);
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = NCU_HANDLE_POSIX_FD;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = symm_gpu_ordinal(gpu);
  size_t g = 0;
  symm_gpu_driver(gpu)->cuMemGetAllocationGranularity(&g, &prop, 0);
  return g;
}

/* A cuMemAlloc block of `bytes` (not VMM memory). */
static inline void *fake_user_plain(symm_comm_t *comm, size_t bytes) {
  symm_gpu_t *gpu = symm_gpu_of(comm);
  ncu_context saved;
  ncu_deviceptr d = 0;
  if (symm_gpu_enter(gpu, &saved) != SYMM_SUCCESS) return NULL;
  if (symm_gpu_driver(gpu)->cuMemAlloc(&d, bytes) != NCU_SUCCESS) d = 0;
  symm_gpu_leave(gpu, saved);
  return (void *)(uintptr_t)d;
}

static inline void fake_user_plain_free(symm_comm_t *comm, void *p) {
  symm_gpu_t *gpu = symm_gpu_of(comm);
  ncu_context saved;
  if (symm_gpu_enter(gpu, &saved) != SYMM_SUCCESS) return;
  symm_gpu_driver(gpu)->cuMemFree((ncu_deviceptr)(uintptr_t)p);
  symm_gpu_leave(gpu, saved);
}

/* symm_tensor_register of n u64s refused on every rank with
 * SYMM_ERR_INVALID_ARG and a message naming `needle`, when rank `who`
 * passes `odd` and every other rank `good`. */
static inline void fake_user_refused(symm_comm_t *comm, int who, void *odd, void *good, int64_t n,
                                     const char *needle) {
  symm_tensor_t *t = NULL;
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = symm_comm_rank(comm) == who ? odd : good;
  ASSERT_RES(symm_tensor_register(comm, &m, &n, 1, SYMM_DTYPE_U64, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), needle);
  ASSERT(t == NULL);
}

#endif /* SYMM_FAKE_USER_MEM_H */
