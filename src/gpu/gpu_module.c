/*
 * The kernels of src/kernels/: the fatbin embedded in the library (loaded
 * with cuModuleLoadData), or the file SYMM_COLL_KERNELS names, which must
 * carry this library's ABI markers; the launch settings read with them
 * (programmatic dependent launch, SYMM_COLL_MAX_BLOCKS,
 * SYMM_COLL_LL_THREADS); and the ranks' agreement that they all run the
 * same kernels.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

#ifdef SYMM_HAVE_KERNELS
/* Generated from the fatbin by src/kernels/bin2c.cmake. */
extern const unsigned char symm_coll_fatbin[];
extern const size_t symm_coll_fatbin_size;
#endif

/* Largest kernel file SYMM_COLL_KERNELS may name (the embedded fatbin of
 * sm_80 + sm_90 + PTX is about 4 MiB). */
#define GPU_MODULE_FILE_MAX ((long)256 << 20)

/* Whether the kernels this GPU runs wait for the kernel before them
 * (griddepcontrol.wait is compiled in only for sm_90 and newer): the PTX
 * version of the loaded code, not the GPU's, decides, since a GPU newer
 * than the fatbin's SASS runs JIT-compiled PTX of the newest arch in it. */
static bool gpu_module_kernels_wait(const symm_gpu_t *g) {
  ncu_function fn = NULL;
  int ptx = 0;
  return g->cd->cuModuleGetFunction(&fn, g->module, "symm_signal_op") == NCU_SUCCESS &&
         g->cd->cuFuncGetAttribute(&ptx, NCU_FUNC_ATTR_PTX_VERSION, fn) == NCU_SUCCESS &&
         ptx >= 90;
}

/* Whether the loaded kernels were built with this library's parameter
 * blocks and ABI version: coll_kernels.cu sizes three device arrays after
 * them.  *coll and *signal are 0 when the markers are missing. */
static bool gpu_module_abi_matches(const symm_gpu_t *g, size_t *coll, size_t *signal,
                                   size_t *version) {
  ncu_deviceptr p;
  *coll = *signal = *version = 0;
  if (g->cd->cuModuleGetGlobal(&p, coll, g->module, "symm_coll_abi_params") != NCU_SUCCESS ||
      g->cd->cuModuleGetGlobal(&p, signal, g->module, "symm_coll_abi_signal") != NCU_SUCCESS ||
      g->cd->cuModuleGetGlobal(&p, version, g->module, "symm_coll_abi_version") != NCU_SUCCESS)
    *coll = *signal = *version = 0;
  return *coll == sizeof(symm_coll_params_t) && *signal == sizeof(symm_signal_params_t) &&
         *version == SYMM_COLL_ABI_VERSION;
}

/* The file SYMM_COLL_KERNELS names, read whole, NUL-terminated (a PTX text
 * image must end with one).  Errors are recorded. */
static symm_result_t gpu_module_read_file(const char *path, unsigned char **image, size_t *len) {
  symm_result_t res = SYMM_SUCCESS;
  FILE *f = fopen(path, "rb");
  long n = -1;
  *image = NULL;
  *len = 0;
  if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (!f || n < 0 || fseek(f, 0, SEEK_SET) != 0) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: cannot read it: %s", path,
                     strerror(errno));
  } else if (n == 0 || n > GPU_MODULE_FILE_MAX) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: %ld bytes; a kernel image "
                     "has 1 to %ld", path, n, GPU_MODULE_FILE_MAX);
  } else if (!(*image = malloc((size_t)n + 1))) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "SYMM_COLL_KERNELS=%s: no memory for %ld bytes", path,
                     n);
  } else if (fread(*image, 1, (size_t)n, f) != (size_t)n) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: short read", path);
  } else {
    (*image)[n] = 0;
    *len = (size_t)n;
  }
  if (f) fclose(f);
  if (res != SYMM_SUCCESS) {
    free(*image);
    *image = NULL;
  }
  return res;
}

/* Loads `image` (len bytes; the embedded fatbin when file is NULL) and
 * checks a file's ABI markers.  Errors for a file are recorded and returned;
 * for the embedded kernels they only leave the collectives unavailable. */
static symm_result_t gpu_module_load_image(symm_gpu_t *g, const char *file, const void *image,
                                           size_t len) {
  const uint64_t t0 = symm_now_ns();
  ncu_result cu = g->cd->cuModuleLoadData(&g->module, image);
  SYMM_INFO(COLL, "%s: cuModuleLoadData of %zu bytes of kernels: %.1f ms", g->name, len,
            (double)(symm_now_ns() - t0) / 1e6);
  if (cu != NCU_SUCCESS) {
    g->module = NULL;
    if (file)
      return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: the driver cannot load "
                        "it (%s); it must be a fatbin, cubin or PTX of coll_kernels.cu for "
                        "this GPU", file, symm_cu_error(cu));
    snprintf(g->why, sizeof g->why, "cuModuleLoadData of the collective kernels (%zu bytes) "
             "failed: %s (is the GPU older than sm_80?)", len, symm_cu_error(cu));
    return SYMM_SUCCESS;
  }
  /* The embedded kernels were built from this tree: nothing to check. */
  size_t coll, signal, version;
  if (!file || gpu_module_abi_matches(g, &coll, &signal, &version)) {
    if (file)
      SYMM_INFO(COLL, "%s: collective kernels from SYMM_COLL_KERNELS=%s (%zu bytes)", g->name,
                file, len);
    return SYMM_SUCCESS;
  }
  g->cd->cuModuleUnload(g->module);
  g->module = NULL;
  if (!coll)
    return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: no ABI markers "
                      "(symm_coll_abi_*): built from a coll_kernels.cu of another version", file);
  return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: built from another version of "
                    "coll_abi.h (ABI %zu, parameter blocks of %zu and %zu bytes; this "
                    "library's: ABI %d, %zu and %zu)", file, version, coll, signal,
                    SYMM_COLL_ABI_VERSION, sizeof(symm_coll_params_t),
                    sizeof(symm_signal_params_t));
}

/* Collectives unavailable because of g->why: fine for the embedded kernels
 * (everything else works), an error when the user named a kernel file. */
static symm_result_t gpu_module_unavailable(const symm_gpu_t *g, const char *file) {
  SYMM_INFO(BACKEND, "%s: collectives unavailable: %s", g->name, g->why);
  if (!file) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s is set, but the collectives "
                    "cannot run here: %s", file, g->why);
}

_Static_assert(GPU_COLL_LL_MAX_BLOCKS == 1024 && SYMM_COLL_THREADS == 512,
               "the ranges of SYMM_COLL_MAX_BLOCKS and SYMM_COLL_LL_THREADS (gpu_settings.def)");

/* The launch settings of loaded kernels. */
static void gpu_module_settings(symm_gpu_t *g) {
  g->pdl = g->cd->cuLaunchKernelEx && symm_settings()->SYMM_GPU_PDL &&
           gpu_module_kernels_wait(g);
  SYMM_INFO(COLL, "%s: programmatic dependent launch %s", g->name, g->pdl ? "on" : "off");
  /* Their ranges (0..1024, multiples of 32 in 0..512) are the settings'. */
  g->max_blocks = (unsigned)symm_settings()->SYMM_COLL_MAX_BLOCKS;
  g->ll_threads = (unsigned)symm_settings()->SYMM_COLL_LL_THREADS;
}

symm_result_t gpu_module_load(symm_comm_t *comm, symm_gpu_t *g) {
  const char *file = symm_settings()->SYMM_COLL_KERNELS;
  if (file && !*file) file = NULL; /* set empty: unset */
  unsigned char *image = NULL;
  size_t len = 0;
  if (file) {
    g->file_res = gpu_module_read_file(file, &image, &len);
    if (g->file_res != SYMM_SUCCESS) {
      snprintf(g->file_msg, sizeof g->file_msg, "%s", symm_last_error());
      g->kernels = 1;
      return SYMM_SUCCESS; /* gpu_module_agree reports it, once every rank knows */
    }
    g->kernels = symm_hash64(image, len, 0x6b726e6cull) | 2;
  }
#ifndef SYMM_HAVE_KERNELS
  if (!file) {
    snprintf(g->why, sizeof g->why, "libsymmem was built without CUDA kernels (no nvcc at "
             "build time; SYMM_COLL_KERNELS can name a kernel file)");
    return gpu_module_unavailable(g, NULL);
  }
#else
  if (!file) {
    image = (unsigned char *)symm_coll_fatbin; /* not freed below */
    len = symm_coll_fatbin_size;
  }
#endif
  symm_result_t res = SYMM_SUCCESS;
  g->cd = symm_cu_coll_driver_load(g->drv, g->why, sizeof g->why);
  if (!g->cd || !gpu_async_alloc(g)) {
    res = gpu_module_unavailable(g, file);
    goto out;
  }
  res = gpu_module_load_image(g, file, image, len);
  if (res != SYMM_SUCCESS || !g->module) {
    if (res != SYMM_SUCCESS) snprintf(g->why, sizeof g->why, "%s", symm_last_error());
    else SYMM_INFO(BACKEND, "%s: collectives unavailable: %s", g->name, g->why);
    goto out;
  }
  gpu_module_settings(g);
  g->ready = true;
out:
  if (file) free(image);
  return res;
}

symm_result_t gpu_module_agree(symm_comm_t *comm, symm_gpu_t *g) {
  /* A rank that could not read its file reports that; the others name it. */
  if (g->kernels == 1) return symm_error(g->file_res, "%s", g->file_msg);
  for (int r = 0; r < g->size; r++) {
    const uint64_t theirs = g->ranks[r].kernels;
    if (theirs == g->kernels) continue;
    if (theirs == 1)
      return symm_error(SYMM_ERR_INVALID_ARG, "%s: rank %d could not read the file its "
                        "SYMM_COLL_KERNELS names", g->name, r);
    return symm_error(SYMM_ERR_MISMATCH, "%s: rank %d runs other collective kernels than "
                      "rank %d (%s); SYMM_COLL_KERNELS must name the same file on every rank",
                      g->name, r, g->rank, theirs == 0 ? "the embedded ones" : "another file");
  }
  return SYMM_SUCCESS;
}

void gpu_module_unload(symm_gpu_t *g) {
  if (!g->cd) return;
  if (g->module) g->cd->cuModuleUnload(g->module);
  g->module = NULL;
  gpu_async_free(g);
}
