/*
 * Backend checks of a pointer range (nvFuser-style validation): the range
 * must be device memory from cuMemCreate (VMM), pinned, mapped read-write
 * for our GPU, granularity-aligned, and wholly covered by mappings; this
 * rank's own memory must also be on its GPU and exportable with the
 * communicator's handle type.  A range may span several mappings (a
 * contiguous view); each is checked in turn.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <string.h>

#include "backends/native/native.h"

/* Where ptr sits in the registry: *known, and the registered range
 * [*reg_start, *reg_end) it is in (one rank's data, or a whole contiguous
 * view).  Returns whether ptr is this rank's own memory (or memory unknown
 * to the registry, which the user means to share), as opposed to a peer
 * mapping or a contiguous view.  Only our own memory has to be on our GPU
 * and exportable with our handle type: a peer's memory was made and checked
 * by that peer, and how the driver numbers a peer's device in this process
 * depends on CUDA_VISIBLE_DEVICES. */
static bool native_is_own(const native_state_t *st, const void *ptr, bool *known,
                          ncu_deviceptr *reg_start, ncu_deviceptr *reg_end) {
  const void *base = NULL;
  size_t len = 0;
  symm_tensor_t *tensor;
  int rank = st->rank;
  *known = symm_registry_find(ptr, &base, &len, &tensor, &rank);
  *reg_start = (ncu_deviceptr)(uintptr_t)base;
  *reg_end = *reg_start + len;
  return !*known || rank == st->rank;
}

/* The mapping containing p: its start and size. */
symm_result_t native_mapping_of(const native_state_t *st, ncu_deviceptr p, ncu_deviceptr *start,
                                size_t *size) {
  void *b = NULL;
  size_t s = 0;
  if (st->drv->cuPointerGetAttribute(&b, NCU_PTR_ATTR_MAPPING_BASE, p) == NCU_SUCCESS &&
      st->drv->cuPointerGetAttribute(&s, NCU_PTR_ATTR_MAPPING_SIZE, p) == NCU_SUCCESS && s) {
    *start = (ncu_deviceptr)(uintptr_t)b;
    *size = s;
    return SYMM_SUCCESS;
  }
  /* Drivers without the mapping attributes report the allocation range,
   * which for VMM memory is the same mapping. */
  ncu_result cu = st->drv->cuPointerGetAttribute(start, NCU_PTR_ATTR_RANGE_START, p);
  if (cu == NCU_SUCCESS) cu = st->drv->cuPointerGetAttribute(size, NCU_PTR_ATTR_RANGE_SIZE, p);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuPointerGetAttribute(range of %#llx)", p);
  return SYMM_SUCCESS;
}

/* Kind of memory at p: CUDA device memory, or the reason it is not. */
static symm_result_t native_check_kind(const native_state_t *st, ncu_deviceptr p) {
  unsigned int type = 0;
  ncu_result cu = st->drv->cuPointerGetAttribute(&type, NCU_PTR_ATTR_MEMORY_TYPE, p);
  if (cu != NCU_SUCCESS)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not CUDA memory (host memory or unmapped): %s",
                      p, symm_cu_error(cu));
  if (type != NCU_MEMORYTYPE_DEVICE)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not device memory (CUDA memory type %u: %s)", p,
                      type, type == NCU_MEMORYTYPE_HOST ? "host" : "array/unified");
  return SYMM_SUCCESS;
}

/* Properties of the physical allocation behind p. */
static symm_result_t native_check_props(const native_state_t *st, ncu_deviceptr p, bool own) {
  ncu_mem_handle h;
  ncu_result cu = st->drv->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p);
  if (cu != NCU_SUCCESS)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not VMM memory (cudaMalloc or a caching "
                      "allocator?); symmetric memory must come from cuMemCreate: %s",
                      p, symm_cu_error(cu));
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  cu = st->drv->cuMemGetAllocationPropertiesFromHandle(&prop, h);
  st->drv->cuMemRelease(h); /* the retain took a reference */
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "native validate: cuMemGetAllocationPropertiesFromHandle(%#llx)", p);
  if (prop.type != NCU_ALLOC_PINNED)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not pinned memory (allocation type %d)", p,
                      prop.type);
  if (prop.location.type != NCU_LOCATION_DEVICE)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not device memory (location type %d)", p,
                      prop.location.type);
  if (!own) return SYMM_SUCCESS;
  if (prop.location.id != st->ordinal)
    return symm_error(SYMM_ERR_MISMATCH,
                      "native validate: %#llx is memory of GPU %d, but rank %d of this "
                      "communicator uses GPU %d", p, prop.location.id, st->rank, st->ordinal);
  if ((prop.requested_handle_types & st->handle_types) != st->handle_types)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is exportable as handle types 0x%x; this "
                      "communicator shares memory as 0x%x (%s)", p,
                      prop.requested_handle_types, st->handle_types,
                      st->kind == NATIVE_HANDLE_FABRIC ? "fabric + POSIX fd" : "POSIX fd");
  return SYMM_SUCCESS;
}

static symm_result_t native_check_access(const native_state_t *st, ncu_deviceptr p) {
  ncu_location loc = {NCU_LOCATION_DEVICE, st->ordinal};
  unsigned long long flags = 0;
  ncu_result cu = st->drv->cuMemGetAccess(&flags, &loc, p);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "native validate: cuMemGetAccess(%#llx)", p);
  if (flags != NCU_ACCESS_READWRITE)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %#llx is not mapped read-write for GPU %d (access flags "
                      "%llu)", p, st->ordinal, flags);
  return SYMM_SUCCESS;
}

/* Checks one mapping [start, start + size) that contains cur. */
static symm_result_t native_check_mapping(const native_state_t *st, ncu_deviceptr cur,
                                          ncu_deviceptr start, size_t size, bool own) {
  if (start % st->gran_min != 0 || size % st->gran_min != 0)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: mapping [%#llx, +%zu) of %#llx is misaligned to the "
                      "granularity %zu", start, size, cur, st->gran_min);
  SYMM_CHECK(native_check_props(st, cur, own));
  return native_check_access(st, cur);
}

symm_result_t native_validate_range(const native_state_t *st, const void *ptr, size_t nbytes) {
  ncu_deviceptr p = (ncu_deviceptr)(uintptr_t)ptr, end = p + nbytes, cur = p;
  bool known;
  ncu_deviceptr reg_start, reg_end;
  bool own = native_is_own(st, ptr, &known, &reg_start, &reg_end);
  /* The most basic reason first: not device memory, not VMM, wrong
   * device or handle type; then alignment and coverage. */
  SYMM_CHECK(native_check_kind(st, p));
  SYMM_CHECK(native_check_props(st, p, own));
  /* Memory the user brings must start where a peer's mapping can start:
   * peers map whole granularity-aligned chunks. */
  if (!known && p % st->gran_min != 0)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "native validate: %p is misaligned to the granularity %zu (off by %llu)",
                      ptr, st->gran_min, p % st->gran_min);
  while (cur < end) {
    ncu_deviceptr start;
    size_t size;
    /* A registered range may span several mappings (a contiguous view),
     * but never into a neighbouring reservation; user memory must be one
     * allocation. */
    if (cur != p && (!known || cur >= reg_end || native_check_kind(st, cur) != SYMM_SUCCESS))
      return symm_error(SYMM_ERR_MISMATCH,
                        "native validate: the allocation is smaller than the range: [%p, +%zu) "
                        "is covered by one allocation only up to offset %llu", ptr, nbytes,
                        cur - p);
    SYMM_CHECK(native_mapping_of(st, cur, &start, &size));
    SYMM_CHECK(native_check_mapping(st, cur, start, size, own));
    cur = start + size;
  }
  return SYMM_SUCCESS;
}

symm_result_t native_validate(symm_comm_t *comm, const void *ptr, size_t nbytes) {
  native_state_t *st = symm_backend_state(comm);
  if (!ptr || !nbytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "native validate: NULL pointer or zero bytes");
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  symm_result_t res = native_validate_range(st, ptr, nbytes);
  symm_gpu_leave(st->gpu, saved);
  return res;
}
