/*
 * Collectives and stream-ordered signals of the native backend: the kernels
 * of src/kernels/ (embedded as a fatbin, loaded with cuModuleLoadData,
 * launched with cuLaunchKernel on the caller's stream), and the pinned
 * error record they report to.
 *
 * Buffers.  The reductions push each rank's input into the peers' staging
 * (the scratch tensor, double-buffered by the device epoch, see
 * coll_kernels.cu); LL and LL128 push packets into their own areas of it.
 * Outputs go straight into recvbuf.  Where every rank's recvbuf is the same
 * symmetric tensor at the same offset, two-shot and all-gather write into
 * the peers' recvbuf instead (zero copy): the host offers a key of the
 * tensor and offset, and the kernel uses it only if every rank announced
 * the same one, so nothing has to be agreed on the host.
 *
 * Launches.  One launch per call; the scratch (grown collectively, at the
 * same call on every rank, since its size depends only on the arguments)
 * always holds the LL and LL128 areas and both staging halves.  Nothing
 * here allocates, synchronises or passes a host-side counter to a kernel,
 * so calls can be captured in CUDA graphs once the scratch is reserved.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/native/native.h"
#include "kernels/coll_abi.h"

#ifdef SYMM_HAVE_KERNELS
/* Generated from the fatbin by src/kernels/bin2c.cmake. */
extern const unsigned char symm_coll_fatbin[];
extern const size_t symm_coll_fatbin_size;
#endif

enum { NATIVE_COLL_KINDS = 9, NATIVE_COLL_DTYPES = 4 };

_Static_assert(SYMM_COLL_PAD_BYTES == SYMM_SIGNAL_PAD_BYTES,
               "the kernels' pad layout assumes the library's signal pad size");
_Static_assert(sizeof(ncu_launch_attr) == 72 && offsetof(ncu_launch_attr, value) == 8 &&
                   sizeof(ncu_launch_config) == 56 &&
                   offsetof(ncu_launch_config, num_attrs) == 48,
               "CUlaunchAttribute / CUlaunchConfig layout of the CUDA 12 driver ABI");

/* Most blocks of the LL kernels (native_coll_ll_launch), and of any kernel
 * through SYMM_COLL_MAX_BLOCKS. */
#define NATIVE_COLL_LL_MAX_BLOCKS 1024u

typedef struct native_coll {
  bool ready;
  char why[256];                    /* why collectives are unavailable */
  const symm_cu_coll_driver_t *cd;
  ncu_module module;
  volatile symm_coll_error_t *err;  /* pinned, mapped for the device */
  ncu_deviceptr err_dev;
  ncu_function fn[NATIVE_COLL_KINDS][NATIVE_COLL_DTYPES][SYMM_REDUCE_COUNT_];
  ncu_function signal_fn;           /* symm_signal_op, loaded on first use */
  bool ll128;                       /* every pair of ranks' GPUs is NVLink-class */
  bool pdl;                         /* launch with programmatic dependent launch */
  unsigned max_blocks;              /* SYMM_COLL_MAX_BLOCKS, 0: no limit */
  unsigned ll_threads;              /* SYMM_COLL_LL_THREADS, 0: by size */
  const symm_tensor_t *scratch;     /* scratch `base` describes */
  symm_coll_params_t base;          /* per-scratch parameters: pointers, layout, nonce */
} native_coll_t;

static const char *const native_coll_kernel_names[NATIVE_COLL_KINDS] = {
    NULL, "ar_one_shot", "ar_two_shot", "ar_ll", "reduce_scatter",
    "all_gather", "broadcast", "all_to_all", "ar_ll128"};

/* Index of a reducible dtype in the kernel table, -1 for others. */
static int native_coll_dtype_index(symm_dtype_t dt) {
  switch (dt) {
    case SYMM_DTYPE_F32: return 0;
    case SYMM_DTYPE_BF16: return 1;
    case SYMM_DTYPE_F16: return 2;
    case SYMM_DTYPE_I32: return 3;
    default: return -1;
  }
}
static const char *const native_coll_dtype_names[NATIVE_COLL_DTYPES] = {"f32", "bf16", "f16",
                                                                        "i32"};

/* ------------------------------------------------------- startup, fini */

/* LL128 needs a 128-byte store to reach the peer in one piece: true over
 * NVLink and within one GPU, not over PCIe, where NCCL turns it off too.
 * Native peer atomics are what NVLink-class links report.  This rank's
 * answer; native_coll_agree ANDs every rank's. */
static bool native_coll_nvlink_peers(const symm_comm_t *comm, const native_state_t *st) {
  for (int r = 0; r < comm->size; r++) {
    int d = st->peer_ordinal[r], atomics = 0;
    if (r == comm->rank || d == (int)st->dev) continue;
    if (d < 0 || st->drv->cuDeviceGetP2PAttribute(&atomics, NCU_P2P_NATIVE_ATOMIC_SUPPORTED,
                                                  st->dev, d) != NCU_SUCCESS || !atomics)
      return false;
  }
  return true;
}

/* Whether the kernels this GPU runs wait for the kernel before them
 * (griddepcontrol.wait is compiled in only for sm_90 and newer): the PTX
 * version of the loaded code, not the GPU's, decides, since a GPU newer
 * than the fatbin's SASS runs JIT-compiled PTX of the newest arch in it. */
static bool native_coll_kernels_wait(const native_coll_t *co) {
  ncu_function fn = NULL;
  int ptx = 0;
  return co->cd->cuModuleGetFunction(&fn, co->module, "symm_signal_op") == NCU_SUCCESS &&
         co->cd->cuFuncGetAttribute(&ptx, NCU_FUNC_ATTR_PTX_VERSION, fn) == NCU_SUCCESS &&
         ptx >= 90;
}

/* Largest kernel file SYMM_COLL_KERNELS may name (the embedded fatbin of
 * sm_80 + sm_90 + PTX is about 4 MiB). */
#define NATIVE_COLL_FILE_MAX ((long)256 << 20)

/* Whether the loaded kernels were built with this library's parameter
 * blocks and ABI version: coll_kernels.cu sizes three device arrays after
 * them.  *coll and *signal are 0 when the markers are missing. */
static bool native_coll_abi_matches(const native_coll_t *co, size_t *coll, size_t *signal,
                                    size_t *version) {
  ncu_deviceptr p;
  *coll = *signal = *version = 0;
  if (co->cd->cuModuleGetGlobal(&p, coll, co->module, "symm_coll_abi_params") != NCU_SUCCESS ||
      co->cd->cuModuleGetGlobal(&p, signal, co->module, "symm_coll_abi_signal") != NCU_SUCCESS ||
      co->cd->cuModuleGetGlobal(&p, version, co->module, "symm_coll_abi_version") !=
          NCU_SUCCESS)
    *coll = *signal = *version = 0;
  return *coll == sizeof(symm_coll_params_t) && *signal == sizeof(symm_signal_params_t) &&
         *version == SYMM_COLL_ABI_VERSION;
}

/* The file SYMM_COLL_KERNELS names, read whole, NUL-terminated (a PTX text
 * image must end with one).  Errors are recorded. */
static symm_result_t native_coll_read_file(const char *path, unsigned char **image,
                                           size_t *len) {
  symm_result_t res = SYMM_SUCCESS;
  FILE *f = fopen(path, "rb");
  long n = -1;
  *image = NULL;
  *len = 0;
  if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (!f || n < 0 || fseek(f, 0, SEEK_SET) != 0) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: cannot read it: %s", path,
                     strerror(errno));
  } else if (n == 0 || n > NATIVE_COLL_FILE_MAX) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: %ld bytes; a kernel image "
                     "has 1 to %ld", path, n, NATIVE_COLL_FILE_MAX);
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

/* What each rank brings to the collectives' agreement at startup. */
typedef struct {
  uint64_t kernels; /* 0: the embedded ones; 1: its SYMM_COLL_KERNELS file could not be
                       read; else a hash of that file (never 0 or 1) */
  int32_t nvlink;   /* native_coll_nvlink_peers */
  int32_t unused;
} native_coll_status_t;

/*
 * The ranks' one exchange at startup (collective, and made by every rank
 * whatever happened to its file, so that a rank that fails does not leave
 * the others waiting): *ll128 when every rank's peers are NVLink-class, so
 * that every rank picks the same kernels; and every rank must run the same
 * kernels, else SYMM_ERR_MISMATCH naming a rank that differs.
 */
static symm_result_t native_coll_agree(symm_comm_t *comm, native_coll_status_t mine,
                                       bool *ll128) {
  native_coll_status_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "native: out of memory");
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_STATUS, &mine, sizeof mine, all);
  *ll128 = res == SYMM_SUCCESS;
  for (int r = 0; r < comm->size && *ll128; r++) *ll128 = all[r].nvlink != 0;
  /* A rank that could not read its file reports that (the caller). */
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS && mine.kernels != 1; r++) {
    if (all[r].kernels == mine.kernels) continue;
    if (all[r].kernels == 1)
      res = symm_error(SYMM_ERR_INVALID_ARG, "native: rank %d could not read the file its "
                       "SYMM_COLL_KERNELS names", r);
    else
      res = symm_error(SYMM_ERR_MISMATCH, "native: rank %d runs other collective kernels than "
                       "rank %d (%s); SYMM_COLL_KERNELS must name the same file on every rank",
                       r, comm->rank, all[r].kernels == 0 ? "the embedded ones" : "another file");
  }
  free(all);
  if (res == SYMM_SUCCESS)
    SYMM_INFO(COLL, "native: LL128 all-reduce %s", *ll128 ? "on (NVLink-class peers)"
                                                         : "off (a pair of GPUs without NVLink)");
  return res;
}

/* Loads `image` (len bytes; the embedded fatbin when file is NULL) and
 * checks a file's ABI markers.  Errors for a file are recorded and returned;
 * for the embedded kernels they only leave the collectives unavailable. */
static symm_result_t native_coll_load_module(native_coll_t *co, const char *file,
                                             const void *image, size_t len) {
  ncu_result cu = co->cd->cuModuleLoadData(&co->module, image);
  if (cu != NCU_SUCCESS) {
    co->module = NULL;
    if (file)
      return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: the driver cannot load "
                        "it (%s); it must be a fatbin, cubin or PTX of coll_kernels.cu for "
                        "this GPU", file, symm_cu_error(cu));
    snprintf(co->why, sizeof co->why, "cuModuleLoadData of the collective kernels (%zu bytes) "
             "failed: %s (is the GPU older than sm_80?)", len, symm_cu_error(cu));
    return SYMM_SUCCESS;
  }
  /* The embedded kernels were built from this tree: nothing to check. */
  size_t coll, signal, version;
  if (!file || native_coll_abi_matches(co, &coll, &signal, &version)) {
    if (file)
      SYMM_INFO(COLL, "native: collective kernels from SYMM_COLL_KERNELS=%s (%zu bytes)", file,
                len);
    return SYMM_SUCCESS;
  }
  co->cd->cuModuleUnload(co->module);
  co->module = NULL;
  if (!coll)
    return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: no ABI markers "
                      "(symm_coll_abi_*): built from a coll_kernels.cu of another version", file);
  return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s: built from another version of "
                    "coll_abi.h (ABI %zu, parameter blocks of %zu and %zu bytes; this "
                    "library's: ABI %d, %zu and %zu)", file, version, coll, signal,
                    SYMM_COLL_ABI_VERSION, sizeof(symm_coll_params_t),
                    sizeof(symm_signal_params_t));
}

/* Collectives unavailable because of `why`: fine for the embedded kernels
 * (everything else works), an error when the user named a kernel file. */
static symm_result_t native_coll_unavailable(native_coll_t *co, const char *file) {
  SYMM_INFO(BACKEND, "native: collectives unavailable: %s", co->why);
  if (!file) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_INVALID_ARG, "SYMM_COLL_KERNELS=%s is set, but the collectives "
                    "cannot run here: %s", file, co->why);
}

symm_result_t native_coll_startup(symm_comm_t *comm) {
  native_state_t *st = comm->backend_state;
  native_coll_t *co = calloc(1, sizeof *co);
  if (!co) return symm_error(SYMM_ERR_NO_MEMORY, "native: no memory for the collectives' state");
  st->coll = co;
  const char *file = symm_settings()->SYMM_COLL_KERNELS;
  if (file && !*file) file = NULL; /* set empty: unset */
  unsigned char *image = NULL;
  size_t len = 0;
  symm_result_t read = file ? native_coll_read_file(file, &image, &len) : SYMM_SUCCESS;
  native_coll_status_t mine = {0, native_coll_nvlink_peers(comm, st), 0};
  if (file) mine.kernels = read != SYMM_SUCCESS ? 1 : symm_hash64(image, len, 0x6b726e6cull) | 2;
  symm_result_t res = native_coll_agree(comm, mine, &co->ll128);
  if (read != SYMM_SUCCESS || res != SYMM_SUCCESS) {
    free(image);
    return read != SYMM_SUCCESS ? read : res;
  }
#ifndef SYMM_HAVE_KERNELS
  if (!file) {
    snprintf(co->why, sizeof co->why, "libsymmem was built without CUDA kernels (no nvcc at "
             "build time; SYMM_COLL_KERNELS can name a kernel file)");
    return native_coll_unavailable(co, NULL);
  }
#else
  if (!file) {
    image = (unsigned char *)symm_coll_fatbin; /* not freed below */
    len = symm_coll_fatbin_size;
  }
#endif
  ncu_context saved = NULL;
  bool entered = false;
  co->cd = symm_cu_coll_driver_load(st->drv, co->why, sizeof co->why);
  if (!co->cd) {
    res = native_coll_unavailable(co, file);
    goto out;
  }
  res = native_ctx_enter(st, &saved);
  if (res != SYMM_SUCCESS) goto out;
  entered = true;
  void *host = NULL;
  ncu_result cu = co->cd->cuMemHostAlloc(&host, sizeof(symm_coll_error_t),
                                         NCU_MEMHOSTALLOC_PORTABLE | NCU_MEMHOSTALLOC_DEVICEMAP);
  if (cu != NCU_SUCCESS) {
    snprintf(co->why, sizeof co->why, "cuMemHostAlloc of the error record failed: %s",
             symm_cu_error(cu));
    res = native_coll_unavailable(co, file);
    goto out;
  }
  memset(host, 0, sizeof(symm_coll_error_t));
  co->err = host;
  cu = co->cd->cuMemHostGetDevicePointer(&co->err_dev, host, 0);
  if (cu != NCU_SUCCESS) {
    snprintf(co->why, sizeof co->why, "cuMemHostGetDevicePointer failed: %s", symm_cu_error(cu));
    res = native_coll_unavailable(co, file);
    goto out;
  }
  res = native_coll_load_module(co, file, image, len);
  if (res != SYMM_SUCCESS || !co->module) {
    if (res != SYMM_SUCCESS) snprintf(co->why, sizeof co->why, "%s", symm_last_error());
    else SYMM_INFO(BACKEND, "native: collectives unavailable: %s", co->why);
    goto out;
  }
  co->pdl = co->cd->cuLaunchKernelEx && symm_settings()->SYMM_NATIVE_PDL &&
            native_coll_kernels_wait(co);
  SYMM_INFO(COLL, "native: programmatic dependent launch %s", co->pdl ? "on" : "off");
  int64_t mb = symm_settings()->SYMM_COLL_MAX_BLOCKS;
  co->max_blocks = mb > 0 && mb <= NATIVE_COLL_LL_MAX_BLOCKS ? (unsigned)mb : 0;
  int64_t lt = symm_settings()->SYMM_COLL_LL_THREADS;
  co->ll_threads = lt >= 32 && lt <= SYMM_COLL_THREADS && lt % 32 == 0 ? (unsigned)lt : 0;
  co->ready = true;
  /* The LL areas sit in every scratch before the staging halves. */
  comm->scratch_fixed = SYMM_COLL_STAGE_OFF;
out:
  if (entered) native_ctx_leave(st, saved);
  if (file) free(image);
  return res;
}

void native_coll_fini(symm_comm_t *comm) {
  native_state_t *st = comm->backend_state;
  native_coll_t *co = st ? st->coll : NULL;
  if (co) {
    ncu_context saved = NULL;
    bool entered = co->cd && native_ctx_enter(st, &saved) == SYMM_SUCCESS;
    if (entered) {
      if (co->module) co->cd->cuModuleUnload(co->module);
      if (co->err) co->cd->cuMemFreeHost((void *)co->err);
      native_ctx_leave(st, saved);
    }
    free(co);
    st->coll = NULL;
  }
  native_fini(comm);
}

/* ------------------------------------------------------------- errors */

/* The message for error `code` of the record's fields. */
static void native_coll_error_message(const symm_comm_t *comm, symm_result_t code,
                                      unsigned peer, unsigned kind, unsigned epoch, char *msg,
                                      size_t cap) {
  const char *what = kind < NATIVE_COLL_KINDS && native_coll_kernel_names[kind]
                         ? native_coll_kernel_names[kind] : "?";
  if (code == SYMM_ERR_MISMATCH)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d: rank %u enqueued a different "
             "collective (kind, count, dtype, op, root or algorithm differ)", epoch, what,
             comm->rank, peer);
  else if (code == SYMM_ERR_TIMEOUT && kind == 0)
    snprintf(msg, cap, "a signal put, wait or barrier on rank %d: rank %u did not signal (or "
             "consume a signal) within %d ms; the tensor's pads are unusable from now on",
             comm->rank, peer, comm->timeout_ms);
  else if (code == SYMM_ERR_TIMEOUT && peer == 0xffffffffu)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d did not run: an earlier "
             "collective timed out and the communicator's collectives are unusable", epoch, what,
             comm->rank);
  else if (code == SYMM_ERR_TIMEOUT)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d: rank %u did not arrive within %d "
             "ms; the communicator's collectives are unusable from now on", epoch, what,
             comm->rank, peer, comm->timeout_ms);
  else
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d failed on the device (peer %u)",
             epoch, what, comm->rank, peer);
}

symm_result_t native_poll_async_error(symm_comm_t *comm) {
  native_state_t *st = comm->backend_state;
  native_coll_t *co = st ? st->coll : NULL;
  if (!co || !co->err) return SYMM_SUCCESS;
  symm_coll_error_t *e = (symm_coll_error_t *)co->err;
  /* `more` is taken atomically: a kernel that stores it after this keeps
   * it for the next poll. */
  const uint32_t more = __atomic_exchange_n(&e->more, 0u, __ATOMIC_ACQ_REL);
  const uint32_t raw = __atomic_load_n(&e->code, __ATOMIC_ACQUIRE);
  if (!raw && !more) return SYMM_SUCCESS;
  char msg[320];
  symm_result_t code = (symm_result_t)(raw ? raw : more);
  if (raw)
    native_coll_error_message(comm, code, e->peer, e->kind, e->epoch, msg, sizeof msg);
  else
    snprintf(msg, sizeof msg, "a collective on rank %d failed on the device (%s) while an "
             "earlier error was not yet read; its details were not kept", comm->rank,
             symm_strerror((symm_result_t)more));
  if (raw && more) {
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof msg - len, "; a later collective failed too (%s)",
             symm_strerror((symm_result_t)more));
  }
  symm_comm_set_async_error(comm, code, "%s", msg);
  if (raw) {
    /* Code last: a kernel that sees it 0 writes a whole new record. */
    e->peer = e->kind = e->epoch = 0;
    __atomic_store_n(&e->code, 0u, __ATOMIC_RELEASE);
  }
  return code;
}

/* -------------------------------------------------------------- launch */

/*
 * Launches fn on `stream` with one parameter block.  With programmatic
 * dependent launch (SYMM_NATIVE_PDL, where the driver has cuLaunchKernelEx)
 * the kernel may start while the kernel before it on the stream is still
 * running: every kernel of ours waits (griddepcontrol.wait) for that
 * kernel's completion and memory before it touches anything, and lets the
 * kernel after it start early (griddepcontrol.launch_dependents).  What
 * this hides is the launch latency between back-to-back kernels, in graphs
 * too, where captured launches keep the attribute as a programmatic edge.
 */
static ncu_result native_coll_launch(native_coll_t *co, ncu_function fn, unsigned grid,
                                     unsigned threads, void *stream, void *params) {
  void *kparams[1] = {params};
  if (co->pdl) {
    ncu_launch_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = NCU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization = 1;
    ncu_launch_config cfg = {grid, 1, 1, threads, 1, 1, 0, (ncu_stream)stream, &attr, 1};
    ncu_result cu = co->cd->cuLaunchKernelEx(&cfg, fn, kparams, NULL);
    if (cu != NCU_ERROR_INVALID_VALUE && cu != NCU_ERROR_NOT_SUPPORTED) return cu;
    /* A driver that refuses the attribute (if a plain launch goes): launch
     * plainly from now on.  Other bad values fail the plain launch too. */
    ncu_result plain = co->cd->cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0,
                                              (ncu_stream)stream, kparams, NULL);
    if (plain == NCU_SUCCESS) {
      co->pdl = false;
      SYMM_WARN(COLL, "native: cuLaunchKernelEx refused programmatic dependent launch (%s); "
                "launching without it", symm_cu_error(cu));
    }
    return plain;
  }
  return co->cd->cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, (ncu_stream)stream, kparams,
                                NULL);
}

/* Kernels that reduce, one per dtype and op. */
static bool native_coll_reducing(int kind) {
  return kind <= SYMM_COLL_KERNEL_REDUCE_SCATTER || kind == SYMM_COLL_KERNEL_AR_LL128;
}

static symm_result_t native_coll_function(native_coll_t *co, int kind, int dti, int op,
                                          ncu_function *fn) {
  bool reducing = native_coll_reducing(kind);
  if (!reducing) dti = op = 0;
  ncu_function *slot = &co->fn[kind][dti][op];
  if (!*slot) {
    char name[96];
    if (reducing)
      snprintf(name, sizeof name, "symm_coll_%s_%s_%s", native_coll_kernel_names[kind],
               native_coll_dtype_names[dti], symm_redop_name((symm_redop_t)op));
    else
      snprintf(name, sizeof name, "symm_coll_%s", native_coll_kernel_names[kind]);
    ncu_result cu = co->cd->cuModuleGetFunction(slot, co->module, name);
    if (cu != NCU_SUCCESS) {
      *slot = NULL;
      return native_cu_fail(cu, "cuModuleGetFunction(%s)", name);
    }
  }
  *fn = *slot;
  return SYMM_SUCCESS;
}

/* The call (count included), the kernel and its launch shape: ranks whose
 * blocks differ (a different SYMM_COLL_LL_THREADS) would wait on peer
 * blocks of other indices even where their grids agree. */
static uint32_t native_coll_sig(const symm_coll_args_t *args, int kind, unsigned grid,
                                unsigned threads) {
  uint64_t f[3] = {symm_coll_signature(args), (uint64_t)kind, (uint64_t)threads << 32 | grid};
  uint64_t h = symm_hash64(f, sizeof f, 0x636f6c6cull);
  return (uint32_t)(h ^ (h >> 32)) | 1u; /* never SYMM_COLL_SIG_REFUSED */
}

static unsigned native_coll_grid(uint64_t work_bytes, uint64_t per_block, unsigned channels) {
  uint64_t g = (work_bytes + per_block - 1) / per_block; /* 0 for count 0: the caller takes 1 */
  if (g > channels) g = channels;
  return (unsigned)g;
}

static bool aligned16(uint64_t v) { return (v & 15u) == 0; }

/*
 * Most blocks of a kernel that exchanges headers: one per channel, but
 * fewer move data faster at 2 ranks (bench/tune-native.sh, 2 x H200, bf16,
 * CUDA graph, us at 16 / 64 / 256 MiB; all channels were 124 then, 122
 * since the announces grew to 32 bytes):
 *   two-shot        124 blocks 57.5 / 204.2 / 792.2, 96: 52.9 / 196.9 / 763.9
 *   reduce-scatter  124 blocks 35.1 / 133.4 / 505.6, 96: 34.5 / 131.6 / 500.2
 *   all-gather      124 blocks 31.7 / 105.4 / 397.3, 64: 30.8 / 100.8 / 378.4
 * Two-shot segments (bytes per rank) up to 32 MiB run 88 blocks: at 2
 * ranks, 32 / 64 MiB in 101.0, 101.9 / 194.2, 193.6 us against 96 blocks'
 * 104.9, 105.9 / 197.5, 197.4; 16 and 128 MiB tie, 256 MiB is 0.5% slower
 * at 88 (and 80 blocks is 4% slower at 64 MiB than either).
 * At 4 and more ranks there are fewer channels than that.
 */
#define NATIVE_COLL_TWO_SHOT_SMALL_SEG ((uint64_t)32 << 20)
static unsigned native_coll_bw_blocks(int kind, int channels, uint64_t seg_bytes) {
  unsigned most = kind == SYMM_COLL_KERNEL_ALL_GATHER ? 64u : 96u;
  if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT && seg_bytes <= NATIVE_COLL_TWO_SHOT_SMALL_SEG)
    most = 88u;
  return (unsigned)channels < most ? (unsigned)channels : most;
}

/* Bytes of one rank's LL region in one parity half of the LL area. */
static uint64_t native_coll_ll_region(int world) {
  return (SYMM_COLL_LL_BYTES / 2 / (uint64_t)world) & ~(uint64_t)15;
}

/* 128-byte lines (120 data bytes each) that carry `bytes`. */
static uint64_t native_coll_ll128_lines(uint64_t bytes) { return ((bytes + 7) / 8 + 14) / 15; }

/* Bytes of one rank's LL128 region in one parity half (whole lines). */
static uint64_t native_coll_ll128_region(int world) {
  return (SYMM_COLL_LL128_BYTES / 2 / (uint64_t)world) & ~(uint64_t)127;
}

/*
 * Block size and grid of the LL kernels, which wait on packets, not on
 * channels: `units` packets (LL) or lines (LL128), `per_thread` threads to
 * a unit (1, or 8 for LL128's lines).  Many small blocks, so that a
 * megabyte goes in one pass: 256 threads and up to 1024 blocks rather than
 * 512 threads and up to 128 blocks took LL128 at 1 MiB from 7.1 to 6.2-6.3
 * us, 2 MiB from 11.1 to 9.6-9.8 and 4 MiB from 17.5 to 16.1-16.6, LL alike,
 * and nothing changed beyond the noise (0.1-0.2 us) from 4 to 512 KiB (2 x
 * H200, 2 ranks, bench/tune-native.sh TUNE_SETTINGS, graph).  Blocks wait
 * only for the peers' blocks of the same index, so a grid that the GPU
 * runs in waves is slower, not stuck; and programmatic dependent launch
 * starts the next kernel only once every block of this one has started.
 * SYMM_COLL_LL_THREADS and SYMM_COLL_MAX_BLOCKS override both.
 */
#define NATIVE_COLL_LL_THREADS 256u
static unsigned native_coll_ll_launch(const native_coll_t *co, uint64_t units,
                                      unsigned per_thread, unsigned *threads) {
  *threads = co->ll_threads ? co->ll_threads : NATIVE_COLL_LL_THREADS;
  return native_coll_grid(units * per_thread, *threads, NATIVE_COLL_LL_MAX_BLOCKS);
}

/* All-reduces above this size that ask for LL or LL128 but do not fit
 * their areas run two-shot, smaller ones one-shot. */
#define NATIVE_COLL_ONE_SHOT_MAX ((uint64_t)1 << 20)
/* LL128 that cannot run (PCIe) runs LL up to here: auto's LL limit before
 * LL128 took over from 128 KiB, which was measured on NVLink only. */
#define NATIVE_COLL_LL_FALLBACK_MAX ((uint64_t)256 << 10)

/*
 * The all-reduce kernel for algorithm `algo` on `bytes` of data: the one
 * asked for where it can run, else its closest relative.  LL that does not
 * fit the LL area is LL128; LL128 runs only where every link delivers
 * 128-byte writes whole (co->ll128) and the lines fit its area, else LL
 * (up to 256 KiB), one-shot (to 1 MiB) or two-shot.  Depends on nothing
 * that differs between ranks, so every rank picks the same kernel.
 */
static int native_coll_allreduce_kernel(const native_coll_t *co, symm_algo_t algo, uint64_t bytes,
                                        int world) {
  /* Count 0 moves nothing but is still collective: one block exchanges the
   * headers and announces, so that a rank whose count differs gets
   * SYMM_ERR_MISMATCH, and the epoch advances with the peers'.  LL and
   * LL128 would look at no peer without packets: one-shot. */
  if (bytes == 0)
    return algo == SYMM_ALGO_TWO_SHOT ? SYMM_COLL_KERNEL_AR_TWO_SHOT : SYMM_COLL_KERNEL_AR_ONE_SHOT;
  /* LL packets carry 8 data bytes in 16. */
  const bool ll_fits = (bytes + 7) / 8 * 16 <= native_coll_ll_region(world);
  if (algo == SYMM_ALGO_TWO_SHOT) return SYMM_COLL_KERNEL_AR_TWO_SHOT;
  if (algo == SYMM_ALGO_LL) {
    if (ll_fits) return SYMM_COLL_KERNEL_AR_LL;
    algo = SYMM_ALGO_LL128;
  }
  if (algo == SYMM_ALGO_LL128) {
    if (co->ll128 && native_coll_ll128_lines(bytes) * 128 <= native_coll_ll128_region(world))
      return SYMM_COLL_KERNEL_AR_LL128;
    if (ll_fits && bytes <= NATIVE_COLL_LL_FALLBACK_MAX) return SYMM_COLL_KERNEL_AR_LL;
    if (bytes > NATIVE_COLL_ONE_SHOT_MAX) return SYMM_COLL_KERNEL_AR_TWO_SHOT;
  }
  return SYMM_COLL_KERNEL_AR_ONE_SHOT;
}

/* Scratch bytes for staging halves of `stage` bytes: the LL and LL128
 * areas, then two halves rounded to 256 bytes. */
static uint64_t native_coll_scratch_bytes(uint64_t stage) {
  return SYMM_COLL_STAGE_OFF + 2 * ((stage + 255) & ~(uint64_t)255);
}

/* Fills co->base, the parameters that only change with the scratch: every
 * rank's scratch data and pad pointers, the LL and staging layout, and the
 * flags' nonce (the same on every rank: they all reserved this scratch at
 * the same call).  Kept so that a call costs a copy, not a recomputation. */
static symm_result_t native_coll_describe_scratch(symm_comm_t *comm, native_coll_t *co,
                                                  const symm_tensor_t *scratch) {
  symm_coll_params_t *p = &co->base;
  memset(p, 0, sizeof *p);
  const int world = comm->size;
  void *const *data = NULL;
  SYMM_CHECK(symm_tensor_peer_ptrs(scratch, &data));
  for (int r = 0; r < world; r++) {
    void *pad = NULL;
    SYMM_CHECK(symm_tensor_signal_pad(scratch, r, &pad));
    p->peer_data[r] = (uint64_t)(uintptr_t)data[r];
    p->peer_pad[r] = (uint64_t)(uintptr_t)pad;
  }
  const uint64_t S = scratch->nbytes;
  if (S < native_coll_scratch_bytes(0))
    return symm_error(SYMM_ERR_INTERNAL, "native collective: scratch of %llu bytes is smaller "
                      "than the LL and LL128 areas", (unsigned long long)S);
  p->ll_region = native_coll_ll_region(world);
  p->ll128_region = native_coll_ll128_region(world);
  p->stage_half = ((S - SYMM_COLL_STAGE_OFF) / 2) & ~(uint64_t)255;
  p->err = co->err_dev;
  p->timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  /* The scratch's identity (its memory on every rank), not the time of the
   * first collective on it: ranks may rendezvous other tensors in between
   * in different orders relative to their (asynchronous) collectives. */
  uint64_t f[2] = {scratch->peer_sig, scratch->nbytes};
  uint64_t h = symm_hash64(f, sizeof f, symm_hash64(comm->prefix, strlen(comm->prefix), 7));
  p->nonce = (uint32_t)(h ^ (h >> 32));
  p->rank = comm->rank;
  p->world = world;
  p->channels = (int32_t)symm_coll_channels((unsigned)world);
  if (p->channels < 1)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native backend: no signal channels for %d ranks",
                      world);
  co->scratch = scratch;
  return SYMM_SUCCESS;
}

/* Two-shot (its reduced segments) and all-gather (its pieces) write
 * straight into the peers' recv when recv lies in a rendezvoused tensor of
 * this communicator: p->zc is a key
 * of the tensor and offset, and p->peer_recv every rank's mapping of recv.
 * The kernel uses them only if every rank announces the same key, so ranks
 * that pass ordinary memory (or another offset) still work, staged. */
static void native_coll_zero_copy(symm_comm_t *comm, const symm_coll_args_t *args,
                                  symm_coll_params_t *p) {
  const void *base;
  size_t len;
  symm_tensor_t *t;
  int rank;
  p->zc = 0;
  p->zc_key = 0;
  if (!symm_registry_find(args->recvbuf, &base, &len, &t, &rank)) return;
  if (t->comm != comm || !t->rendezvoused || rank != comm->rank || !t->peer_data) return;
  const uint64_t off = (uint64_t)((const char *)args->recvbuf - (const char *)base);
  if (off > t->nbytes || args->recv_bytes > t->nbytes - off) return;
  for (int r = 0; r < comm->size; r++)
    p->peer_recv[r] = (uint64_t)(uintptr_t)t->peer_data[r] + off;
  uint64_t f[2] = {t->peer_sig, off};
  uint64_t h = symm_hash64(f, sizeof f, 0x7a63ull);
  p->zc = (uint32_t)(h ^ (h >> 32)) | 1u;
  p->zc_key = h;
}

/*
 * The kernel (SYMM_COLL_KERNEL_*, -1 for an unknown collective) that runs
 * collective `coll` (SYMM_COLL_*; all-reduce with `algo`) on `count`
 * elements of es bytes, and the bytes of one staging half it uses (see
 * coll_kernels.cu for the layouts); *seg: two-shot's segment, one-shot's
 * region, in elements.  The one place that sizes staging, for the launch
 * and for symm_comm_scratch_bytes.
 */
static int native_coll_plan(const native_coll_t *co, int coll, symm_algo_t algo, uint64_t count,
                            uint64_t es, int world, uint64_t *seg, uint64_t *stage) {
  const uint64_t W = (uint64_t)world, V = 16 / es ? 16 / es : 1;
  *seg = 0;
  *stage = 0; /* LL and LL128 have areas of their own */
  switch (coll) {
    case SYMM_COLL_ALL_REDUCE: {
      const int kind = native_coll_allreduce_kernel(co, algo, count * es, world);
      if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT) {
        *seg = ((count + W - 1) / W + V - 1) / V * V;
        *stage = 2 * W * *seg * es;
      } else if (kind == SYMM_COLL_KERNEL_AR_ONE_SHOT) {
        *seg = (count + 63) / 64 * 64;
        *stage = W * *seg * es;
      }
      return kind;
    }
    case SYMM_COLL_REDUCE_SCATTER: *stage = W * count * es; return SYMM_COLL_KERNEL_REDUCE_SCATTER;
    case SYMM_COLL_ALL_GATHER: *stage = count * es; return SYMM_COLL_KERNEL_ALL_GATHER;
    case SYMM_COLL_BROADCAST: *stage = count * es; return SYMM_COLL_KERNEL_BROADCAST;
    case SYMM_COLL_ALL_TO_ALL: *stage = W * count * es; return SYMM_COLL_KERNEL_ALL_TO_ALL;
    default: return -1;
  }
}

/* Usable collectives of this communicator in *co, or why not. */
static symm_result_t native_coll_usable(symm_comm_t *comm, native_coll_t **co) {
  native_state_t *st = comm->backend_state;
  *co = st ? st->coll : NULL;
  if (!*co || !(*co)->ready)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native backend: GPU collectives unavailable: %s",
                      *co ? (*co)->why : "backend not started");
  if (comm->size > SYMM_COLL_MAX_WORLD)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native backend: GPU collectives support at most "
                      "%d ranks (this communicator has %d)", SYMM_COLL_MAX_WORLD, comm->size);
  return SYMM_SUCCESS;
}

/* The most any collective plans on buffers of at most max_bytes: every
 * kind, every dtype size, one- and two-shot (what auto and the fallbacks
 * resolve to; LL and LL128 stage nothing), with the count that fills the
 * larger buffer.  A staging half grows with the count, so that is the need. */
symm_result_t native_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes) {
  native_coll_t *co = NULL;
  SYMM_CHECK(native_coll_usable(comm, &co));
  const uint64_t W = (uint64_t)comm->size;
  /* Below this every product in native_coll_plan stays far from overflow. */
  if ((uint64_t)max_bytes > (uint64_t)INT64_MAX / (4 * W))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_scratch_bytes: %zu bytes overflow",
                      max_bytes);
  static const struct { int coll; symm_algo_t algo; bool per_rank; } calls[] = {
      {SYMM_COLL_ALL_REDUCE, SYMM_ALGO_ONE_SHOT, false},
      {SYMM_COLL_ALL_REDUCE, SYMM_ALGO_TWO_SHOT, false},
      {SYMM_COLL_BROADCAST, SYMM_ALGO_AUTO, false},
      {SYMM_COLL_REDUCE_SCATTER, SYMM_ALGO_AUTO, true}, /* send: world x count */
      {SYMM_COLL_ALL_GATHER, SYMM_ALGO_AUTO, true},     /* recv: world x count */
      {SYMM_COLL_ALL_TO_ALL, SYMM_ALGO_AUTO, true}};
  uint64_t most = 0;
  for (int dt = 0; dt < SYMM_DTYPE_COUNT_; dt++) {
    const uint64_t es = symm_dtype_size((symm_dtype_t)dt);
    for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
      uint64_t seg, stage;
      const uint64_t count = max_bytes / es / (calls[k].per_rank ? W : 1);
      native_coll_plan(co, calls[k].coll, calls[k].algo, count, es, comm->size, &seg, &stage);
      if (stage > most) most = stage;
    }
  }
  *bytes = (size_t)native_coll_scratch_bytes(most);
  return SYMM_SUCCESS;
}

/*
 * The parameters a launch starts from: the scratch's (co->base), on a
 * scratch with at least `stage` staging bytes per half.  The size depends
 * only on the arguments, so every rank grows the scratch (collectively) at
 * the same call; reserve it before capturing graphs.  Nothing is agreed
 * first (the kernels check the call), so a rank whose arguments differ so
 * that it need not grow never joins the growth: a timeout, which the
 * message explains.
 */
static symm_result_t native_coll_base(symm_comm_t *comm, native_coll_t *co, uint64_t stage,
                                      symm_coll_params_t *p) {
  symm_tensor_t *scratch = NULL;
  symm_result_t res = symm_comm_scratch(comm, native_coll_scratch_bytes(stage), &scratch);
  if (res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST)
    symm_error_context("ranks whose calls differ grow the scratch at different calls; "
                       "symm_comm_reserve_scratch up front makes that a mismatch");
  if (res != SYMM_SUCCESS) return res;
  if (co->scratch != scratch) SYMM_CHECK(native_coll_describe_scratch(comm, co, scratch));
  *p = co->base;
  if (p->stage_half < stage)
    return symm_error(SYMM_ERR_INTERNAL, "native collective: scratch of %zu bytes holds %llu "
                      "staging bytes, %llu needed", scratch->nbytes,
                      (unsigned long long)p->stage_half, (unsigned long long)stage);
  return SYMM_SUCCESS;
}

/* Launches collective kernel fn (`what` names it) in the GPU's context. */
static symm_result_t native_coll_run(native_state_t *st, native_coll_t *co, ncu_function fn,
                                     unsigned grid, unsigned threads, void *stream,
                                     symm_coll_params_t *p, const char *what) {
  ncu_context saved;
  SYMM_CHECK(native_ctx_enter(st, &saved));
  ncu_result cu = native_coll_launch(co, fn, grid, threads, stream, p);
  native_ctx_leave(st, saved);
  if (cu != NCU_SUCCESS)
    return native_cu_fail(cu, "cuLaunchKernel(%s collective, %u blocks of %u threads)", what,
                          grid, threads);
  return SYMM_SUCCESS;
}

symm_algo_t native_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes) {
  native_state_t *st = comm->backend_state;
  const native_coll_t *co = st ? st->coll : NULL;
  if (!co) return asked;
  switch (native_coll_allreduce_kernel(co, asked, bytes, comm->size)) {
    case SYMM_COLL_KERNEL_AR_LL: return SYMM_ALGO_LL;
    case SYMM_COLL_KERNEL_AR_LL128: return SYMM_ALGO_LL128;
    case SYMM_COLL_KERNEL_AR_TWO_SHOT: return SYMM_ALGO_TWO_SHOT;
    default: return SYMM_ALGO_ONE_SHOT;
  }
}

symm_result_t native_collective(symm_comm_t *comm, const symm_coll_args_t *args) {
  native_state_t *st = comm->backend_state;
  native_coll_t *co = NULL;
  SYMM_CHECK(native_coll_usable(comm, &co));
  const int world = comm->size, rank = comm->rank;
  const uint64_t es = symm_dtype_size(args->dtype);
  const uint64_t count = args->count;

  uint64_t seg = 0, stage = 0;
  int kind = native_coll_plan(co, args->kind, args->algo, count, es, world, &seg, &stage);
  if (kind < 0)
    return symm_error(SYMM_ERR_INTERNAL, "native collective: kind %d", (int)args->kind);
  int dti = native_coll_dtype_index(args->dtype);
  bool reducing = native_coll_reducing(kind);
  if (reducing && dti < 0) /* the core's argument checks refused it already */
    return symm_error(SYMM_ERR_INTERNAL, "native collective: dtype %s cannot be reduced",
                      symm_dtype_name(args->dtype));
  ncu_function fn = NULL;
  SYMM_CHECK(native_coll_function(co, kind, dti, (int)args->op, &fn));
  symm_coll_params_t p;
  SYMM_CHECK(native_coll_base(comm, co, stage, &p));
  const bool has_send = args->kind != SYMM_COLL_BROADCAST || rank == args->root;
  p.root = args->root;
  p.esize = (int32_t)es;
  p.kind = kind;
  p.send = has_send ? (uint64_t)(uintptr_t)args->sendbuf : 0;
  p.recv = (uint64_t)(uintptr_t)args->recvbuf;
  p.count = count;
  p.seg = seg;
  bool vec = aligned16(p.recv) && (!has_send || aligned16(p.send));
  if (kind == SYMM_COLL_KERNEL_REDUCE_SCATTER || kind == SYMM_COLL_KERNEL_ALL_TO_ALL ||
      kind == SYMM_COLL_KERNEL_ALL_GATHER)
    vec = vec && aligned16(count * es);
  p.vec = vec;
  unsigned grid, threads = SYMM_COLL_THREADS;
  switch (kind) {
    case SYMM_COLL_KERNEL_AR_LL: /* a packet per thread and pass */
      grid = native_coll_ll_launch(co, (count * es + 7) / 8, 1, &threads);
      break;
    case SYMM_COLL_KERNEL_AR_LL128: /* a line per 8 threads and pass */
      grid = native_coll_ll_launch(co, native_coll_ll128_lines(count * es), 8, &threads);
      break;
    case SYMM_COLL_KERNEL_AR_TWO_SHOT:
      grid = native_coll_grid(seg * es, 8192, native_coll_bw_blocks(kind, p.channels, seg * es));
      break;
    default:
      grid = native_coll_grid(count * es, 8192, native_coll_bw_blocks(kind, p.channels, 0));
      break;
  }
  if (co->max_blocks && grid > co->max_blocks) grid = co->max_blocks;
  if (grid < 1) grid = 1; /* count 0 */
  p.sig = native_coll_sig(args, kind, grid, threads);
  /* All-gather waits for every announce before it moves data when it may
   * write into the peers' recv: worth it from 1 MiB of output. */
  if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT ||
      (kind == SYMM_COLL_KERNEL_ALL_GATHER && args->recv_bytes >= ((uint64_t)1 << 20)))
    native_coll_zero_copy(comm, args, &p);

  return native_coll_run(st, co, fn, grid, threads, args->stream, &p,
                         native_coll_kernel_names[kind]);
}

/* A call that failed the core's argument checks on this rank still takes
 * part (ops->abstain): one block with a signature no valid call has meets
 * the peers, so that their call ends in SYMM_ERR_MISMATCH (and this rank's
 * device epoch stays in step with theirs) instead of pairing with this
 * rank's next call.  It moves no data and touches no buffer of the call;
 * its own kernel records the mismatch as well. */
symm_result_t native_abstain(symm_comm_t *comm, const symm_coll_args_t *args) {
  native_coll_t *co = NULL;
  SYMM_CHECK(native_coll_usable(comm, &co));
  ncu_function fn = NULL;
  SYMM_CHECK(native_coll_function(co, SYMM_COLL_KERNEL_ALL_GATHER, 0, 0, &fn));
  symm_coll_params_t p;
  SYMM_CHECK(native_coll_base(comm, co, 0, &p));
  p.kind = SYMM_COLL_KERNEL_ALL_GATHER;
  p.esize = 1;
  p.vec = 1;
  p.sig = SYMM_COLL_SIG_REFUSED;
  return native_coll_run(comm->backend_state, co, fn, 1, SYMM_COLL_THREADS, args->stream, &p,
                         "refused");
}

/* ---------------------------------------------------------- signals */

symm_result_t native_signal(symm_comm_t *comm, int op, const symm_tensor_t *tensor, int peer,
                            int channel, void *stream) {
  native_state_t *st = comm->backend_state;
  native_coll_t *co = st ? st->coll : NULL;
  if (!co || !co->ready)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native backend: stream-ordered signals need the "
                      "GPU kernels, which are unavailable: %s",
                      co ? co->why : "backend not started");
  if (comm->size > SYMM_COLL_MAX_WORLD)
    return symm_error(SYMM_ERR_UNSUPPORTED, "native backend: stream-ordered signals support at "
                      "most %d ranks (this communicator has %d)", SYMM_COLL_MAX_WORLD, comm->size);
  if (!co->signal_fn) {
    ncu_result cu = co->cd->cuModuleGetFunction(&co->signal_fn, co->module, "symm_signal_op");
    if (cu != NCU_SUCCESS) {
      co->signal_fn = NULL;
      return native_cu_fail(cu, "cuModuleGetFunction(symm_signal_op)");
    }
  }
  symm_signal_params_t p;
  memset(&p, 0, sizeof p);
  for (int r = 0; r < comm->size; r++) {
    void *pad = NULL;
    SYMM_CHECK(symm_tensor_signal_pad(tensor, r, &pad));
    p.pads[r] = (uint64_t)(uintptr_t)pad;
  }
  p.err = co->err_dev;
  p.timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  p.op = op;
  p.rank = comm->rank;
  p.world = comm->size;
  p.peer = peer;
  p.channel = channel;
  ncu_context saved;
  SYMM_CHECK(native_ctx_enter(st, &saved));
  ncu_result cu = native_coll_launch(co, co->signal_fn, 1, SYMM_SIGNAL_THREADS, stream, &p);
  native_ctx_leave(st, saved);
  if (cu != NCU_SUCCESS) return native_cu_fail(cu, "cuLaunchKernel(symm_signal_op)");
  return SYMM_SUCCESS;
}
