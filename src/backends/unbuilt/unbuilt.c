/* Backends that this version of symmem does not implement yet: each has an
 * ops table that only reports itself unavailable, so that `auto` skips it,
 * an explicit SYMM_BACKEND choice fails with the reason, and symmem-info
 * lists it.  An issue that builds one replaces its table here with a folder
 * of its own (src/backends/<name>/). */
#include <stdio.h>

#include "symm_backend.h"

#define UNBUILT_BACKEND(lower, upper, what, caps_, by_name_)                        \
  static symm_result_t lower##_probe(char *why, size_t why_len) {                    \
    if (why && why_len)                                                              \
      snprintf(why, why_len, "the " #lower " backend (" what ") is not implemented " \
               "in this version of symmem; use native or host");                     \
    return SYMM_ERR_UNSUPPORTED;                                                     \
  }                                                                                  \
  const symm_backend_ops_t symm_##lower##_ops = {                                    \
      .version = 1, .name = #lower, .id = SYMM_BACKEND_##upper,                      \
      .mem_kind = SYMM_MEM_DEVICE, .caps = caps_, .by_name_only = by_name_,          \
      .probe = lower##_probe};

/* Each table carries what the backend will do at best (caps), which the
 * messages that name where something can be done read. */
UNBUILT_BACKEND(cuda, CUDA, "cudaMalloc + CUDA IPC", {0}, false)
UNBUILT_BACKEND(nccl, NCCL, "NCCL symmetric windows", {.backend_handle = true}, true)
