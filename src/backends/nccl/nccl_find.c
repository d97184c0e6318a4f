/*
 * Finding and loading libnccl: SYMM_NCCL_LIB (a name the dynamic loader
 * searches, or a path), else, when the setting is left at its default and
 * the loader finds no libnccl.so.2, the copy that NVIDIA's pip wheel
 * (nvidia-nccl-cu*) puts under site-packages/nvidia/nccl/lib in a Python
 * environment: the active virtual or conda environment, the prefix of the
 * python3 on PATH, the user's site.  Only directories are read; no
 * interpreter is started.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/nccl/nccl.h"

static pthread_mutex_t find_lock = PTHREAD_MUTEX_INITIALIZER;
static symm_nccl_lib_t found_lib;
static bool found;
static char found_path[PATH_MAX];
static char found_setting[PATH_MAX]; /* the setting it was found for */

#define NCCL_WHEEL_DIR "site-packages/nvidia/nccl/lib/"

/* prefix/lib/python3.X/site-packages/nvidia/nccl/lib/libnccl.so.2, for the
 * first X that has it. */
static bool wheel_under(const char *prefix, char *out, size_t cap) {
  char lib[PATH_MAX];
  snprintf(lib, sizeof lib, "%s/lib", prefix);
  DIR *d = opendir(lib);
  if (!d) return false;
  bool ok = false;
  for (struct dirent *e; !ok && (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, "python3", 7) != 0) continue;
    snprintf(out, cap, "%s/%s/" NCCL_WHEEL_DIR SYMM_NCCL_LIB_DEFAULT, lib, e->d_name);
    ok = access(out, R_OK) == 0;
  }
  closedir(d);
  return ok;
}

/* The prefix of the python3 found on PATH (its directory's parent). */
static bool python_prefix(char *out, size_t cap) {
  const char *path = getenv("PATH");
  while (path && *path) {
    size_t n = strcspn(path, ":");
    char exe[PATH_MAX], real[PATH_MAX];
    snprintf(exe, sizeof exe, "%.*s/python3", (int)n, path);
    path += n + (path[n] == ':');
    if (access(exe, X_OK) != 0 || !realpath(exe, real)) continue;
    char *slash = strrchr(real, '/');
    if (slash) *slash = 0;
    slash = strrchr(real, '/');
    if (slash) *slash = 0;
    snprintf(out, cap, "%s", real);
    return true;
  }
  return false;
}

/* The wheel's library in the first environment that has one. */
bool nccl_find_wheel(char *out, size_t cap, char *where, size_t where_len) {
  char prefix[PATH_MAX], user[PATH_MAX] = "";
  const char *home = getenv("HOME");
  if (home) snprintf(user, sizeof user, "%s/.local", home);
  const char *candidates[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"),
                              python_prefix(prefix, sizeof prefix) ? prefix : NULL, user};
  size_t used = 0;
  where[0] = 0;
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    if (!candidates[i] || !*candidates[i]) continue;
    if (wheel_under(candidates[i], out, cap)) return true;
    if (used < where_len)
      used += (size_t)snprintf(where + used, where_len - used, "%s%s/lib/python3*/" NCCL_WHEEL_DIR,
                               used ? ", " : "", candidates[i]);
  }
  return false;
}

const symm_nccl_lib_t *nccl_library(char *why, size_t why_len) {
  const char *setting = symm_settings()->SYMM_NCCL_LIB;
  if (!setting || !*setting) setting = SYMM_NCCL_LIB_DEFAULT;
  pthread_mutex_lock(&find_lock);
  const symm_nccl_lib_t *lib = NULL;
  if (found && strcmp(found_setting, setting) == 0) {
    lib = &found_lib;
    goto out;
  }
  char first[512] = "", where[1024] = "", path[PATH_MAX];
  symm_nccl_lib_t l;
  snprintf(path, sizeof path, "%s", setting);
  bool ok = symm_nccl_lib_load(&l, setting, first, sizeof first);
  /* A wheel is looked for only when nobody named a library. */
  if (!ok && !l.handle && strcmp(setting, SYMM_NCCL_LIB_DEFAULT) == 0 &&
      nccl_find_wheel(path, sizeof path, where, sizeof where))
    ok = symm_nccl_lib_load(&l, path, first, sizeof first);
  if (!ok) {
    if (where[0])
      snprintf(why, why_len, "%s (SYMM_NCCL_LIB); no nvidia-nccl wheel in %s", first, where);
    else
      snprintf(why, why_len, "%s (SYMM_NCCL_LIB)", first);
    goto out;
  }
  found_lib = l;
  found = true;
  /* The file the loader chose for a bare name, for describe and messages. */
  Dl_info info;
  void *fn;
  memcpy(&fn, &l.get_version, sizeof fn);
  if (dladdr(fn, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
    snprintf(path, sizeof path, "%s", info.dli_fname);
  snprintf(found_path, sizeof found_path, "%s", path);
  snprintf(found_setting, sizeof found_setting, "%s", setting);
  lib = &found_lib;
out:
  pthread_mutex_unlock(&find_lock);
  return lib;
}

const char *nccl_library_path(void) { return found ? found_path : ""; }

void nccl_missing(const symm_nccl_lib_t *lib, const char *path, char *why, size_t why_len) {
  int maj, min, pat;
  symm_nccl_version_parts(lib->version, &maj, &min, &pat);
  why[0] = 0;
  /* What the backend cannot do without, with the version that brought it. */
  struct { const void *fn; size_t off; const char *since; } need[] = {
      {(const void *)lib->mem_alloc, offsetof(symm_nccl_lib_t, mem_alloc), "2.19"},
      {(const void *)lib->mem_free, offsetof(symm_nccl_lib_t, mem_free), "2.19"},
      {(const void *)lib->comm_window_register, offsetof(symm_nccl_lib_t, comm_window_register), "2.27"},
      {(const void *)lib->comm_window_deregister, offsetof(symm_nccl_lib_t, comm_window_deregister), "2.27"},
      {(const void *)lib->comm_get_async_error, offsetof(symm_nccl_lib_t, comm_get_async_error), "2.4"},
  };
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!need[i].fn) {
      snprintf(why, why_len, "%s (NCCL %d.%d.%d) has no %s, which the nccl backend needs "
               "(NCCL %s or later)", path, maj, min, pat, symm_nccl_lib_symbol(need[i].off),
               need[i].since);
      return;
    }
}
