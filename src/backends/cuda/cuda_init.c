/* The cuda backend (cudaMalloc + CUDA IPC).  Not built yet: this version only reports the
 * backend as unavailable, so that auto selection and symmem-info can say
 * why.  The ops table is filled in by the issue that builds it. */
#include <stdio.h>

#include "core/internal.h"

static symm_result_t cuda_probe(char *why, size_t why_len) {
  if (why && why_len)
    snprintf(why, why_len, "the cuda backend (cudaMalloc + CUDA IPC) is not implemented in this version of symmem; use native or host");
  return SYMM_ERR_UNSUPPORTED;
}

const symm_backend_ops_t symm_cuda_ops = {
    .version = 1,
    .name = "cuda",
    .id = SYMM_BACKEND_CUDA,
    .probe = cuda_probe,
};
