/*
 * NVSHMEM started over symmem's own bootstrap, through NVSHMEM's
 * bootstrap-plugin interface (nvshmem_boot_abi.h): whatever the
 * communicator's bootstrap is (the store, shared memory, the caller's
 * callbacks over MPI or PMIx), NVSHMEM's all-gathers, all-to-alls and
 * barriers ride it, so no unique-id socket is opened and no network
 * interface chosen.
 *
 * NVSHMEM hands the plugin no argument, so this file loads the plugin
 * itself first (one loaded object: NVSHMEM's dlopen of the same file gets
 * it) and binds it to a process-wide binding whose rounds go to "the
 * communicator in NVSHMEM now": set by the backend around each call that
 * can reach NVSHMEM's bootstrap (init and the reachability probe, an
 * nvshmem_malloc or nvshmem_free, the last finalize) and cleared after it,
 * so that a round is always one of the calling communicator's, tagged as
 * the provider's step of the call every rank is in
 * (symm_comm_provider_allgather).  NVSHMEM keeps the bootstrap for the
 * process's life; the binding lives as long.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/nvshmem/nvshmem.h"
#include "backends/nvshmem/nvshmem_boot_abi.h"

#define NVSH_BOOT_PLUGIN_FILE "libsymmem_nvshmem_bootstrap.so"
/* The library folder symmem is installed to (the build says). */
#ifndef SYMM_INSTALL_LIBDIR
#define SYMM_INSTALL_LIBDIR ""
#endif

static struct {
  pthread_mutex_t lock;   /* the loading */
  bool tried, loaded;
  char path[PATH_MAX];
  char why[768];          /* why it is not loaded */
  nvsh_boot_bind_fn bind;
  nvsh_boot_binding_t binding;
  _Atomic(symm_comm_t *) comm; /* the communicator in NVSHMEM now */
  uint64_t world;         /* that the plugin's bootstrap was started for */
} nvsh_boot = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------------ rounds */

static symm_comm_t *nvsh_boot_comm(const char *what) {
  symm_comm_t *comm = atomic_load(&nvsh_boot.comm);
  if (!comm)
    SYMM_WARN(BACKEND, "nvshmem: NVSHMEM asked for a bootstrap %s outside any call of the "
              "nvshmem backend: refused (it rides the calling communicator's bootstrap)", what);
  return comm;
}

static int nvsh_boot_failed(const char *what, size_t bytes) {
  SYMM_WARN(BACKEND, "nvshmem: NVSHMEM's bootstrap %s (%zu bytes) failed: %s", what, bytes,
            symm_last_error());
  return 1;
}

static int nvsh_boot_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
  (void)ctx;
  symm_comm_t *comm = nvsh_boot_comm("all-gather");
  if (!comm) return 1;
  if (symm_comm_provider_allgather(comm, send, bytes, recv) != SYMM_SUCCESS)
    return nvsh_boot_failed("all-gather", bytes);
  return 0;
}

/* Through the all-gather: every rank's whole send buffer, of which this
 * rank keeps its column (bootstrap exchanges are small). */
static int nvsh_boot_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  (void)ctx;
  symm_comm_t *comm = nvsh_boot_comm("all-to-all");
  if (!comm) return 1;
  const size_t n = (size_t)symm_comm_size(comm), me = (size_t)symm_comm_rank(comm);
  if (bytes && n > SIZE_MAX / n / bytes) return nvsh_boot_failed("all-to-all", bytes);
  char *all = malloc(n * n * bytes + 1);
  if (!all) {
    symm_error(SYMM_ERR_NO_MEMORY, "nvshmem: out of memory");
    return nvsh_boot_failed("all-to-all", bytes);
  }
  int rc = 0;
  if (symm_comm_provider_allgather(comm, send, n * bytes, all) != SYMM_SUCCESS)
    rc = nvsh_boot_failed("all-to-all", bytes);
  for (size_t r = 0; rc == 0 && r < n; r++)
    memcpy((char *)recv + r * bytes, all + r * n * bytes + me * bytes, bytes);
  free(all);
  return rc;
}

static int nvsh_boot_barrier(void *ctx) {
  (void)ctx;
  symm_comm_t *comm = nvsh_boot_comm("barrier");
  if (!comm) return 1;
  if (symm_comm_provider_allgather(comm, NULL, 0, NULL) != SYMM_SUCCESS)
    return nvsh_boot_failed("barrier", 0);
  return 0;
}

static void nvsh_boot_global_exit(void *ctx, int status) {
  (void)ctx;
  symm_comm_t *comm = atomic_load(&nvsh_boot.comm);
  SYMM_WARN(BACKEND, "nvshmem: nvshmem_global_exit(%d): this process exits now", status);
  if (comm) symm_comm_abort_bootstrap(comm, SYMM_ERR_BACKEND, "nvshmem_global_exit");
}

void nvsh_boot_use(symm_comm_t *comm) { atomic_store(&nvsh_boot.comm, comm); }

/* ------------------------------------------------------------- loading */

/* The folder of the object that holds this code (libsymmem.so, or the
 * program that links libsymmem.a), into out. */
static bool nvsh_boot_own_dir(char *out, size_t cap) {
  static const char anchor = 0;
  Dl_info info;
  char real[PATH_MAX];
  if (!dladdr(&anchor, &info) || !info.dli_fname) return false;
  const char *from = strchr(info.dli_fname, '/') ? info.dli_fname : "/proc/self/exe";
  if (!realpath(from, real)) return false;
  char *slash = strrchr(real, '/');
  if (!slash) return false;
  *slash = '\0';
  snprintf(out, cap, "%s", real);
  return true;
}

/* Where the plugin is: SYMM_NVSHMEM_BOOTSTRAP_PLUGIN, else beside this
 * library, else in the folder symmem was installed to; its real path into
 * out. */
static bool nvsh_boot_find(char *out, size_t cap, char *why, size_t why_cap) {
  const char *set = symm_settings()->SYMM_NVSHMEM_BOOTSTRAP_PLUGIN;
  char cand[PATH_MAX + 64], dir[PATH_MAX] = "";
  if (set && *set) {
    if (realpath(set, out) && access(out, R_OK) == 0) return true;
    snprintf(why, why_cap, "SYMM_NVSHMEM_BOOTSTRAP_PLUGIN=%s: no such readable file", set);
    return false;
  }
  if (nvsh_boot_own_dir(dir, sizeof dir)) {
    snprintf(cand, sizeof cand, "%s/%s", dir, NVSH_BOOT_PLUGIN_FILE);
    if (realpath(cand, out) && access(out, R_OK) == 0) return true;
  }
  snprintf(cand, sizeof cand, "%s/%s", SYMM_INSTALL_LIBDIR, NVSH_BOOT_PLUGIN_FILE);
  if (*SYMM_INSTALL_LIBDIR && realpath(cand, out) && access(out, R_OK) == 0) return true;
  snprintf(why, why_cap, "no %s beside the symmem library (in %s) nor in %s "
           "(SYMM_NVSHMEM_BOOTSTRAP_PLUGIN names it)", NVSH_BOOT_PLUGIN_FILE,
           *dir ? dir : "?", *SYMM_INSTALL_LIBDIR ? SYMM_INSTALL_LIBDIR : "an install folder");
  return false;
}

/* Loads the plugin (kept for the process's life) and checks that it is
 * ours and speaks this library's binding. */
static bool nvsh_boot_load(char *why, size_t cap) {
  if (!nvsh_boot_find(nvsh_boot.path, sizeof nvsh_boot.path, why, cap)) return false;
  void *dl = dlopen(nvsh_boot.path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    snprintf(why, cap, "%s cannot be loaded: %s", nvsh_boot.path, dlerror());
    return false;
  }
  nvsh_boot_bind_fn bind = NULL;
  *(void **)&bind = dlsym(dl, NVSH_BOOT_BIND);
  int version = bind && dlsym(dl, NVSH_BOOT_PLUGIN_INIT) ? bind(NULL) : 0;
  if (version != NVSH_BOOT_BINDING_VERSION) {
    if (!version)
      snprintf(why, cap, "%s is not symmem's NVSHMEM bootstrap plugin (no %s or %s)",
               nvsh_boot.path, NVSH_BOOT_BIND, NVSH_BOOT_PLUGIN_INIT);
    else
      snprintf(why, cap, "%s is another symmem's plugin (binding version %d, this library's %d)",
               nvsh_boot.path, version, NVSH_BOOT_BINDING_VERSION);
    dlclose(dl);
    return false;
  }
  nvsh_boot.bind = bind;
  nvsh_boot.binding = (nvsh_boot_binding_t){
      .version = NVSH_BOOT_BINDING_VERSION, .allgather = nvsh_boot_allgather,
      .alltoall = nvsh_boot_alltoall, .barrier = nvsh_boot_barrier,
      .global_exit = nvsh_boot_global_exit};
  return true;
}

/* Loaded once per process; false with the reason in why. */
static bool nvsh_boot_loaded(char *why, size_t cap) {
  pthread_mutex_lock(&nvsh_boot.lock);
  if (!nvsh_boot.tried) {
    nvsh_boot.tried = true;
    nvsh_boot.loaded = nvsh_boot_load(nvsh_boot.why, sizeof nvsh_boot.why);
    if (nvsh_boot.loaded) SYMM_INFO(BACKEND, "nvshmem: bootstrap plugin %s", nvsh_boot.path);
  }
  const bool ok = nvsh_boot.loaded;
  if (!ok) snprintf(why, cap, "%s", nvsh_boot.why);
  pthread_mutex_unlock(&nvsh_boot.lock);
  return ok;
}

const char *nvsh_boot_plugin_path(void) {
  pthread_mutex_lock(&nvsh_boot.lock);
  const char *p = nvsh_boot.loaded ? nvsh_boot.path : NULL;
  pthread_mutex_unlock(&nvsh_boot.lock);
  return p;
}

nvsh_route_t nvsh_boot_route(const nvsh_lib_t *lib, char *why, size_t cap) {
  enum { AUTO = 0, PLUGIN = 1, UNIQUEID = 2 };
  const int asked = symm_settings()->SYMM_NVSHMEM_BOOTSTRAP.index;
  if (asked == UNIQUEID) {
    snprintf(why, cap, "SYMM_NVSHMEM_BOOTSTRAP=uniqueid");
    return NVSH_ROUTE_UNIQUEID;
  }
  char no[768] = "";
  if (lib->major != NVSH_BOOT_ABI_MAJOR(NVSH_BOOT_ABI)) {
    snprintf(no, sizeof no, "NVSHMEM %d.%d.%d is not 3.x, whose bootstrap plugin ABI (3) the "
             "plugin speaks", lib->major, lib->minor, lib->patch);
  } else if (nvsh_boot_loaded(no, sizeof no)) {
    snprintf(why, cap, "SYMM_NVSHMEM_BOOTSTRAP=%s", asked == PLUGIN ? "plugin" : "auto");
    return NVSH_ROUTE_PLUGIN;
  }
  snprintf(why, cap, "%s%s", asked == AUTO ? "SYMM_NVSHMEM_BOOTSTRAP=auto: " : "", no);
  return asked == AUTO ? NVSH_ROUTE_UNIQUEID : NVSH_ROUTE_NONE;
}

/* ------------------------------------------------------------ start-up */

uint64_t nvsh_boot_world(void) { return nvsh_boot.binding.held ? nvsh_boot.world : 0; }

/* Sets name to value (NULL: unset); returns what it was (malloc'd, NULL:
 * unset).  NVSHMEM reads its environment when it bootstraps: the plugin
 * route is set for that call only, and what the process had is put back,
 * so that NVSHMEM elsewhere (a child's) sees the user's own settings. */
static char *nvsh_boot_env_swap(const char *name, const char *value) {
  const char *old = getenv(name);
  char *saved = old ? strdup(old) : NULL;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  return saved;
}

symm_result_t nvsh_boot_start(symm_comm_t *comm, const nvsh_lib_t *lib, int rank, int size,
                              uint64_t world) {
  nvsh_boot_binding_t *b = &nvsh_boot.binding;
  if (!nvsh_boot.loaded)
    return symm_error(SYMM_ERR_INTERNAL, "nvshmem: the bootstrap plugin is not loaded");
  b->rank = rank;
  b->size = size;
  b->abi_seen = 0;
  b->why[0] = '\0';
  const bool kept = b->held;
  nvsh_boot_use(comm);
  nvsh_boot.bind(b);
  char *mode = nvsh_boot_env_swap(NVSH_BOOT_ENV_MODE, "plugin");
  char *plugin = nvsh_boot_env_swap(NVSH_BOOT_ENV_PLUGIN, nvsh_boot.path);
  int rc = lib->hostlib_init_attr(0, NULL);
  free(nvsh_boot_env_swap(NVSH_BOOT_ENV_MODE, mode));
  free(nvsh_boot_env_swap(NVSH_BOOT_ENV_PLUGIN, plugin));
  free(mode);
  free(plugin);
  if (b->held) nvsh_boot.world = world;
  if (rc != 0) {
    nvsh_boot_use(NULL);
    return symm_error(SYMM_ERR_BACKEND, "nvshmem: nvshmemx_hostlib_init_attr through symmem's "
                      "bootstrap plugin %s (PE %d of %d) failed: %d%s%s (NVSHMEM_DEBUG=INFO "
                      "says more; SYMM_NVSHMEM_BOOTSTRAP=uniqueid starts it from a unique id)",
                      nvsh_boot.path, rank, size, rc, b->why[0] ? ": " : "", b->why);
  }
  if (kept)
    SYMM_INFO(BACKEND, "nvshmem: NVSHMEM started again on the plugin's bootstrap it kept (%s)",
              nvsh_boot.path);
  else
    SYMM_INFO(BACKEND, "nvshmem: NVSHMEM started through the bootstrap plugin (%s), bootstrap "
              "ABI %d", nvsh_boot.path, b->abi_seen);
  return SYMM_SUCCESS;
}
