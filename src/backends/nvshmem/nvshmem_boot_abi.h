/*
 * The two interfaces of symmem's NVSHMEM bootstrap plugin
 * (libsymmem_nvshmem_bootstrap.so, plugin/nvshmem_boot_plugin.c), shared
 * by the plugin and the nvshmem backend (nvshmem_boot.c).  Not installed.
 *
 * 1. NVSHMEM's bootstrap-plugin ABI (NVSHMEM 3.x, bootstrap ABI 3.0.0), in
 *    our own words.  With NVSHMEM_BOOTSTRAP=plugin and
 *    NVSHMEM_BOOTSTRAP_PLUGIN=<path> in the environment, and
 *    nvshmemx_hostlib_init_attr called with flags 0 and a NULL attribute
 *    struct, NVSHMEM dlopens <path> (RTLD_NOW) and calls its
 *    nvshmemi_bootstrap_plugin_init(arg, handle, abi): arg is NULL in this
 *    mode (the plugin finds its channel by itself), abi is NVSHMEM's
 *    bootstrap ABI as major * 10000 + minor * 100 + patch (30000 in NVSHMEM
 *    3.3 and 3.4).  The plugin fills the handle and returns 0; NVSHMEM refuses
 *    a handle whose version (same encoding) is of a newer major.minor than
 *    its own.  NVSHMEM fills mype_node and npes_node itself.  It calls
 *    allgather, alltoall and barrier during init, and after it where it
 *    needs every PE (a symmetric heap that grows inside nvshmem_malloc,
 *    nvshmemx_hostlib_finalize's barrier); finalize only when the process
 *    exits (an atexit handler): a plugin bootstrap outlives
 *    nvshmemx_hostlib_finalize, and a later nvshmemx_hostlib_init_attr of
 *    the process reuses it without calling the plugin's init again.
 *    show_info is called without a NULL check when NVSHMEM_INFO is set;
 *    global_exit by nvshmem_global_exit.  Byte counts are per rank
 *    (all-to-all: per pair), and 0 is success.
 *
 * 2. The binding between libsymmem and the plugin: the backend dlopens the
 *    same file before NVSHMEM does (one loaded object, one set of
 *    globals), and hands the plugin a binding through
 *    symm_nvshmem_bootstrap_bind: the rank and size of the communicator
 *    that starts NVSHMEM and the functions that run a round over its
 *    bootstrap.  The binding is libsymmem's and lives as long as the
 *    process; the plugin writes only its `held`, `abi_seen` and `why`.
 */
#ifndef SYMM_NVSHMEM_BOOT_ABI_H
#define SYMM_NVSHMEM_BOOT_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------ NVSHMEM's plugin ABI */

/* The bootstrap ABI this plugin implements (3.0.0), and the encoding's
 * parts. */
#define NVSH_BOOT_ABI 30000
#define NVSH_BOOT_ABI_MAJOR(v) ((v) / 10000)
#define NVSH_BOOT_ABI_MAJOR_MINOR(v) ((v) / 100)

/* The entry point NVSHMEM looks up, and the environment that selects the
 * plugin route. */
#define NVSH_BOOT_PLUGIN_INIT "nvshmemi_bootstrap_plugin_init"
#define NVSH_BOOT_ENV_MODE "NVSHMEM_BOOTSTRAP"
#define NVSH_BOOT_ENV_PLUGIN "NVSHMEM_BOOTSTRAP_PLUGIN"

struct nvsh_boot_handle;
/* NVSHMEM's pre-init hooks (the unique-id bootstrap's); NULL here. */
typedef struct nvsh_boot_pre_init {
  void *cookie;
  int (*get_unique_id)(void *cookie);
} nvsh_boot_pre_init_t;

/* The handle (version 1 of its layout, bootstrap ABI 3.x): NVSHMEM's
 * global, which the plugin fills. */
typedef struct nvsh_boot_handle {
  int version;            /* the ABI the plugin speaks, as NVSH_BOOT_ABI */
  int pg_rank, pg_size;   /* this PE, the number of PEs */
  int mype_node, npes_node; /* NVSHMEM's own */
  int (*allgather)(const void *send, void *recv, int bytes, struct nvsh_boot_handle *h);
  int (*alltoall)(const void *send, void *recv, int bytes, struct nvsh_boot_handle *h);
  int (*barrier)(struct nvsh_boot_handle *h);
  void (*global_exit)(int status);
  int (*finalize)(struct nvsh_boot_handle *h);
  int (*show_info)(struct nvsh_boot_handle *h, int style);
  nvsh_boot_pre_init_t *pre_init_ops;
  void *comm_state;       /* the plugin's own */
} nvsh_boot_handle_t;

_Static_assert(offsetof(nvsh_boot_handle_t, allgather) == 24 &&
                   offsetof(nvsh_boot_handle_t, show_info) == 64 &&
                   offsetof(nvsh_boot_handle_t, comm_state) == 80 &&
                   sizeof(nvsh_boot_handle_t) == 88,
               "NVSHMEM's bootstrap handle: members where its headers put them");

typedef int (*nvsh_boot_plugin_init_fn)(void *arg, nvsh_boot_handle_t *handle, int abi);

/* ------------------------------------------- the binding to libsymmem */

#define NVSH_BOOT_BINDING_VERSION 1
#define NVSH_BOOT_BIND "symm_nvshmem_bootstrap_bind"

typedef struct nvsh_boot_binding {
  int version;            /* NVSH_BOOT_BINDING_VERSION */
  int rank, size;         /* this process's PE, the number of PEs */
  void *ctx;              /* passed to the functions below */
  /* One round over the communicator's bootstrap each: 0, or non-zero
   * (the reason is libsymmem's last error). */
  int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes);
  int (*alltoall)(void *ctx, const void *send, void *recv, size_t bytes);
  int (*barrier)(void *ctx);
  /* NVSHMEM asked every PE to exit (nvshmem_global_exit): the plugin
   * calls it, then exit(status). */
  void (*global_exit)(void *ctx, int status);
  /* Written by the plugin. */
  int held;               /* 1 from a successful init until NVSHMEM's finalize */
  int abi_seen;           /* the ABI NVSHMEM's last init call offered, 0: none */
  char why[256];          /* why the plugin refused that call, "" if it did not */
} nvsh_boot_binding_t;

/* symm_nvshmem_bootstrap_bind(b): the plugin serves b from now on (NULL:
 * nobody; NVSHMEM's calls then fail).  Returns the binding version the
 * plugin implements; it binds only when that is b->version. */
typedef int (*nvsh_boot_bind_fn)(nvsh_boot_binding_t *b);

#endif /* SYMM_NVSHMEM_BOOT_ABI_H */
