/*
 * The user's memory made symmetric on the nvshmem backend
 * (symm_tensor_register): nvshmemx_buffer_register_symmetric maps the
 * user's VMM allocation into NVSHMEM's symmetric address space (collective
 * over the instance), and nvshmem_ptr of that address gives the peers'.
 * The entry point is looked up in the loaded library (NVSHMEM 3.x, in the
 * 3.7 headers read); where it is missing, registration is refused naming
 * the version.  NVSHMEM checks the buffer inside the collective call and
 * answers NULL on the rank it refuses, after which its peers would wait
 * for that rank: check_user makes the checks that can differ between
 * ranks first (the memory, its device, its place in the mapping), so that
 * every rank refuses alike before any calls NVSHMEM.  Deregistration is
 * nvshmemx_buffer_unregister_symmetric, collective as the free that
 * orders it; the user's memory is never released here.  A mapping whose
 * size is not a multiple of NVSHMEM's granularity (NVSHMEM_CUMEM_GRANULARITY,
 * 512 MiB unless set) is refused here: NVSHMEM 3.4.5 does not refuse it
 * but fails cuMemMap inside the collective call (CUDA error 801) and then
 * faults the context (found on an H100 with a 2 MiB buffer and the
 * granularity unset; 2 MiB with 2 MiB and 512 MiB with 512 MiB pass).
 * SYMM_NVSHMEM_REGISTER=off turns registration on nvshmem off.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>

#include "backends/nvshmem/nvshmem.h"

/* NVSHMEM's own default of NVSHMEM_CUMEM_GRANULARITY. */
#define NVSH_DEFAULT_GRANULARITY ((int64_t)1 << 29)

/* NVSHMEM's granularity as it reads it at init, or -1 (unparsable). */
static int64_t nvshmem_cumem_granularity(const char **text) {
  *text = getenv("NVSHMEM_CUMEM_GRANULARITY");
  if (!*text || !**text) return NVSH_DEFAULT_GRANULARITY;
  const int64_t g = symm_parse_size(*text);
  return g > 0 ? g : -1;
}

symm_result_t nvsh_check_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes) {
  nvsh_state_t *st = symm_backend_state(comm);
  const nvsh_lib_t *lib = st->lib;
  if (symm_settings()->SYMM_NVSHMEM_REGISTER.index == 0)
    return symm_error(SYMM_ERR_UNSUPPORTED, "nvshmem: registering the user's memory with "
                      "NVSHMEM is off (SYMM_NVSHMEM_REGISTER=off; on, the default, hands it to "
                      "nvshmemx_buffer_register_symmetric); the native and cuda backends "
                      "register such memory");
  if (!lib->buffer_register_symmetric || !lib->buffer_unregister_symmetric)
    return symm_error(SYMM_ERR_UNSUPPORTED, "nvshmem: NVSHMEM %d.%d.%d (%s) has no %s, which "
                      "registering memory the library did not allocate needs (a newer NVSHMEM "
                      "3.x has it; the native and cuda backends register such memory too)",
                      lib->major, lib->minor, lib->patch, lib->path,
                      lib->buffer_register_symmetric ? "nvshmemx_buffer_unregister_symmetric"
                                                     : "nvshmemx_buffer_register_symmetric");
  symm_gpu_vmm_t v;
  symm_result_t res = symm_gpu_vmm_of(st->gpu, u->ptr, nbytes, &v);
  if (res != SYMM_SUCCESS) {
    symm_error_context("nvshmem: nvshmemx_buffer_register_symmetric of %p", u->ptr);
    return res;
  }
  if ((ncu_deviceptr)(uintptr_t)u->ptr != v.start)
    return symm_error(SYMM_ERR_INVALID_ARG, "nvshmem: %p lies %llu bytes into its mapping "
                      "[%#llx, +%zu bytes); NVSHMEM registers whole mappings: pass the start of "
                      "one", u->ptr, (ncu_deviceptr)(uintptr_t)u->ptr - v.start, v.start, v.size);
  if (!(v.handle_types & (NCU_HANDLE_POSIX_FD | NCU_HANDLE_FABRIC)))
    return symm_error(SYMM_ERR_INVALID_ARG, "nvshmem: the allocation at %p was created with no "
                      "shareable handle type (requested 0x%x); NVSHMEM shares it as its heap's "
                      "(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or FABRIC across nodes)",
                      u->ptr, v.handle_types);
  const char *gtext;
  const int64_t gran = nvshmem_cumem_granularity(&gtext);
  if (gran < 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "nvshmem: NVSHMEM_CUMEM_GRANULARITY=%s is no size "
                      "symmem can read; registering memory with NVSHMEM needs its value", gtext);
  if (v.size % (uint64_t)gran)
    return symm_error(SYMM_ERR_INVALID_ARG, "nvshmem: the mapping at %p is %zu bytes, not a "
                      "multiple of NVSHMEM's granularity, %lld bytes (NVSHMEM_CUMEM_GRANULARITY%s"
                      "): NVSHMEM would fail to map it inside its collective call and fault the "
                      "context; allocate a multiple, or set NVSHMEM_CUMEM_GRANULARITY (the same "
                      "on every rank) before symm_comm_init", u->ptr, v.size, (long long)gran,
                      gtext && *gtext ? "" : ", unset: NVSHMEM's default");
  return SYMM_SUCCESS;
}

/* Registers [ptr, ptr + bytes) (the whole mapping) on every PE. */
static symm_result_t nvsh_register(symm_comm_t *comm, nvsh_state_t *st, void *ptr, size_t bytes,
                                   nvsh_user_t *r) {
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(st->gpu, &saved));
  nvsh_boot_use(comm); /* the exchange of handles is a round of NVSHMEM's bootstrap */
  r->sym = st->lib->buffer_register_symmetric(ptr, bytes, 0);
  nvsh_boot_use(NULL);
  r->nth = nvsh_instance_count_malloc();
  symm_gpu_leave(st->gpu, saved);
  r->bytes = bytes;
  if (r->sym) return SYMM_SUCCESS;
  /* Every PE made the same checks of the same size: they all fail. */
  return symm_error(SYMM_ERR_INVALID_ARG, "nvshmem: nvshmemx_buffer_register_symmetric(%p, %zu "
                    "bytes) returned NULL: NVSHMEM registers memory only on its dynamic VMM "
                    "heap (NVSHMEM_DISABLE_CUDA_VMM unset), in sizes that are multiples of its "
                    "NVSHMEM_CUMEM_GRANULARITY and the same on every PE; NVSHMEM's log says "
                    "which", ptr, bytes);
}

symm_result_t nvsh_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem) {
  nvsh_state_t *st = symm_backend_state(comm);
  nvsh_user_t *r = calloc(1, sizeof *r);
  if (!r) return symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
  symm_gpu_vmm_t v;
  symm_result_t res = symm_gpu_vmm_of(st->gpu, u->ptr, nbytes, &v);
  if (res == SYMM_SUCCESS) res = nvsh_register(comm, st, u->ptr, v.size, r);
  if (res != SYMM_SUCCESS) {
    free(r);
    return res;
  }
  symm_mem_set_user(mem, u->ptr, 0, nbytes, symm_gpu_ordinal(st->gpu), r);
  SYMM_TRACE(BACKEND, "nvshmem: the user's %p (%zu bytes) registered at %p, heap call #%llu",
             u->ptr, v.size, r->sym, (unsigned long long)r->nth);
  return SYMM_SUCCESS;
}

void nvsh_deregister_user(symm_comm_t *comm, symm_mem_t *mem) {
  nvsh_state_t *st = symm_backend_state(comm);
  nvsh_user_t *r = mem->priv;
  if (!st || !r) return;
  int gone = symm_comm_first_gone(comm);
  if (gone >= 0) {
    SYMM_WARN(BACKEND, "nvshmem: rank %d's process is gone; the registration of %p stays "
              "(nvshmemx_buffer_unregister_symmetric is collective and would wait for it)",
              gone, mem->base);
  } else {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(st->gpu, &saved) == SYMM_SUCCESS;
    nvsh_boot_use(comm);
    int rc = st->lib->buffer_unregister_symmetric(r->sym, r->bytes);
    nvsh_boot_use(NULL);
    if (entered) symm_gpu_leave(st->gpu, saved);
    if (rc != 0)
      SYMM_WARN(BACKEND, "nvshmem: nvshmemx_buffer_unregister_symmetric(%p, %zu bytes) failed: "
                "%d", r->sym, r->bytes, rc);
  }
  free(r);
  mem->priv = NULL;
  mem->base = NULL;
}
