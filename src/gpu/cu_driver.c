/*
 * Run-time loading of the CUDA driver: dlopen the library named by
 * SYMM_CUDA_LIB, take cuGetProcAddress_v2 from it, and resolve every other
 * entry point through that with an explicit CUDA version, so that the
 * signatures we call are the ones cu_driver.h declares no matter how
 * new the installed driver is.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "gpu/cu_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "symm_error.h"
#include "symm_settings.h"

static symm_cu_driver_t cu_drv;
static char cu_load_why[512];
static bool cu_load_ok;
static pthread_once_t cu_load_once = PTHREAD_ONCE_INIT;

static char cu_init_why[512];
static bool cu_init_ok;
static pthread_once_t cu_init_once = PTHREAD_ONCE_INIT;

typedef ncu_result (*cu_get_proc_fn)(const char *, void **, int, unsigned long long, int *);

ncu_result symm_cu_driver_resolve(const symm_cu_driver_t *drv, const char *symbol, void **fn) {
  *fn = NULL;
  int status = NCU_PROC_NOT_FOUND;
  ncu_result res = drv->get_proc(symbol, fn, SYMM_CUDA_ABI, NCU_PROC_LEGACY_STREAM, &status);
  if (res == NCU_SUCCESS && status == NCU_PROC_FOUND && *fn) return NCU_SUCCESS;
  *fn = NULL;
  return res != NCU_SUCCESS ? res : NCU_ERROR_NOT_FOUND;
}

/* Resolves every entry of SYMM_CU_DRIVER_FUNCTIONS.  A symbol the driver
 * does not have means a driver older than the ABI we declare; any other
 * failure (the toolkit's stub library answers every call with an error) is
 * reported as is. */
static bool cu_resolve_all(char *why, size_t why_len) {
  void *fn;
  ncu_result res;
#define CU_RESOLVE_FN(name, params)                                           \
  if ((res = symm_cu_driver_resolve(&cu_drv, #name, &fn)) != NCU_SUCCESS) {    \
    if (res == NCU_ERROR_NOT_FOUND)                                               \
      snprintf(why, why_len, "CUDA driver lacks %s for CUDA %d.%d (driver too old?)", \
               #name, SYMM_CUDA_ABI / 1000, SYMM_CUDA_ABI % 1000 / 10);       \
    else                                                                          \
      snprintf(why, why_len, "cuGetProcAddress(%s) failed: %s", #name,            \
               symm_cu_error(res));                                             \
    return false;                                                                 \
  }                                                                               \
  memcpy(&cu_drv.name, &fn, sizeof fn);
  SYMM_CU_DRIVER_FUNCTIONS(CU_RESOLVE_FN)
#undef CU_RESOLVE_FN
  return true;
}

static void cu_load_once_fn(void) {
  const char *name = symm_settings()->SYMM_CUDA_LIB;
  if (!name) name = "libcuda.so.1";
  /* RTLD_LOCAL: our symbols never leak into the application's namespace;
   * the CUDA runtime the application uses dlopens the same library and
   * shares this one loaded copy. */
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    snprintf(cu_load_why, sizeof cu_load_why, "%s not found (no NVIDIA driver): %s",
             name, err ? err : "dlopen failed");
    return;
  }
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  if (!sym) {
    snprintf(cu_load_why, sizeof cu_load_why,
             "%s has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12.0", name);
    dlclose(lib);
    return;
  }
  cu_drv.lib = lib;
  memcpy(&cu_drv.get_proc, &sym, sizeof sym);
  if (!cu_resolve_all(cu_load_why, sizeof cu_load_why)) {
    /* Keep the library loaded: dlclose of libcuda is not safe once any of
     * its code ran, and the runtime may hold it too. */
    return;
  }
  if (cu_drv.cuDriverGetVersion(&cu_drv.driver_version) != NCU_SUCCESS)
    cu_drv.driver_version = 0;
  cu_load_ok = true;
  SYMM_INFO(BACKEND, "gpu: loaded %s (driver API %d.%d)", name,
            cu_drv.driver_version / 1000, cu_drv.driver_version % 1000 / 10);
}

const symm_cu_driver_t *symm_cu_driver_load(char *why, size_t why_len) {
  pthread_once(&cu_load_once, cu_load_once_fn);
  if (cu_load_ok) return &cu_drv;
  if (why && why_len) snprintf(why, why_len, "%s", cu_load_why);
  return NULL;
}

static void cu_init_once_fn(void) {
  if (!symm_cu_driver_load(cu_init_why, sizeof cu_init_why)) return;
  ncu_result res = cu_drv.cuInit(0);
  if (res != NCU_SUCCESS) {
    snprintf(cu_init_why, sizeof cu_init_why, "cuInit failed: %s%s",
             symm_cu_error(res),
             res == NCU_ERROR_NO_DEVICE ? " (check CUDA_VISIBLE_DEVICES and nvidia-smi)" : "");
    return;
  }
  cu_init_ok = true;
}

const symm_cu_driver_t *symm_cu_driver_init(char *why, size_t why_len) {
  pthread_once(&cu_init_once, cu_init_once_fn);
  if (cu_init_ok) return &cu_drv;
  if (why && why_len) snprintf(why, why_len, "%s", cu_init_why);
  return NULL;
}

static symm_cu_coll_driver_t cu_coll_drv;
static char cu_coll_why[256];
static bool cu_coll_ok;
static pthread_mutex_t cu_coll_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cu_coll_tried;

const symm_cu_coll_driver_t *symm_cu_coll_driver_load(const symm_cu_driver_t *drv, char *why,
                                                    size_t why_len) {
  pthread_mutex_lock(&cu_coll_lock);
  if (!cu_coll_tried) {
    cu_coll_tried = true;
    void *fn;
    ncu_result res;
    cu_coll_ok = true;
#define CU_RESOLVE_COLL_FN(name, params)                                          \
  if (cu_coll_ok) {                                                               \
    if ((res = symm_cu_driver_resolve(drv, #name, &fn)) != NCU_SUCCESS) {              \
      snprintf(cu_coll_why, sizeof cu_coll_why,                              \
               "the CUDA driver has no usable %s: %s", #name, symm_cu_error(res));  \
      cu_coll_ok = false;                                                         \
    } else {                                                                          \
      memcpy(&cu_coll_drv.name, &fn, sizeof fn);                                  \
    }                                                                                 \
  }
    SYMM_CU_COLL_DRIVER_FUNCTIONS(CU_RESOLVE_COLL_FN)
#undef CU_RESOLVE_COLL_FN
    if (symm_cu_driver_resolve(drv, "cuLaunchKernelEx", &fn) == NCU_SUCCESS)
      memcpy(&cu_coll_drv.cuLaunchKernelEx, &fn, sizeof fn);
  }
  bool ok = cu_coll_ok;
  pthread_mutex_unlock(&cu_coll_lock);
  if (ok) return &cu_coll_drv;
  if (why && why_len) snprintf(why, why_len, "%s", cu_coll_why);
  return NULL;
}

const char *symm_cu_error(ncu_result res) {
  static _Thread_local char buf[160];
  const char *name = NULL, *desc = NULL;
  /* The name functions work before cuInit; they are NULL only when the
   * library never loaded, and then no driver result exists to name. */
  if (cu_drv.cuGetErrorName) cu_drv.cuGetErrorName(res, &name);
  if (cu_drv.cuGetErrorString) cu_drv.cuGetErrorString(res, &desc);
  if (name && desc)
    snprintf(buf, sizeof buf, "%s (%s)", name, desc);
  else if (res == NCU_ERROR_STUB_LIBRARY)
    snprintf(buf, sizeof buf, "CUDA_ERROR_STUB_LIBRARY (the toolkit's stub libcuda was loaded, "
             "not the NVIDIA driver)");
  else
    snprintf(buf, sizeof buf, "CUDA error %d", res);
  return buf;
}
