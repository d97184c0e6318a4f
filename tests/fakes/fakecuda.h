/* What the fake libcuda (fake_cuda.c) tells the tests through its two
 * exported hooks besides cuGetProcAddress_v2, fakecuda_stats and
 * fakecuda_launch_get; shared by the fake and the tests. */
#ifndef SYMM_FAKECUDA_H
#define SYMM_FAKECUDA_H

#include <stddef.h>

#include "kernels/coll_abi.h"

/* Live objects, for leak checks: handles (created or imported), mappings,
 * reservations, cuMemAlloc blocks, streams, retained primary contexts; and
 * cumulative counts of successful exports and imports of shareable
 * handles (VMM and CUDA IPC together); then CUDA IPC opens not yet closed
 * (each reference) and this process's blocks with a name in /dev/shm. */
typedef struct fakecuda_stats {
  long handles, mappings, reservations, devallocs, streams, contexts;
  long exports, imports;
  long ipc_opens, ipc_names;
} fakecuda_stats_t;

/* One recorded kernel launch: the kernel's name, grid and block (x only),
 * whether it came through cuLaunchKernelEx with programmatic stream
 * serialization, and its parameter block. */
typedef struct fakecuda_launch {
  char name[96];
  unsigned grid, block;
  int pdl;
  size_t param_bytes;
  unsigned char params[sizeof(symm_coll_params_t) > sizeof(symm_signal_params_t)
                           ? sizeof(symm_coll_params_t)
                           : sizeof(symm_signal_params_t)];
} fakecuda_launch_t;

#endif
