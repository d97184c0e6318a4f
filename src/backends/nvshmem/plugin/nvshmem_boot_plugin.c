/*
 * libsymmem_nvshmem_bootstrap.so: NVSHMEM's bootstrap plugin over a symmem
 * communicator's bootstrap (nvshmem_boot_abi.h has both interfaces).
 *
 * NVSHMEM passes the plugin no argument in plugin mode, so the plugin
 * serves whatever binding the nvshmem backend gave it last
 * (symm_nvshmem_bootstrap_bind): the backend binds before it starts
 * NVSHMEM and keeps the binding for NVSHMEM's later rounds, pointing it at
 * the communicator whose call is in NVSHMEM.  The plugin holds no symmem
 * code and links nothing of it: every round is a call through the binding
 * into the libsymmem that bound it, static or shared, whichever copy.
 * Loaded by NVSHMEM alone (no binding), it refuses to start.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvshmem/nvshmem_boot_abi.h"

#define PLUGIN_API __attribute__((visibility("default")))

static _Atomic(nvsh_boot_binding_t *) bound;

static nvsh_boot_binding_t *binding(void) { return atomic_load(&bound); }

static int plugin_allgather(const void *send, void *recv, int bytes, nvsh_boot_handle_t *h) {
  (void)h;
  nvsh_boot_binding_t *b = binding();
  if (!b || bytes < 0) return 1;
  return b->allgather(b->ctx, send, recv, (size_t)bytes);
}

static int plugin_alltoall(const void *send, void *recv, int bytes, nvsh_boot_handle_t *h) {
  (void)h;
  nvsh_boot_binding_t *b = binding();
  if (!b || bytes < 0) return 1;
  return b->alltoall(b->ctx, send, recv, (size_t)bytes);
}

static int plugin_barrier(nvsh_boot_handle_t *h) {
  (void)h;
  nvsh_boot_binding_t *b = binding();
  return b ? b->barrier(b->ctx) : 1;
}

static void plugin_global_exit(int status) {
  nvsh_boot_binding_t *b = binding();
  if (b && b->global_exit) b->global_exit(b->ctx, status);
  exit(status);
}

/* NVSHMEM's last call (an atexit handler, or a finalize that ends the
 * bootstrap): nothing of libsymmem is touched, which may be gone by then. */
static int plugin_finalize(nvsh_boot_handle_t *h) {
  (void)h;
  nvsh_boot_binding_t *b = binding();
  if (b) b->held = 0;
  return 0;
}

static int plugin_show_info(nvsh_boot_handle_t *h, int style) {
  (void)style;
  printf("  symmem bootstrap plugin: PE %d of %d, rounds over the symmem communicator's "
         "bootstrap (store, shared memory or the caller's callbacks)\n",
         h ? h->pg_rank : -1, h ? h->pg_size : -1);
  return 0;
}

PLUGIN_API int symm_nvshmem_bootstrap_bind(nvsh_boot_binding_t *b) {
  if (!b || b->version == NVSH_BOOT_BINDING_VERSION) atomic_store(&bound, b);
  return NVSH_BOOT_BINDING_VERSION;
}

/* The handle at the version both sides speak: NVSHMEM's own when its
 * major.minor is older than ours (the members it knows are a prefix). */
static void plugin_fill(nvsh_boot_handle_t *h, nvsh_boot_binding_t *b, int abi) {
  h->version = NVSH_BOOT_ABI_MAJOR_MINOR(abi) < NVSH_BOOT_ABI_MAJOR_MINOR(NVSH_BOOT_ABI)
                   ? abi
                   : NVSH_BOOT_ABI;
  h->pg_rank = b->rank;
  h->pg_size = b->size;
  h->allgather = plugin_allgather;
  h->alltoall = plugin_alltoall;
  h->barrier = plugin_barrier;
  h->global_exit = plugin_global_exit;
  h->finalize = plugin_finalize;
  h->show_info = plugin_show_info;
  h->pre_init_ops = NULL;
  h->comm_state = b;
}

PLUGIN_API int nvshmemi_bootstrap_plugin_init(void *arg, nvsh_boot_handle_t *handle, int abi) {
  (void)arg;
  nvsh_boot_binding_t *b = binding();
  if (!b) {
    fprintf(stderr, "symmem NVSHMEM bootstrap plugin: no symmem communicator is starting "
            "NVSHMEM; this plugin serves symmem's nvshmem backend (SYMM_BACKEND=nvshmem) "
            "only\n");
    return 1;
  }
  b->abi_seen = abi;
  b->why[0] = '\0';
  if (NVSH_BOOT_ABI_MAJOR(abi) != NVSH_BOOT_ABI_MAJOR(NVSH_BOOT_ABI)) {
    snprintf(b->why, sizeof b->why, "NVSHMEM offers bootstrap plugin ABI %d.%d.%d, and this "
             "plugin implements %d.x only", abi / 10000, abi / 100 % 100, abi % 100,
             NVSH_BOOT_ABI_MAJOR(NVSH_BOOT_ABI));
    return 1;
  }
  if (!handle || b->size < 1 || b->rank < 0 || b->rank >= b->size) {
    snprintf(b->why, sizeof b->why, "NVSHMEM passed no handle, or the binding is rank %d of %d",
             b->rank, b->size);
    return 1;
  }
  plugin_fill(handle, b, abi);
  b->held = 1;
  return 0;
}
