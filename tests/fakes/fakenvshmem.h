/* What the fake libnvshmem_host (fake_nvshmem.c) tells the tests through
 * its hook fakenvshmem_stats; shared by the fake and the tests. */
#ifndef SYMM_FAKENVSHMEM_H
#define SYMM_FAKENVSHMEM_H

/* Since the last nvshmemx_hostlib_init_attr: initialisations and
 * finalisations, nvshmem_malloc and nvshmem_free calls that succeeded,
 * allocations live (at finalize: those never freed); the same for
 * registered buffers; whether an instance
 * is up now.  How it was bootstrapped: through a bootstrap plugin
 * (boot_plugin), the rounds it ran over the plugin's handle since
 * (boot_rounds), and the plugin's init calls in this process so far
 * (boot_inits: NVSHMEM calls it once, and keeps its bootstrap). */
typedef struct fakenvshmem_stats {
  long inits, finalizes, mallocs, frees, live;
  /* nvshmemx_buffer_register_symmetric and _unregister_symmetric calls that
   * succeeded, and registrations live (at finalize: never unregistered). */
  long registrations, unregistrations, live_registered;
  int up;
  int boot_plugin;
  long boot_rounds, boot_inits;
} fakenvshmem_stats_t;

#endif
