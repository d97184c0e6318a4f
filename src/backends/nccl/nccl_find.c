/*
 * Finding and loading libnccl: SYMM_NCCL_LIB when it names a library (a
 * name the dynamic loader searches, or a path), that one only.  Left at
 * its default, every copy found is a candidate: the loader's libnccl.so.2
 * and those that NVIDIA's pip wheel (nvidia-nccl-cu*) puts under
 * site-packages/nvidia/nccl/lib in Python environments (the active virtual
 * or conda environment, the prefix of the python3 on PATH, the user's
 * site); the newest that has what the backend needs is taken (remote views
 * need 2.29.2), and describe says which and why.  Only directories are
 * read; no interpreter is started.
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

size_t nccl_find_wheels(char (*out)[PATH_MAX], size_t max, char *where, size_t where_len) {
  char prefix[PATH_MAX], user[PATH_MAX] = "";
  const char *home = getenv("HOME");
  if (home) snprintf(user, sizeof user, "%s/.local", home);
  const char *candidates[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"),
                              python_prefix(prefix, sizeof prefix) ? prefix : NULL, user};
  size_t used = 0, count = 0;
  where[0] = 0;
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && count < max; i++) {
    if (!candidates[i] || !*candidates[i]) continue;
    char real[PATH_MAX];
    bool seen = false;
    if (wheel_under(candidates[i], out[count], PATH_MAX)) {
      /* One environment reached twice (VIRTUAL_ENV and python3's prefix). */
      for (size_t k = 0; k < count && realpath(out[count], real); k++) {
        char other[PATH_MAX];
        seen |= realpath(out[k], other) && strcmp(real, other) == 0;
      }
      if (!seen) count++;
      continue;
    }
    if (used < where_len)
      used += (size_t)snprintf(where + used, where_len - used, "%s%s/lib/python3*/" NCCL_WHEEL_DIR,
                               used ? ", " : "", candidates[i]);
  }
  return count;
}

bool nccl_find_wheel(char *out, size_t cap, char *where, size_t where_len) {
  char found[1][PATH_MAX];
  if (!nccl_find_wheels(found, 1, where, where_len)) return false;
  snprintf(out, cap, "%s", found[0]);
  return true;
}

void nccl_version_text(int code, char *out, size_t cap) {
  int maj, min, pat;
  symm_nccl_version_parts(code, &maj, &min, &pat);
  snprintf(out, cap, "%d.%d.%d", maj, min, pat);
}

static pthread_mutex_t find_lock = PTHREAD_MUTEX_INITIALIZER;
static symm_nccl_lib_t found_lib;
static bool found;
static char found_path[PATH_MAX];
static char found_setting[PATH_MAX]; /* the setting it was found for */
static char found_choice[1024];      /* why this one, when there were several */

#define NCCL_MAX_CANDIDATES 5 /* the loader's, and a wheel per environment */

typedef struct {
  symm_nccl_lib_t lib;
  char path[PATH_MAX];
  bool usable; /* has every entry point the backend needs */
} nccl_candidate_t;

/* Loads `name`; on success fills c (the file the loader chose for a bare
 * name, and whether the backend can use it). */
static bool load_candidate(const char *name, nccl_candidate_t *c, char *why, size_t why_len) {
  if (!symm_nccl_lib_load(&c->lib, name, why, why_len)) {
    if (c->lib.handle) dlclose(c->lib.handle);
    c->lib.handle = NULL;
    return false;
  }
  snprintf(c->path, sizeof c->path, "%s", name);
  Dl_info info;
  void *fn;
  memcpy(&fn, &c->lib.get_version, sizeof fn);
  if (dladdr(fn, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
    snprintf(c->path, sizeof c->path, "%s", info.dli_fname);
  char missing[512];
  nccl_missing(&c->lib, c->path, missing, sizeof missing);
  c->usable = !missing[0];
  return true;
}

/* Whether a beats b: usable first, then the newer version. */
static bool better(const nccl_candidate_t *a, const nccl_candidate_t *b) {
  if (a->usable != b->usable) return a->usable;
  return a->lib.version > b->lib.version;
}

/* Says which candidate was taken over which (found_choice). */
static void note_choice(const nccl_candidate_t *c, size_t n, size_t best) {
  size_t used = 0;
  char v[32];
  found_choice[0] = 0;
  if (n < 2) return;
  nccl_version_text(c[best].lib.version, v, sizeof v);
  used = (size_t)snprintf(found_choice, sizeof found_choice, "the newest usable of %zu found "
                          "(also", n);
  const char *sep = " ";
  for (size_t i = 0; i < n && used < sizeof found_choice; i++) {
    if (i == best) continue;
    nccl_version_text(c[i].lib.version, v, sizeof v);
    used += (size_t)snprintf(found_choice + used, sizeof found_choice - used, "%sNCCL %s%s at %s",
                             sep, v, c[i].usable ? "" : " (unusable)", c[i].path);
    sep = "; ";
  }
  if (used < sizeof found_choice) snprintf(found_choice + used, sizeof found_choice - used, ")");
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
  nccl_candidate_t *c = calloc(NCCL_MAX_CANDIDATES, sizeof *c);
  char first[512] = "", where[1024] = "", err[512];
  char (*wheels)[PATH_MAX] = calloc(NCCL_MAX_CANDIDATES - 1, PATH_MAX);
  if (!c || !wheels) {
    snprintf(why, why_len, "out of memory");
    free(c);
    free(wheels);
    goto out;
  }
  size_t n = 0;
  if (load_candidate(setting, &c[n], first, sizeof first)) n++;
  /* Named by the user: that library only.  Else every copy found. */
  if (strcmp(setting, SYMM_NCCL_LIB_DEFAULT) == 0) {
    size_t w = nccl_find_wheels(wheels, NCCL_MAX_CANDIDATES - 1, where, sizeof where);
    for (size_t i = 0; i < w && n < NCCL_MAX_CANDIDATES; i++) {
      if (!load_candidate(wheels[i], &c[n], err, sizeof err)) {
        if (!n) snprintf(first, sizeof first, "%s", err); /* the reason, while none loads */
        continue;
      }
      /* The loader's own may be one of them. */
      bool dup = false;
      for (size_t k = 0; k < n; k++) dup |= c[k].lib.handle == c[n].lib.handle;
      if (dup) {
        dlclose(c[n].lib.handle); /* the same object, counted once more */
        continue;
      }
      n++;
    }
  }
  if (!n) {
    if (where[0])
      snprintf(why, why_len, "%s (SYMM_NCCL_LIB); no nvidia-nccl wheel in %s", first, where);
    else
      snprintf(why, why_len, "%s (SYMM_NCCL_LIB)", first);
  } else {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
      if (better(&c[i], &c[best])) best = i;
    for (size_t i = 0; i < n; i++)
      if (i != best) dlclose(c[i].lib.handle);
    note_choice(c, n, best);
    if (found_choice[0]) SYMM_INFO(BACKEND, "nccl: %s: %s", c[best].path, found_choice);
    found_lib = c[best].lib;
    found = true;
    snprintf(found_path, sizeof found_path, "%s", c[best].path);
    snprintf(found_setting, sizeof found_setting, "%s", setting);
    lib = &found_lib;
  }
  free(c);
  free(wheels);
out:
  pthread_mutex_unlock(&find_lock);
  return lib;
}

const char *nccl_library_path(void) { return found ? found_path : ""; }

const char *nccl_library_choice(void) { return found ? found_choice : ""; }

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
