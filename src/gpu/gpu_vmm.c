/*
 * The VMM mapping that holds a user's device memory, for the backends
 * whose provider registers such memory itself (NCCL windows, NVSHMEM's
 * symmetric registration): both take only cuMemCreate memory of the
 * rank's GPU and refuse anything else inside a collective call, so the
 * backend asks here first, on this rank alone, and says why in words.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <string.h>

#include "gpu/gpu.h"

/* The mapping [start, start + size) that holds p. */
static symm_result_t mapping_of(const symm_cu_driver_t *drv, ncu_deviceptr p,
                                symm_gpu_vmm_t *out) {
  void *b = NULL;
  size_t s = 0;
  if (drv->cuPointerGetAttribute(&b, NCU_PTR_ATTR_MAPPING_BASE, p) == NCU_SUCCESS &&
      drv->cuPointerGetAttribute(&s, NCU_PTR_ATTR_MAPPING_SIZE, p) == NCU_SUCCESS && s) {
    out->start = (ncu_deviceptr)(uintptr_t)b;
    out->size = s;
    return SYMM_SUCCESS;
  }
  /* Drivers without the mapping attributes report the allocation range,
   * which for VMM memory is the mapping. */
  ncu_result cu = drv->cuPointerGetAttribute(&out->start, NCU_PTR_ATTR_RANGE_START, p);
  if (cu == NCU_SUCCESS) cu = drv->cuPointerGetAttribute(&out->size, NCU_PTR_ATTR_RANGE_SIZE, p);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuPointerGetAttribute(range of %#llx)", p);
  return SYMM_SUCCESS;
}

/* The physical allocation's properties: VMM, pinned, on this GPU. */
static symm_result_t vmm_props(const symm_gpu_t *gpu, ncu_deviceptr p, symm_gpu_vmm_t *out) {
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_mem_handle h;
  ncu_result cu = drv->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p);
  if (cu != NCU_SUCCESS)
    return symm_error(SYMM_ERR_INVALID_ARG, "%#llx is not VMM memory (cuMemAlloc, cudaMalloc or "
                      "a caching allocator's?): it must come from cuMemCreate and cuMemMap "
                      "(cuMemRetainAllocationHandle: %s)", p, symm_cu_error(cu));
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  cu = drv->cuMemGetAllocationPropertiesFromHandle(&prop, h);
  drv->cuMemRelease(h); /* the retain took a reference */
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "cuMemGetAllocationPropertiesFromHandle(%#llx)", p);
  if (prop.type != NCU_ALLOC_PINNED || prop.location.type != NCU_LOCATION_DEVICE)
    return symm_error(SYMM_ERR_INVALID_ARG, "%#llx is not pinned device memory (allocation "
                      "type %d, location type %d)", p, prop.type, prop.location.type);
  if (prop.location.id != symm_gpu_ordinal(gpu))
    return symm_error(SYMM_ERR_INVALID_ARG, "%#llx is memory of GPU %d; this rank uses GPU %d",
                      p, prop.location.id, symm_gpu_ordinal(gpu));
  out->handle_types = prop.requested_handle_types;
  return SYMM_SUCCESS;
}

static symm_result_t vmm_of(symm_gpu_t *gpu, const void *ptr, size_t nbytes,
                            symm_gpu_vmm_t *out) {
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  const ncu_deviceptr p = (ncu_deviceptr)(uintptr_t)ptr;
  unsigned int type = 0;
  ncu_result cu = drv->cuPointerGetAttribute(&type, NCU_PTR_ATTR_MEMORY_TYPE, p);
  if (cu != NCU_SUCCESS || type != NCU_MEMORYTYPE_DEVICE)
    return symm_error(SYMM_ERR_INVALID_ARG, "%p is not device memory (%s)", ptr,
                      cu != NCU_SUCCESS ? symm_cu_error(cu) : "host or managed memory");
  SYMM_CHECK(vmm_props(gpu, p, out));
  SYMM_CHECK(mapping_of(drv, p, out));
  if (p - out->start > out->size || out->size - (size_t)(p - out->start) < nbytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "[%p, +%zu bytes) runs past its mapping [%#llx, "
                      "+%zu bytes): the memory must be one cuMemMap mapping", ptr, nbytes,
                      out->start, out->size);
  return SYMM_SUCCESS;
}

symm_result_t symm_gpu_vmm_of(symm_gpu_t *gpu, const void *ptr, size_t nbytes,
                              symm_gpu_vmm_t *out) {
  memset(out, 0, sizeof *out);
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(gpu, &saved));
  symm_result_t res = vmm_of(gpu, ptr, nbytes, out);
  symm_gpu_leave(gpu, saved);
  return res;
}
