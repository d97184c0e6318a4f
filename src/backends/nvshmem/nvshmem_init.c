/* The nvshmem backend (NVSHMEM symmetric heap).  Not built yet: this version only reports the
 * backend as unavailable, so that auto selection and symmem-info can say
 * why.  The ops table is filled in by the issue that builds it. */
#include <stdio.h>

#include "core/internal.h"

static symm_result_t nvshmem_probe(char *why, size_t why_len) {
  if (why && why_len)
    snprintf(why, why_len, "the nvshmem backend (NVSHMEM symmetric heap) is not implemented in this version of symmem; use native or host");
  return SYMM_ERR_UNSUPPORTED;
}

const symm_backend_ops_t symm_nvshmem_ops = {
    .version = 1,
    .name = "nvshmem",
    .id = SYMM_BACKEND_NVSHMEM,
    .probe = nvshmem_probe,
};
