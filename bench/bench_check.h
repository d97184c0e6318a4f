/* Exit-on-failure checks of the benchmark programs in bench/: a failed
 * symmem call (CHECK) or, where the CUDA runtime is included, CUDA call
 * (CUDA) prints the call and the reason and exits 1. */
#ifndef SYMM_BENCH_CHECK_H
#define SYMM_BENCH_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "symmem.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    symm_result_t r_ = (call);                                                       \
    if (r_ != SYMM_SUCCESS) {                                                        \
      fprintf(stderr, "%s: %s (%s)\n", #call, symm_strerror(r_), symm_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

#ifdef CUDART_VERSION
#define CUDA(call)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                    \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#endif

#endif
