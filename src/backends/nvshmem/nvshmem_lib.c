/* libnvshmem_host loaded at run time (nvshmem_lib.h). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/nvshmem/nvshmem_lib.h"
#include "symm_backend.h"

static const char *const nvsh_types[NVSH_RED_TYPES] = {"float", "bfloat16", "half", "int32"};
static const char *const nvsh_ops[NVSH_RED_OPS] = {"sum", "min", "max"};

const char *nvsh_type_name(int type) {
  return type >= 0 && type < NVSH_RED_TYPES ? nvsh_types[type] : "?";
}
const char *nvsh_op_name(int op) { return op >= 0 && op < NVSH_RED_OPS ? nvsh_ops[op] : "?"; }

/* ------------------------------------------------ Python environments */

/* The first match of `pattern`, into out. */
static bool nvsh_glob_first(const char *pattern, char *out, size_t cap) {
  glob_t g;
  bool found = false;
  if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0) {
    snprintf(out, cap, "%s", g.gl_pathv[0]);
    found = true;
  }
  globfree(&g);
  return found;
}

static bool nvsh_in_prefix(const char *prefix, const char *pkg, const char *file, char *out,
                           size_t cap) {
  static const char *const dirs[] = {"site-packages", "dist-packages"};
  for (size_t i = 0; prefix && *prefix && i < sizeof dirs / sizeof dirs[0]; i++) {
    char pattern[PATH_MAX];
    snprintf(pattern, sizeof pattern, "%s/lib/python3*/%s/nvidia/%s/lib/%s", prefix, dirs[i],
             pkg, file);
    if (nvsh_glob_first(pattern, out, cap)) return true;
  }
  return false;
}

/* The prefix of the interpreter `bin/python3` in dir: the folder above bin,
 * both for dir itself (a virtual environment's bin, whose python3 links
 * elsewhere) and for where the link leads. */
static bool nvsh_in_python_of(const char *dir, const char *pkg, const char *file, char *out,
                              size_t cap) {
  char exe[PATH_MAX], real[PATH_MAX], prefix[PATH_MAX];
  snprintf(exe, sizeof exe, "%s/python3", dir);
  if (access(exe, X_OK) != 0) return false;
  snprintf(prefix, sizeof prefix, "%s/..", dir);
  if (nvsh_in_prefix(prefix, pkg, file, out, cap)) return true;
  if (!realpath(exe, real)) return false;
  char *slash = strrchr(real, '/');
  if (!slash) return false;
  *slash = 0;
  snprintf(prefix, sizeof prefix, "%s/..", real);
  return nvsh_in_prefix(prefix, pkg, file, out, cap);
}

bool nvsh_find_in_python(const char *pkg, const char *file, char *out, size_t cap) {
  if (nvsh_in_prefix(getenv("VIRTUAL_ENV"), pkg, file, out, cap) ||
      nvsh_in_prefix(getenv("CONDA_PREFIX"), pkg, file, out, cap))
    return true;
  const char *path = getenv("PATH");
  for (const char *p = path; p && *p;) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char dir[PATH_MAX];
    if (n > 0 && n < sizeof dir) {
      memcpy(dir, p, n);
      dir[n] = 0;
      if (nvsh_in_python_of(dir, pkg, file, out, cap)) return true;
    }
    p = end ? end + 1 : p + n;
  }
  const char *home = getenv("HOME");
  if (home && *home) {
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/.local", home);
    if (nvsh_in_prefix(prefix, pkg, file, out, cap)) return true;
  }
  return false;
}

/* ------------------------------------------------------------- loading */

/* dlopen of name: as given when it holds a '/', else through the dynamic
 * loader and then in a Python environment. */
static void *nvsh_open(const char *name, char *path, size_t path_cap, char *why, size_t cap) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  snprintf(path, path_cap, "%s", name);
  if (h || strchr(name, '/')) {
    if (!h) snprintf(why, cap, "%s cannot be loaded: %s", name, dlerror());
    return h;
  }
  char first[512];
  snprintf(first, sizeof first, "%s", dlerror());
  char found[PATH_MAX];
  if (!nvsh_find_in_python("nvshmem", name, found, sizeof found)) {
    snprintf(why, cap, "%s not found by the dynamic loader (%s) nor in a Python environment's "
             "nvidia/nvshmem/lib (pip install nvidia-nvshmem-cu13, or set SYMM_NVSHMEM_LIB)",
             name, first);
    return NULL;
  }
  h = dlopen(found, RTLD_NOW | RTLD_LOCAL);
  snprintf(path, path_cap, "%s", found);
  if (!h) snprintf(why, cap, "%s cannot be loaded: %s", found, dlerror());
  return h;
}

static void nvsh_optional(nvsh_lib_t *lib, void **fn, const char *name) {
  *fn = dlsym(lib->handle, name);
  if (*fn) return;
  if (!lib->coll_missing++) snprintf(lib->first_missing, sizeof lib->first_missing, "%s", name);
}

bool nvsh_lib_load(nvsh_lib_t *lib, const char *name, char *why, size_t cap) {
  memset(lib, 0, sizeof *lib);
  if (!name || !*name) name = NVSH_LIB_DEFAULT;
  lib->handle = nvsh_open(name, lib->path, sizeof lib->path, why, cap);
  if (!lib->handle) return false;
  struct {
    void **fn;
    const char *name;
  } syms[] = {
      {(void **)&lib->hostlib_init_attr, "nvshmemx_hostlib_init_attr"},
      {(void **)&lib->hostlib_finalize, "nvshmemx_hostlib_finalize"},
      {(void **)&lib->get_uniqueid, "nvshmemx_get_uniqueid"},
      {(void **)&lib->set_attr_uniqueid_args, "nvshmemx_set_attr_uniqueid_args"},
      {(void **)&lib->malloc, "nvshmem_malloc"},
      {(void **)&lib->free, "nvshmem_free"},
      {(void **)&lib->ptr, "nvshmem_ptr"},
      {(void **)&lib->my_pe, "nvshmem_my_pe"},
      {(void **)&lib->n_pes, "nvshmem_n_pes"},
      {(void **)&lib->vendor_version, "nvshmemx_vendor_get_version_info"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(lib->handle, syms[i].name);
    if (!*syms[i].fn) {
      snprintf(why, cap, "%s has no %s (NVSHMEM 3 or newer is needed)", lib->path,
               syms[i].name);
      goto fail;
    }
  }
  lib->vendor_version(&lib->major, &lib->minor, &lib->patch);
  if (lib->major < 3) {
    snprintf(why, cap, "%s is NVSHMEM %d.%d.%d; the nvshmem backend needs 3 or newer", lib->path,
             lib->major, lib->minor, lib->patch);
    goto fail;
  }
  nvsh_optional(lib, (void **)&lib->putmem_on_stream, "nvshmemx_putmem_on_stream");
  nvsh_optional(lib, (void **)&lib->getmem_on_stream, "nvshmemx_getmem_on_stream");
  for (int op = 0; op < NVSH_RED_OPS; op++)
    for (int t = 0; t < NVSH_RED_TYPES; t++) {
      char fn[96];
      snprintf(fn, sizeof fn, "nvshmemx_%s_%s_reduce_on_stream", nvsh_types[t], nvsh_ops[op]);
      nvsh_optional(lib, (void **)&lib->reduce[op][t], fn);
      snprintf(fn, sizeof fn, "nvshmemx_%s_%s_reducescatter_on_stream", nvsh_types[t],
               nvsh_ops[op]);
      nvsh_optional(lib, (void **)&lib->reducescatter[op][t], fn);
    }
  nvsh_optional(lib, (void **)&lib->fcollectmem_on_stream, "nvshmemx_fcollectmem_on_stream");
  nvsh_optional(lib, (void **)&lib->broadcastmem_on_stream, "nvshmemx_broadcastmem_on_stream");
  nvsh_optional(lib, (void **)&lib->alltoallmem_on_stream, "nvshmemx_alltoallmem_on_stream");
  *(void **)&lib->buffer_register_symmetric = dlsym(lib->handle,
                                                    "nvshmemx_buffer_register_symmetric");
  *(void **)&lib->buffer_unregister_symmetric = dlsym(lib->handle,
                                                      "nvshmemx_buffer_unregister_symmetric");
  return true;
fail:
  dlclose(lib->handle);
  lib->handle = NULL;
  return false;
}

/* Once per process: NVSHMEM is one instance per process, its library too. */
static pthread_mutex_t nvsh_lib_lock = PTHREAD_MUTEX_INITIALIZER;
static nvsh_lib_t nvsh_the_lib;
static bool nvsh_lib_tried, nvsh_lib_ok;
static char nvsh_lib_why[768];

const nvsh_lib_t *nvsh_lib_get(char *why, size_t cap) {
  pthread_mutex_lock(&nvsh_lib_lock);
  if (!nvsh_lib_tried) {
    nvsh_lib_tried = true;
    nvsh_lib_ok = nvsh_lib_load(&nvsh_the_lib, symm_settings()->SYMM_NVSHMEM_LIB, nvsh_lib_why,
                                sizeof nvsh_lib_why);
    if (nvsh_lib_ok)
      SYMM_INFO(BACKEND, "nvshmem: loaded %s, NVSHMEM %d.%d.%d", nvsh_the_lib.path,
                nvsh_the_lib.major, nvsh_the_lib.minor, nvsh_the_lib.patch);
  }
  bool ok = nvsh_lib_ok;
  pthread_mutex_unlock(&nvsh_lib_lock);
  if (!ok && why && cap) snprintf(why, cap, "%s", nvsh_lib_why);
  return ok ? &nvsh_the_lib : NULL;
}
