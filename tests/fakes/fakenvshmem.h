/* What the fake libnvshmem_host (fake_nvshmem.c) tells the tests through
 * its hook fakenvshmem_stats; shared by the fake and the tests. */
#ifndef SYMM_FAKENVSHMEM_H
#define SYMM_FAKENVSHMEM_H

/* Since the last nvshmemx_hostlib_init_attr: initialisations and
 * finalisations, nvshmem_malloc and nvshmem_free calls that succeeded,
 * allocations live (at finalize: those never freed); whether an instance
 * is up now. */
typedef struct fakenvshmem_stats {
  long inits, finalizes, mallocs, frees, live;
  int up;
} fakenvshmem_stats_t;

#endif
