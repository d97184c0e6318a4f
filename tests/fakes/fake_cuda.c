/*
 * A stand-in for libcuda.so.1 that lets the native backend run on machines
 * without a GPU (SYMM_CUDA_LIB=.../libsymm-fakecuda.so).  "Device memory"
 * is host memory: cuMemCreate makes a memfd, cuMemMap maps it MAP_SHARED
 * into a PROT_NONE reservation, cuMemSetAccess makes it read-write, POSIX-fd
 * export is a dup of the memfd.  So the backend's whole protocol (export,
 * fd exchange, import, mapping, contiguous views, validation, teardown) runs
 * for real across processes, and the CPU can check the data.
 *
 * The fake is stricter than needed where the backend could go wrong:
 *  - only cuGetProcAddress_v2 is exported; every other entry point must be
 *    resolved through it;
 *  - resolving any cuMulticast* entry point aborts the process: symmem
 *    must never create NVLink multicast objects;
 *  - cuMemMap refuses a non-zero offset, unaligned or overlapping ranges,
 *    cuMemAddressFree a range that is still mapped; calls that need a
 *    context fail without a live current one;
 *  - fakecuda_stats() reports live handles, mappings, reservations and
 *    device allocations, for leak checks, and how many exports and imports
 *    of shareable handles were made (the costly calls of a rendezvous);
 *  - like the real driver, one handle may be mapped at several VAs at once
 *    (each cuMemMap is a MAP_SHARED view of the same memfd).
 *
 * Environment: FAKECUDA_DEVICES (default 2), FAKECUDA_NO_DEVICE=1 (cuInit
 * fails), FAKECUDA_FABRIC=fails|works|absent (default fails: the device
 * reports fabric support but exporting is refused, as without IMEX),
 * FAKECUDA_NO_VMM=1, FAKECUDA_NO_UNIFIED=1 (no unified addressing, so no CUDA IPC
 * either), FAKECUDA_GRANULARITY (bytes, default 2 MiB),
 * FAKECUDA_ACCESS_PER_MAPPING=1 (cuMemSetAccess refuses ranges that span
 * several mappings), FAKECUDA_P2P_ATOMICS=0 (peers report no native
 * atomics, as over PCIe), FAKECUDA_NO_KERNELS=1 (no module or launch entry
 * points: collectives unavailable), FAKECUDA_FIRST_DEVICE=k (this process
 * sees physical GPUs k, k + 1, ... as ordinals 0, 1, ...: their bus ids and
 * UUIDs, as CUDA_VISIBLE_DEVICES does; read at each call), FAKECUDA_NO_UUID=1
 * (cuDeviceGetUuid fails, as on some virtualised drivers),
 * FAKECUDA_BUSID_FULL=1 (cuDeviceGetPCIBusId fills the whole buffer with a
 * letter per GPU and no terminating NUL).
 *
 * CUDA IPC: cuMemAlloc memory is a file of /dev/shm made with O_TMPFILE
 * (nameless) and mapped MAP_SHARED.  cuIpcGetMemHandle links it under an
 * unguessable name, fakecuda-ipc-<32 random hex digits>, which the 64-byte
 * handle carries; cuIpcOpenMemHandle in another process opens that name and
 * maps the file, so the handle works with no fd passing and across PID and
 * user namespaces that share /dev/shm (as containers with a shared IPC
 * namespace do); cuMemFree unlinks the name.  The owner holds a shared
 * flock on the file while it lives, so the first cuInit of a later process
 * unlinks the names of owners that died (SIGKILL) without freeing: nothing
 * stays in /dev/shm.  Like the real driver, an open of the same handle
 * again returns the same address with one more reference, each open needs
 * a cuIpcCloseMemHandle, the only flag taken is
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, and the exporting process cannot open
 * its own handles.  fakecuda_stats counts live opens and linked names.
 * FAKECUDA_IPC_OPEN_FAILS=1 makes every open fail with
 * CUDA_ERROR_INVALID_HANDLE (read at each call, so one rank of a job can
 * set it); FAKECUDA_NO_IPC=1 makes cuIpcGetMemHandle fail with
 * CUDA_ERROR_NOT_SUPPORTED (as on drivers or platforms without IPC).
 *
 * Kernels: a module is a name table and a launch runs nothing; it is
 * recorded (fakecuda_launch_count / fakecuda_launch_get) with its kernel
 * name, grid, block and parameter block, so that CPU tests can check what
 * the backend asks the GPU to do.  One exception: the copy-engine
 * collectives' barrier (symm_signal_op with op SYMM_SIGNAL_OP_CE) runs on
 * the host when launched, as the kernel would (puts, waits, value checks,
 * timeout, the error record), since copies run at once too: together they
 * keep the protocol's order across processes, and the data arrives.  cuMemHostAlloc is calloc, its device
 * pointer the same address.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpu/cu_driver.h"
#include "fakecuda.h"

/* symm_result_t's codes the kernels record (SYMM_DEV_ERR_*). */
#define SYMM_DEV_MISMATCH_CODE 4u
#define SYMM_DEV_TIMEOUT_CODE 5u

#define FK_API __attribute__((visibility("default")))
#define FK_MAX_DEVICES 16

enum {
  FK_ERROR_INVALID_CONTEXT = 201,
  FK_ERROR_INVALID_HANDLE = 400,
  FK_ERROR_CONTEXT_IS_DESTROYED = 709,
};

/* Names of linked IPC files in /dev/shm: FK_IPC_PREFIX + 32 hex digits. */
#define FK_SHM_DIR "/dev/shm"
#define FK_IPC_PREFIX "fakecuda-ipc-"
#define FK_IPC_NAME_BYTES 48

/* ---------------------------------------------------------------- state */

typedef struct fk_handle {
  int fd;
  size_t size;
  int types;     /* requested handle types */
  int device;
  int refs;      /* handle references: create, import, retain */
  int maps;      /* live mappings */
  bool local;    /* created here (counts as used device memory) */
  struct fk_handle *next;
} fk_handle_t;

typedef struct fk_range {
  uintptr_t va;
  size_t size;
  fk_handle_t *h;   /* mappings only */
  int access;       /* mappings only */
  /* cuMemAlloc blocks: the file behind the block (-1: none), whether it
   * can be linked into /dev/shm (an O_TMPFILE there), its IPC name once
   * linked ("" before), and the device it was allocated on. */
  int fd;
  bool linkable;
  char ipc_name[FK_IPC_NAME_BYTES];
  int device;
  /* IPC opens of another process's block: the name and references. */
  int opens;
  struct fk_range *next;
} fk_range_t;

typedef struct fk_ctx {
  int device;
  int refs;
} fk_ctx_t;

static pthread_mutex_t fk_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fk_initialized;
static fk_handle_t *fk_handles;
static fk_range_t *fk_reservations, *fk_mappings, *fk_devallocs, *fk_ipc_opens;
static fk_ctx_t fk_ctxs[FK_MAX_DEVICES];
static __thread fk_ctx_t *fk_current;
static size_t fk_used[FK_MAX_DEVICES];
static const size_t fk_total = (size_t)16 << 30;
static long fk_exports, fk_imports; /* successful calls, cumulative */

static int fk_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static int fk_ndev(void) {
  int n = fk_env_int("FAKECUDA_DEVICES", 2);
  return n < 0 ? 0 : n > FK_MAX_DEVICES ? FK_MAX_DEVICES : n;
}

static size_t fk_gran(void) {
  const char *v = getenv("FAKECUDA_GRANULARITY");
  return v && *v ? (size_t)strtoull(v, NULL, 0) : (size_t)2 << 20;
}

static const char *fk_fabric_mode(void) {
  const char *v = getenv("FAKECUDA_FABRIC");
  return v && *v ? v : "fails";
}

static bool fk_valid_dev(int d) { return d >= 0 && d < fk_ndev(); }

/* Calls that need a live current context (as the real driver's do). */
static ncu_result fk_need_ctx(void) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (!fk_current) return FK_ERROR_INVALID_CONTEXT;
  if (fk_current->refs <= 0) return FK_ERROR_CONTEXT_IS_DESTROYED;
  return NCU_SUCCESS;
}

/* ---------------------------------------------------------------- errors */

static const struct {
  ncu_result code;
  const char *name, *text;
} fk_errors[] = {
    {NCU_SUCCESS, "CUDA_SUCCESS", "no error"},
    {NCU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {NCU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NCU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {NCU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {NCU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {FK_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {FK_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {NCU_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {FK_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {NCU_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {NCU_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static ncu_result fk_cuGetErrorName(ncu_result e, const char **s) {
  for (size_t i = 0; i < sizeof fk_errors / sizeof fk_errors[0]; i++)
    if (fk_errors[i].code == e) {
      *s = fk_errors[i].name;
      return NCU_SUCCESS;
    }
  *s = NULL;
  return NCU_ERROR_INVALID_VALUE;
}

static ncu_result fk_cuGetErrorString(ncu_result e, const char **s) {
  for (size_t i = 0; i < sizeof fk_errors / sizeof fk_errors[0]; i++)
    if (fk_errors[i].code == e) {
      *s = fk_errors[i].text;
      return NCU_SUCCESS;
    }
  *s = NULL;
  return NCU_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------- init, devices */

static void fk_ipc_sweep(void);

static ncu_result fk_cuInit(unsigned int flags) {
  if (flags) return NCU_ERROR_INVALID_VALUE;
  if (fk_env_int("FAKECUDA_NO_DEVICE", 0) || fk_ndev() == 0) return NCU_ERROR_NO_DEVICE;
  if (!fk_initialized) fk_ipc_sweep();
  fk_initialized = true;
  return NCU_SUCCESS;
}

static ncu_result fk_cuDriverGetVersion(int *v) {
  *v = 12080;
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetCount(int *n) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  *n = fk_ndev();
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGet(ncu_device *d, int ordinal) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (!fk_valid_dev(ordinal)) return NCU_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetName(char *name, int len, ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "Fake GPU %d", d);
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetAttribute(int *v, int attr, ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  bool fabric = strcmp(fk_fabric_mode(), "absent") != 0;
  switch (attr) {
    case NCU_DEV_ATTR_MULTIPROCESSOR_COUNT: *v = 132; break;
    case NCU_DEV_ATTR_PCI_BUS_ID: *v = 0x10 + d; break;
    case NCU_DEV_ATTR_PCI_DEVICE_ID: *v = 0; break;
    case NCU_DEV_ATTR_PCI_DOMAIN_ID: *v = 0; break;
    case NCU_DEV_ATTR_UNIFIED_ADDRESSING: *v = !fk_env_int("FAKECUDA_NO_UNIFIED", 0); break;
    case NCU_DEV_ATTR_CC_MAJOR: *v = 9; break;
    case NCU_DEV_ATTR_CC_MINOR: *v = 0; break;
    case NCU_DEV_ATTR_VMM_SUPPORTED: *v = !fk_env_int("FAKECUDA_NO_VMM", 0); break;
    case NCU_DEV_ATTR_POSIX_FD_SUPPORTED: *v = 1; break;
    case NCU_DEV_ATTR_GDR_WITH_VMM_SUPPORTED: *v = 0; break;
    case NCU_DEV_ATTR_FABRIC_SUPPORTED: *v = fabric; break;
    case NCU_DEV_ATTR_MULTICAST_SUPPORTED: *v = 1; break; /* like the H200s */
    default: *v = 0; break;
  }
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceTotalMem(size_t *bytes, ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  *bytes = fk_total;
  return NCU_SUCCESS;
}

/* Physical GPU of ordinal d in this process (FAKECUDA_FIRST_DEVICE). */
static int fk_physical(ncu_device d) { return d + fk_env_int("FAKECUDA_FIRST_DEVICE", 0); }

static ncu_result fk_cuDeviceGetPCIBusId(char *bus, int len, ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  if (fk_env_int("FAKECUDA_BUSID_FULL", 0) && len > 0)
    memset(bus, 'a' + fk_physical(d), (size_t)len);
  else
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + fk_physical(d));
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetByPCIBusId(ncu_device *d, const char *bus) {
  unsigned dom, b, dev, fn;
  if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dev, &fn) != 4) return NCU_ERROR_INVALID_VALUE;
  int ordinal = (int)b - 0x10 - fk_physical(0);
  if (!fk_valid_dev(ordinal)) return NCU_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetUuid(ncu_uuid *u, ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  if (fk_env_int("FAKECUDA_NO_UUID", 0)) return NCU_ERROR_NOT_SUPPORTED;
  memset(u, 0, sizeof *u);
  memcpy(u->bytes, "fakegpu", 7);
  u->bytes[15] = (unsigned char)fk_physical(d);
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceCanAccessPeer(int *can, ncu_device a, ncu_device b) {
  if (!fk_valid_dev(a) || !fk_valid_dev(b)) return NCU_ERROR_INVALID_DEVICE;
  *can = a != b;
  return NCU_SUCCESS;
}

static ncu_result fk_cuDeviceGetP2PAttribute(int *v, int attr, ncu_device a, ncu_device b) {
  if (!fk_valid_dev(a) || !fk_valid_dev(b) || a == b) return NCU_ERROR_INVALID_DEVICE;
  *v = attr == NCU_P2P_PERFORMANCE_RANK            ? 0
       : attr == NCU_P2P_NATIVE_ATOMIC_SUPPORTED ? fk_env_int("FAKECUDA_P2P_ATOMICS", 1)
                                                 : 1;
  return NCU_SUCCESS;
}

/* ------------------------------------------------------------- contexts */

static ncu_result fk_cuDevicePrimaryCtxRetain(ncu_context *ctx, ncu_device d) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_lock);
  fk_ctxs[d].device = d;
  fk_ctxs[d].refs++;
  pthread_mutex_unlock(&fk_lock);
  *ctx = (ncu_context)&fk_ctxs[d];
  return NCU_SUCCESS;
}

static ncu_result fk_cuDevicePrimaryCtxRelease(ncu_device d) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_lock);
  ncu_result res = fk_ctxs[d].refs > 0 ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
  if (fk_ctxs[d].refs > 0) fk_ctxs[d].refs--;
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuDevicePrimaryCtxGetState(ncu_device d, unsigned int *flags, int *active) {
  if (!fk_valid_dev(d)) return NCU_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = fk_ctxs[d].refs > 0;
  return NCU_SUCCESS;
}

static ncu_result fk_cuCtxGetCurrent(ncu_context *ctx) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  *ctx = (ncu_context)fk_current;
  return NCU_SUCCESS;
}

static ncu_result fk_cuCtxSetCurrent(ncu_context ctx) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  fk_ctx_t *c = (fk_ctx_t *)ctx;
  if (c && (c < fk_ctxs || c >= fk_ctxs + FK_MAX_DEVICES)) return FK_ERROR_INVALID_CONTEXT;
  if (c && c->refs <= 0) return FK_ERROR_CONTEXT_IS_DESTROYED;
  fk_current = c;
  return NCU_SUCCESS;
}

/* --------------------------------------------------------------- streams */

static int fk_streams;

static ncu_result fk_cuStreamCreate(ncu_stream *s, unsigned int flags) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  *s = (ncu_stream)malloc(1);
  __atomic_add_fetch(&fk_streams, 1, __ATOMIC_RELAXED);
  return NCU_SUCCESS;
}

static ncu_result fk_cuStreamDestroy(ncu_stream s) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (!s) return NCU_ERROR_INVALID_VALUE;
  free(s);
  __atomic_sub_fetch(&fk_streams, 1, __ATOMIC_RELAXED);
  return NCU_SUCCESS;
}

static ncu_result fk_cuStreamSynchronize(ncu_stream s) { return fk_need_ctx(); }

/* ---------------------------------------------------- ranges and handles */

static fk_range_t *fk_find(fk_range_t *list, uintptr_t p) {
  for (fk_range_t *r = list; r; r = r->next)
    if (p >= r->va && p < r->va + r->size) return r;
  return NULL;
}

static void fk_unlink(fk_range_t **list, fk_range_t *x) {
  for (fk_range_t **pp = list; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      return;
    }
}

static fk_range_t *fk_add(fk_range_t **list, uintptr_t va, size_t size) {
  fk_range_t *r = calloc(1, sizeof *r);
  r->va = va;
  r->size = size;
  r->next = *list;
  *list = r;
  return r;
}

static fk_handle_t *fk_handle_of(ncu_mem_handle id) {
  for (fk_handle_t *h = fk_handles; h; h = h->next)
    if ((ncu_mem_handle)(uintptr_t)h == id) return h;
  return NULL;
}

/* Physical memory goes once no handle and no mapping refer to it. */
static void fk_maybe_destroy(fk_handle_t *h) {
  if (h->refs > 0 || h->maps > 0) return;
  for (fk_handle_t **pp = &fk_handles; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
  if (h->local) fk_used[h->device] -= h->size;
  close(h->fd);
  free(h);
}

static fk_handle_t *fk_new_handle(int fd, size_t size, int types, int device, bool local) {
  fk_handle_t *h = calloc(1, sizeof *h);
  h->fd = fd;
  h->size = size;
  h->types = types;
  h->device = device;
  h->refs = 1;
  h->local = local;
  h->next = fk_handles;
  fk_handles = h;
  if (local) fk_used[device] += size;
  return h;
}

static bool fk_prop_ok(const ncu_alloc_prop *p) {
  return p && p->type == NCU_ALLOC_PINNED && p->location.type == NCU_LOCATION_DEVICE &&
         fk_valid_dev(p->location.id) &&
         (p->requested_handle_types & ~(NCU_HANDLE_POSIX_FD | NCU_HANDLE_FABRIC)) == 0 &&
         p->win32_metadata == NULL;
}

static ncu_result fk_cuMemGetAllocationGranularity(size_t *g, const ncu_alloc_prop *p, int opt) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (!fk_prop_ok(p) || (opt != NCU_GRANULARITY_MINIMUM && opt != NCU_GRANULARITY_RECOMMENDED))
    return NCU_ERROR_INVALID_VALUE;
  *g = fk_gran();
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemCreate(ncu_mem_handle *out, size_t size, const ncu_alloc_prop *p,
                                 unsigned long long flags) {
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (fk_env_int("FAKECUDA_NO_VMM", 0)) return NCU_ERROR_NOT_SUPPORTED;
  if (!fk_prop_ok(p) || flags || size == 0 || size % fk_gran()) return NCU_ERROR_INVALID_VALUE;
  if ((p->requested_handle_types & NCU_HANDLE_FABRIC) && !strcmp(fk_fabric_mode(), "absent"))
    return NCU_ERROR_NOT_SUPPORTED;
  char name[64];
  snprintf(name, sizeof name, "fakecuda-d%d-t%d", p->location.id, p->requested_handle_types);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return NCU_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return NCU_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&fk_lock);
  fk_handle_t *h = fk_new_handle(fd, size, p->requested_handle_types, p->location.id, true);
  pthread_mutex_unlock(&fk_lock);
  *out = (ncu_mem_handle)(uintptr_t)h;
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemRelease(ncu_mem_handle id) {
  pthread_mutex_lock(&fk_lock);
  fk_handle_t *h = fk_handle_of(id);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  if (h && h->refs > 0) {
    h->refs--;
    fk_maybe_destroy(h);
    res = NCU_SUCCESS;
  }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuMemAddressReserve(ncu_deviceptr *ptr, size_t size, size_t align,
                                         ncu_deviceptr hint, unsigned long long flags) {
  size_t g = fk_gran();
  if (!fk_initialized) return NCU_ERROR_NOT_INITIALIZED;
  if (!size || size % g || flags || (align & (align - 1))) return NCU_ERROR_INVALID_VALUE;
  if (align < g) align = g;
  void *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return NCU_ERROR_OUT_OF_MEMORY;
  uintptr_t start = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
  if (start > (uintptr_t)m) munmap(m, start - (uintptr_t)m);
  uintptr_t end = (uintptr_t)m + size + align;
  if (end > start + size) munmap((void *)(start + size), end - (start + size));
  pthread_mutex_lock(&fk_lock);
  fk_add(&fk_reservations, start, size);
  pthread_mutex_unlock(&fk_lock);
  *ptr = start;
  return NCU_SUCCESS;
}

static bool fk_any_mapping_in(uintptr_t va, size_t size) {
  for (fk_range_t *m = fk_mappings; m; m = m->next)
    if (m->va < va + size && va < m->va + m->size) return true;
  return false;
}

static ncu_result fk_cuMemAddressFree(ncu_deviceptr ptr, size_t size) {
  pthread_mutex_lock(&fk_lock);
  fk_range_t *r = fk_find(fk_reservations, (uintptr_t)ptr);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  if (r && r->va == ptr && r->size == size && !fk_any_mapping_in(r->va, r->size)) {
    munmap((void *)r->va, r->size);
    fk_unlink(&fk_reservations, r);
    free(r);
    res = NCU_SUCCESS;
  }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuMemMap(ncu_deviceptr ptr, size_t size, size_t offset, ncu_mem_handle id,
                              unsigned long long flags) {
  size_t g = fk_gran();
  /* The real driver's documentation: offset "currently must be zero". */
  if (offset != 0 || flags || !size || size % g || ptr % g) return NCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_lock);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  fk_handle_t *h = fk_handle_of(id);
  fk_range_t *r = fk_find(fk_reservations, (uintptr_t)ptr);
  if (h && h->refs > 0 && size <= h->size && r && ptr + size <= r->va + r->size &&
      !fk_any_mapping_in((uintptr_t)ptr, size)) {
    void *m = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0);
    if (m != MAP_FAILED) {
      fk_range_t *mp = fk_add(&fk_mappings, (uintptr_t)ptr, size);
      mp->h = h;
      h->maps++;
      res = NCU_SUCCESS;
    } else {
      res = NCU_ERROR_OUT_OF_MEMORY;
    }
  }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

/* Calls over [ptr, ptr + size) that must consist of whole mappings. */
static bool fk_whole_mappings(uintptr_t ptr, size_t size) {
  for (uintptr_t cur = ptr; cur < ptr + size;) {
    fk_range_t *m = fk_find(fk_mappings, cur);
    if (!m || m->va != cur || cur + m->size > ptr + size) return false;
    cur += m->size;
  }
  return true;
}

static ncu_result fk_cuMemUnmap(ncu_deviceptr ptr, size_t size) {
  pthread_mutex_lock(&fk_lock);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  if (size && fk_whole_mappings((uintptr_t)ptr, size)) {
    for (uintptr_t cur = (uintptr_t)ptr; cur < ptr + size;) {
      fk_range_t *m = fk_find(fk_mappings, cur);
      /* Back to a PROT_NONE reservation, as after a real unmap. */
      mmap((void *)m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
           MAP_NORESERVE, -1, 0);
      cur += m->size;
      fk_unlink(&fk_mappings, m);
      m->h->maps--;
      fk_maybe_destroy(m->h);
      free(m);
    }
    res = NCU_SUCCESS;
  }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuMemSetAccess(ncu_deviceptr ptr, size_t size, const ncu_access_desc *d,
                                    size_t count) {
  if (!d || count != 1 || d->location.type != NCU_LOCATION_DEVICE || !fk_valid_dev(d->location.id))
    return NCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_lock);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  fk_range_t *first = fk_find(fk_mappings, (uintptr_t)ptr);
  bool spans = first && first->va == ptr && first->size < size;
  if (spans && fk_env_int("FAKECUDA_ACCESS_PER_MAPPING", 0)) {
    res = NCU_ERROR_INVALID_VALUE; /* a driver that wants one call per mapping */
  } else if (size && fk_whole_mappings((uintptr_t)ptr, size)) {
    int prot = d->flags == NCU_ACCESS_READWRITE ? PROT_READ | PROT_WRITE
               : d->flags == 1                  ? PROT_READ
                                                : PROT_NONE;
    res = mprotect((void *)(uintptr_t)ptr, size, prot) == 0 ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
    for (uintptr_t cur = (uintptr_t)ptr; res == NCU_SUCCESS && cur < ptr + size;) {
      fk_range_t *m = fk_find(fk_mappings, cur);
      m->access = d->flags;
      cur += m->size;
    }
  }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuMemGetAccess(unsigned long long *flags, const ncu_location *loc,
                                    ncu_deviceptr ptr) {
  pthread_mutex_lock(&fk_lock);
  fk_range_t *m = fk_find(fk_mappings, (uintptr_t)ptr);
  if (m) *flags = (unsigned long long)m->access;
  pthread_mutex_unlock(&fk_lock);
  return m ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

/* Fabric handle of the fake: where to find the memfd of the exporter. */
typedef struct fk_fabric {
  char magic[8];
  int32_t pid, fd, device, types;
  uint64_t size;
} fk_fabric_t;

static ncu_result fk_cuMemExportToShareableHandle(void *out, ncu_mem_handle id, int type,
                                                  unsigned long long flags) {
  pthread_mutex_lock(&fk_lock);
  fk_handle_t *h = fk_handle_of(id);
  ncu_result res = NCU_ERROR_INVALID_VALUE;
  if (!h || flags) goto out;
  if (type == NCU_HANDLE_POSIX_FD && (h->types & NCU_HANDLE_POSIX_FD)) {
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    res = fd < 0 ? NCU_ERROR_OUT_OF_MEMORY : NCU_SUCCESS;
    if (fd >= 0) *(int *)out = fd;
  } else if (type == NCU_HANDLE_FABRIC && (h->types & NCU_HANDLE_FABRIC)) {
    if (strcmp(fk_fabric_mode(), "works") != 0) {
      res = NCU_ERROR_NOT_PERMITTED; /* as without an IMEX channel */
      goto out;
    }
    fk_fabric_t f;
    memset(&f, 0, sizeof f);
    memcpy(f.magic, "fkfabr", 7);
    f.pid = getpid();
    f.fd = h->fd;
    f.device = h->device;
    f.types = h->types;
    f.size = h->size;
    memset(out, 0, NCU_FABRIC_HANDLE_BYTES);
    memcpy(out, &f, sizeof f);
    res = NCU_SUCCESS;
  }
  if (res == NCU_SUCCESS) fk_exports++;
out:
  pthread_mutex_unlock(&fk_lock);
  return res;
}

static ncu_result fk_cuMemImportFromShareableHandle(ncu_mem_handle *out, void *os, int type) {
  int fd = -1, device = 0, types = NCU_HANDLE_POSIX_FD;
  size_t size = 0;
  if (type == NCU_HANDLE_POSIX_FD) {
    fd = fcntl((int)(intptr_t)os, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return NCU_ERROR_INVALID_VALUE;
    struct stat st;
    char link[128], target[256] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) target[n] = 0;
    if (fstat(fd, &st) != 0 || !strstr(target, "fakecuda-d") ||
        sscanf(strstr(target, "fakecuda-d"), "fakecuda-d%d-t%d", &device, &types) != 2) {
      close(fd);
      return NCU_ERROR_INVALID_VALUE;
    }
    size = (size_t)st.st_size;
  } else if (type == NCU_HANDLE_FABRIC) {
    fk_fabric_t f;
    memcpy(&f, os, sizeof f);
    if (memcmp(f.magic, "fkfabr", 7) != 0) return NCU_ERROR_INVALID_VALUE;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", f.pid, f.fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NCU_ERROR_INVALID_VALUE;
    device = f.device;
    types = f.types;
    size = f.size;
  } else {
    return NCU_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&fk_lock);
  fk_handle_t *h = fk_new_handle(fd, size, types, device, false);
  fk_imports++;
  pthread_mutex_unlock(&fk_lock);
  *out = (ncu_mem_handle)(uintptr_t)h;
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemRetainAllocationHandle(ncu_mem_handle *out, void *addr) {
  pthread_mutex_lock(&fk_lock);
  fk_range_t *m = fk_find(fk_mappings, (uintptr_t)addr);
  if (m) {
    m->h->refs++;
    *out = (ncu_mem_handle)(uintptr_t)m->h;
  }
  pthread_mutex_unlock(&fk_lock);
  return m ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

static ncu_result fk_cuMemGetAllocationPropertiesFromHandle(ncu_alloc_prop *p, ncu_mem_handle id) {
  pthread_mutex_lock(&fk_lock);
  fk_handle_t *h = fk_handle_of(id);
  if (h) {
    memset(p, 0, sizeof *p);
    p->type = NCU_ALLOC_PINNED;
    p->requested_handle_types = h->types;
    p->location.type = NCU_LOCATION_DEVICE;
    p->location.id = h->device;
  }
  pthread_mutex_unlock(&fk_lock);
  return h ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

static ncu_result fk_cuPointerGetAttribute(void *data, int attr, ncu_deviceptr ptr) {
  pthread_mutex_lock(&fk_lock);
  fk_range_t *m = fk_find(fk_mappings, (uintptr_t)ptr);
  fk_range_t *a = m ? NULL : fk_find(fk_devallocs, (uintptr_t)ptr);
  if (!m && !a) a = fk_find(fk_ipc_opens, (uintptr_t)ptr);
  fk_range_t *r = m ? m : a;
  ncu_result res = r ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
  if (r) switch (attr) {
      case NCU_PTR_ATTR_MEMORY_TYPE: *(unsigned int *)data = NCU_MEMORYTYPE_DEVICE; break;
      case NCU_PTR_ATTR_DEVICE_ORDINAL: *(int *)data = m ? m->h->device : a->device; break;
      case NCU_PTR_ATTR_RANGE_START: *(ncu_deviceptr *)data = r->va; break;
      case NCU_PTR_ATTR_RANGE_SIZE: *(size_t *)data = r->size; break;
      case NCU_PTR_ATTR_MAPPING_BASE: *(void **)data = (void *)r->va; break;
      case NCU_PTR_ATTR_MAPPING_SIZE: *(size_t *)data = r->size; break;
      case NCU_PTR_ATTR_MAPPED: *(int *)data = 1; break;
      default: res = NCU_ERROR_INVALID_VALUE; break;
    }
  pthread_mutex_unlock(&fk_lock);
  return res;
}

/* ------------------------------------------------ plain device memory */

/* The file behind a cuMemAlloc block: a nameless file of /dev/shm, which
 * cuIpcGetMemHandle can link under a name; a memfd (never shareable) where
 * /dev/shm takes no O_TMPFILE. */
static int fk_block_file(size_t bytes, bool *linkable) {
  int fd = open(FK_SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  *linkable = fd >= 0;
  if (fd < 0) fd = memfd_create("fakecuda-alloc", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static size_t fk_page_round(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

static ncu_result fk_cuMemAlloc(ncu_deviceptr *p, size_t bytes) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (!bytes) return NCU_ERROR_INVALID_VALUE;
  bool linkable = false;
  int fd = fk_block_file(fk_page_round(bytes), &linkable);
  if (fd < 0) return NCU_ERROR_OUT_OF_MEMORY;
  void *m = mmap(NULL, fk_page_round(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return NCU_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&fk_lock);
  fk_range_t *a = fk_add(&fk_devallocs, (uintptr_t)m, bytes);
  a->fd = fd;
  a->linkable = linkable;
  a->device = fk_current->device;
  fk_used[fk_current->device] += bytes;
  pthread_mutex_unlock(&fk_lock);
  *p = (ncu_deviceptr)(uintptr_t)m;
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemFree(ncu_deviceptr p) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  pthread_mutex_lock(&fk_lock);
  fk_range_t *a = fk_find(fk_devallocs, (uintptr_t)p);
  if (a && a->va == p) {
    fk_used[a->device] -= a->size;
    fk_unlink(&fk_devallocs, a);
    /* Importers keep what they mapped (the file lives while mapped); new
     * opens of the handle fail from here on. */
    if (a->ipc_name[0]) {
      char path[96];
      snprintf(path, sizeof path, FK_SHM_DIR "/%s", a->ipc_name);
      unlink(path);
    }
    munmap((void *)a->va, fk_page_round(a->size));
    close(a->fd);
    free(a);
  }
  pthread_mutex_unlock(&fk_lock);
  return a ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

/* --------------------------------------------------------------- CUDA IPC */

/* The fake's CUipcMemHandle: what an importer needs to find the block. */
typedef struct fk_ipc_wire {
  char magic[4];
  int32_t device;
  uint64_t size;
  char name[FK_IPC_NAME_BYTES];
} fk_ipc_wire_t;
_Static_assert(sizeof(fk_ipc_wire_t) == NCU_IPC_HANDLE_BYTES, "the fake's IPC handle layout");

/* Unlinks the IPC names whose owner is gone: the owner holds a shared
 * flock on its file from before the name exists until cuMemFree, so an
 * exclusive one succeeds only on an orphan. */
static void fk_ipc_sweep(void) {
  DIR *d = opendir(FK_SHM_DIR);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, FK_IPC_PREFIX, sizeof FK_IPC_PREFIX - 1) != 0) continue;
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dirfd(d), e->d_name, 0);
    close(fd);
  }
  if (d) closedir(d);
}

/* Gives block a its IPC name: locked first (fk_ipc_sweep), then linked. */
static ncu_result fk_ipc_link(fk_range_t *a) {
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return NCU_ERROR_OUT_OF_MEMORY;
  char name[FK_IPC_NAME_BYTES] = FK_IPC_PREFIX;
  for (size_t i = 0; i < sizeof rnd; i++)
    snprintf(name + strlen(name), sizeof name - strlen(name), "%02x", rnd[i]);
  char from[64], to[96];
  snprintf(from, sizeof from, "/proc/self/fd/%d", a->fd);
  snprintf(to, sizeof to, FK_SHM_DIR "/%s", name);
  if (flock(a->fd, LOCK_SH) != 0 || linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) != 0)
    return NCU_ERROR_OUT_OF_MEMORY;
  memcpy(a->ipc_name, name, sizeof name);
  return NCU_SUCCESS;
}

static ncu_result fk_cuIpcGetMemHandle(ncu_ipc_mem_handle *h, ncu_deviceptr p) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (!h) return NCU_ERROR_INVALID_VALUE;
  if (fk_env_int("FAKECUDA_NO_IPC", 0)) return NCU_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&fk_lock);
  fk_range_t *a = fk_find(fk_devallocs, (uintptr_t)p);
  /* Stricter than the driver: only the base of a block exports. */
  r = !a || a->va != p ? NCU_ERROR_INVALID_VALUE
      : !a->linkable   ? NCU_ERROR_NOT_SUPPORTED
      : !a->ipc_name[0] ? fk_ipc_link(a)
                        : NCU_SUCCESS;
  if (r == NCU_SUCCESS) {
    fk_ipc_wire_t w;
    memset(&w, 0, sizeof w);
    memcpy(w.magic, "fkip", 4);
    w.device = a->device;
    w.size = a->size;
    memcpy(w.name, a->ipc_name, sizeof w.name);
    memcpy(h->reserved, &w, sizeof w);
    fk_exports++;
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

static fk_range_t *fk_ipc_open_named(const char *name) {
  for (fk_range_t *o = fk_ipc_opens; o; o = o->next)
    if (strcmp(o->ipc_name, name) == 0) return o;
  return NULL;
}

static ncu_result fk_cuIpcOpenMemHandle(ncu_deviceptr *p, ncu_ipc_mem_handle h,
                                        unsigned int flags) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (!p || flags != NCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return NCU_ERROR_INVALID_VALUE;
  if (fk_env_int("FAKECUDA_IPC_OPEN_FAILS", 0)) return FK_ERROR_INVALID_HANDLE;
  fk_ipc_wire_t w;
  memcpy(&w, h.reserved, sizeof w);
  w.name[sizeof w.name - 1] = 0;
  if (memcmp(w.magic, "fkip", 4) != 0 || strncmp(w.name, FK_IPC_PREFIX, sizeof FK_IPC_PREFIX - 1))
    return FK_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&fk_lock);
  for (fk_range_t *a = fk_devallocs; a; a = a->next)
    if (strcmp(a->ipc_name, w.name) == 0) r = FK_ERROR_INVALID_CONTEXT; /* our own export */
  fk_range_t *o = r ? NULL : fk_ipc_open_named(w.name);
  if (o) {
    o->opens++;
  } else if (!r) {
    char path[96];
    snprintf(path, sizeof path, FK_SHM_DIR "/%s", w.name);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    void *m = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size >= w.size)
      m = mmap(NULL, fk_page_round(w.size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) {
      r = FK_ERROR_INVALID_HANDLE; /* freed by its owner, or never made */
    } else {
      o = fk_add(&fk_ipc_opens, (uintptr_t)m, w.size);
      o->fd = -1;
      o->device = w.device;
      o->opens = 1;
      memcpy(o->ipc_name, w.name, sizeof o->ipc_name);
      fk_imports++;
    }
  }
  if (o) *p = o->va;
  pthread_mutex_unlock(&fk_lock);
  return r;
}

static ncu_result fk_cuIpcCloseMemHandle(ncu_deviceptr p) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  pthread_mutex_lock(&fk_lock);
  fk_range_t *o = fk_find(fk_ipc_opens, (uintptr_t)p);
  r = o && o->va == p ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
  if (r == NCU_SUCCESS && --o->opens == 0) {
    munmap((void *)o->va, fk_page_round(o->size));
    fk_unlink(&fk_ipc_opens, o);
    free(o);
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

static bool fk_is_device_range(uintptr_t p, size_t n) {
  fk_range_t *r = fk_find(fk_mappings, p);
  if (!r) r = fk_find(fk_devallocs, p);
  if (!r) r = fk_find(fk_ipc_opens, p);
  /* A range over several back-to-back mappings (a contiguous view) is fine
   * as long as each piece is device memory. */
  for (uintptr_t cur = p; r && cur < p + n;) {
    cur = r->va + r->size;
    if (cur >= p + n) return true;
    r = fk_find(fk_mappings, cur);
  }
  return r != NULL;
}

/* The check every stream write below makes first: a context is current,
 * and [dst, dst + n) is device memory (under the lock, since the tables
 * change as other threads map and free). */
static ncu_result fk_check_device_write(bool args_ok, ncu_deviceptr dst, size_t n) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  pthread_mutex_lock(&fk_lock);
  bool ok = args_ok && fk_is_device_range((uintptr_t)dst, n);
  pthread_mutex_unlock(&fk_lock);
  return ok ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

static ncu_result fk_cuMemcpyHtoDAsync(ncu_deviceptr dst, const void *src, size_t n,
                                       ncu_stream s) {
  ncu_result r = fk_check_device_write(s != NULL, dst, n);
  if (r) return r;
  memcpy((void *)(uintptr_t)dst, src, n);
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemsetD8Async(ncu_deviceptr dst, unsigned char v, size_t n, ncu_stream s) {
  ncu_result r = fk_check_device_write(s != NULL, dst, n);
  if (r) return r;
  memset((void *)(uintptr_t)dst, v, n);
  return NCU_SUCCESS;
}

/* The caller's stream may be any, the legacy default (NULL) too: the fake
 * runs everything at once, in call order. */
static ncu_result fk_cuMemsetD32Async(ncu_deviceptr dst, unsigned int v, size_t n, ncu_stream s) {
  (void)s;
  ncu_result r = fk_check_device_write(dst % 4 == 0 && n <= SIZE_MAX / 4, dst, n * 4);
  if (r) return r;
  uint32_t *w = (uint32_t *)(uintptr_t)dst;
  for (size_t i = 0; i < n; i++) w[i] = v;
  return NCU_SUCCESS;
}

static ncu_result fk_cuStreamWriteValue32(ncu_stream s, ncu_deviceptr addr, uint32_t v,
                                          unsigned int flags) {
  (void)s;
  ncu_result r = fk_check_device_write(addr % 4 == 0 && flags == 0, addr, 4);
  if (r) return r;
  atomic_thread_fence(memory_order_release); /* the driver's fence before the write */
  atomic_store_explicit((_Atomic uint32_t *)(uintptr_t)addr, v, memory_order_relaxed);
  return NCU_SUCCESS;
}

/* -------------------------------------------------------------- kernels */

enum { FK_MAX_LAUNCHES = 256, FK_MAX_FUNCTIONS = 128 };
static fakecuda_launch_t fk_launches[FK_MAX_LAUNCHES]; /* ring */
static long fk_nlaunches;
static char fk_function_names[FK_MAX_FUNCTIONS][96];
static int fk_nfunctions;
static int fk_module_token;

static char fk_module_image[8]; /* the loaded image's first bytes */

/* Any image loads, except some that tests write into a SYMM_COLL_KERNELS
 * file: one starting "BAD!" is refused as the driver refuses a corrupt
 * image; "SKEW", "SKWS" and "SKWV" load but carry a coll parameter block,
 * a signal parameter block or an ABI version of another size (built from
 * another coll_abi.h); "OLD!" has no ABI markers at all. */
static ncu_result fk_cuModuleLoadData(ncu_module *m, const void *image) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (!m || !image) return NCU_ERROR_INVALID_VALUE;
  if (memcmp(image, "BAD!", 4) == 0) return NCU_ERROR_INVALID_IMAGE;
  pthread_mutex_lock(&fk_lock);
  memcpy(fk_module_image, image, sizeof fk_module_image);
  pthread_mutex_unlock(&fk_lock);
  *m = (ncu_module)&fk_module_token;
  return NCU_SUCCESS;
}

/* The kernels' ABI arrays (coll_kernels.cu), sized as the library's unless
 * the image says otherwise (above). */
static ncu_result fk_cuModuleGetGlobal(ncu_deviceptr *p, size_t *bytes, ncu_module m,
                                       const char *name) {
  if (!p || !bytes || !name || m != (ncu_module)&fk_module_token) return NCU_ERROR_INVALID_VALUE;
  static unsigned char abi[sizeof(symm_coll_params_t) + 8];
  pthread_mutex_lock(&fk_lock);
  char tag[5] = {0};
  memcpy(tag, fk_module_image, 4);
  pthread_mutex_unlock(&fk_lock);
  if (strcmp(tag, "OLD!") == 0) return NCU_ERROR_NOT_FOUND;
  if (strcmp(name, "symm_coll_abi_params") == 0)
    *bytes = sizeof(symm_coll_params_t) + (strcmp(tag, "SKEW") == 0 ? 8 : 0);
  else if (strcmp(name, "symm_coll_abi_signal") == 0)
    *bytes = sizeof(symm_signal_params_t) + (strcmp(tag, "SKWS") == 0 ? 8 : 0);
  else if (strcmp(name, "symm_coll_abi_version") == 0)
    *bytes = SYMM_COLL_ABI_VERSION + (strcmp(tag, "SKWV") == 0 ? 1 : 0);
  else
    return NCU_ERROR_NOT_FOUND;
  *p = (ncu_deviceptr)(uintptr_t)abi;
  return NCU_SUCCESS;
}

/* The first bytes of the image loaded last (tests: which file was used). */
FK_API void fakecuda_module_image(char out[8]) {
  pthread_mutex_lock(&fk_lock);
  memcpy(out, fk_module_image, sizeof fk_module_image);
  pthread_mutex_unlock(&fk_lock);
}

static ncu_result fk_cuModuleUnload(ncu_module m) {
  return m == (ncu_module)&fk_module_token ? NCU_SUCCESS : NCU_ERROR_INVALID_VALUE;
}

/* A function handle is 1 + its index in the name table. */
static ncu_result fk_cuModuleGetFunction(ncu_function *fn, ncu_module m, const char *name) {
  if (!fn || !name || m != (ncu_module)&fk_module_token) return NCU_ERROR_INVALID_VALUE;
  if (strncmp(name, "symm_coll_", 10) != 0 && strcmp(name, "symm_signal_op") != 0)
    return NCU_ERROR_NOT_FOUND;
  pthread_mutex_lock(&fk_lock);
  int i = 0;
  while (i < fk_nfunctions && strcmp(fk_function_names[i], name) != 0) i++;
  if (i == fk_nfunctions && i < FK_MAX_FUNCTIONS)
    snprintf(fk_function_names[fk_nfunctions++], sizeof fk_function_names[0], "%s", name);
  pthread_mutex_unlock(&fk_lock);
  if (i >= FK_MAX_FUNCTIONS) return NCU_ERROR_OUT_OF_MEMORY;
  *fn = (ncu_function)(uintptr_t)(i + 1);
  return NCU_SUCCESS;
}

/* The error record's fields, as the kernel records them. */
static void fk_ce_fail(const symm_signal_params_t *a, uint32_t code, int peer) {
  volatile symm_coll_error_t *e = (volatile symm_coll_error_t *)(uintptr_t)a->err;
  if (!e) return;
  if (e->code) {
    e->more = code;
    return;
  }
  e->peer = (uint32_t)peer;
  e->kind = SYMM_COLL_KERNEL_CE;
  atomic_thread_fence(memory_order_seq_cst);
  e->code = code;
}

static uint64_t fk_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* SYMM_SIGNAL_OP_CE on the host: every put (waiting for the slot to be
 * consumed), then every wait, the value compared; the kernel's threads do
 * the same per peer at once. */
static void fk_ce_barrier(const symm_signal_params_t *a) {
  const uint64_t deadline = fk_now_ns() + a->timeout_ns;
  const struct timespec nap = {0, 20000};
  for (int t = 0; t < a->world; t++) {
    if (t == a->rank) continue;
    _Atomic uint32_t *slot = (_Atomic uint32_t *)(uintptr_t)a->pads[t] + a->rank;
    uint32_t zero = 0;
    while (!atomic_compare_exchange_strong(slot, &zero, a->put_value[t])) {
      zero = 0;
      if (fk_now_ns() > deadline) {
        fk_ce_fail(a, SYMM_DEV_TIMEOUT_CODE, t);
        return;
      }
      nanosleep(&nap, NULL);
    }
  }
  for (int t = 0; t < a->world; t++) {
    if (t == a->rank) continue;
    _Atomic uint32_t *slot = (_Atomic uint32_t *)(uintptr_t)a->pads[a->rank] + t;
    uint32_t v;
    while ((v = atomic_load(slot)) == 0) {
      if (fk_now_ns() > deadline) {
        fk_ce_fail(a, SYMM_DEV_TIMEOUT_CODE, t);
        return;
      }
      nanosleep(&nap, NULL);
    }
    atomic_store(slot, 0u);
    if (v != a->want_value[t]) fk_ce_fail(a, SYMM_DEV_MISMATCH_CODE, t);
  }
}

static ncu_result fk_launch(ncu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, void **params, void **extra, int pdl) {
  ncu_result r = fk_need_ctx();
  if (r) return r;
  int i = (int)(uintptr_t)fn - 1;
  if (i < 0 || i >= fk_nfunctions || !params || !params[0] || extra || gx == 0 || gy != 1 ||
      gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1)
    return NCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_lock);
  fakecuda_launch_t *l = &fk_launches[fk_nlaunches++ % FK_MAX_LAUNCHES];
  snprintf(l->name, sizeof l->name, "%s", fk_function_names[i]);
  l->grid = gx;
  l->block = bx;
  l->pdl = pdl;
  /* Each kernel takes one parameter block; its size follows from the name. */
  l->param_bytes = strcmp(l->name, "symm_signal_op") == 0 ? sizeof(symm_signal_params_t)
                                                          : sizeof(symm_coll_params_t);
  memcpy(l->params, params[0], l->param_bytes);
  const bool ce = l->param_bytes == sizeof(symm_signal_params_t) &&
                  ((const symm_signal_params_t *)params[0])->op == SYMM_SIGNAL_OP_CE;
  pthread_mutex_unlock(&fk_lock);
  if (ce) fk_ce_barrier((const symm_signal_params_t *)params[0]);
  return NCU_SUCCESS;
}

/* A copy between any two addresses (unified addressing), run at once and
 * recorded in the launch log, in order with the launches, as a pseudo
 * launch "cuMemcpyAsync" whose parameters are {dst, src, bytes}: tests see
 * a put's copy before its signal kernel.  FAKECUDA_COPY_FAILS=1: refused. */
static ncu_result fk_cuMemcpyAsync(ncu_deviceptr dst, ncu_deviceptr src, size_t n, ncu_stream s) {
  (void)s;
  ncu_result r = fk_need_ctx();
  if (r) return r;
  if (fk_env_int("FAKECUDA_COPY_FAILS", 0) || (n && (!dst || !src)))
    return NCU_ERROR_INVALID_VALUE;
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  pthread_mutex_lock(&fk_lock);
  fakecuda_launch_t *l = &fk_launches[fk_nlaunches++ % FK_MAX_LAUNCHES];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "cuMemcpyAsync");
  const uint64_t args[3] = {(uint64_t)dst, (uint64_t)src, (uint64_t)n};
  l->param_bytes = sizeof args;
  memcpy(l->params, args, sizeof args);
  pthread_mutex_unlock(&fk_lock);
  return NCU_SUCCESS;
}

/* FAKECUDA_LAUNCH_FAILS=1: plain launches fail as with a bad argument. */
static ncu_result fk_cuLaunchKernel(ncu_function fn, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                    ncu_stream stream, void **params, void **extra) {
  (void)stream, (void)shared;
  if (fk_env_int("FAKECUDA_LAUNCH_FAILS", 0)) return NCU_ERROR_INVALID_VALUE;
  return fk_launch(fn, gx, gy, gz, bx, by, bz, params, extra, 0);
}

/* Accepts only the attribute symmem sets; FAKECUDA_NO_LAUNCH_EX=1 hides the
 * entry point (a driver without it), FAKECUDA_LAUNCH_EX_REFUSES=1 refuses
 * every attribute (a driver that does not know it). */
static ncu_result fk_cuLaunchKernelEx(const ncu_launch_config *cfg, ncu_function fn,
                                      void **params, void **extra) {
  if (!cfg || (cfg->num_attrs && !cfg->attrs)) return NCU_ERROR_INVALID_VALUE;
  if (cfg->num_attrs && fk_env_int("FAKECUDA_LAUNCH_EX_REFUSES", 0)) return NCU_ERROR_INVALID_VALUE;
  int pdl = 0;
  for (unsigned i = 0; i < cfg->num_attrs; i++) {
    if (cfg->attrs[i].id != NCU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION)
      return NCU_ERROR_INVALID_VALUE;
    pdl = cfg->attrs[i].value.programmatic_stream_serialization != 0;
  }
  return fk_launch(fn, cfg->gx, cfg->gy, cfg->gz, cfg->bx, cfg->by, cfg->bz, params, extra, pdl);
}

/* The PTX version of every kernel: FAKECUDA_PTX_VERSION, default 90. */
static ncu_result fk_cuFuncGetAttribute(int *v, int attr, ncu_function fn) {
  int i = (int)(uintptr_t)fn - 1;
  if (!v || i < 0 || i >= fk_nfunctions) return NCU_ERROR_INVALID_VALUE;
  if (attr != NCU_FUNC_ATTR_PTX_VERSION) return NCU_ERROR_NOT_SUPPORTED;
  *v = fk_env_int("FAKECUDA_PTX_VERSION", 90);
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  if (!p || !bytes) return NCU_ERROR_INVALID_VALUE;
  *p = calloc(1, bytes);
  return *p ? NCU_SUCCESS : NCU_ERROR_OUT_OF_MEMORY;
}

static ncu_result fk_cuMemHostGetDevicePointer(ncu_deviceptr *d, void *p, unsigned flags) {
  if (!d || !p || flags) return NCU_ERROR_INVALID_VALUE;
  *d = (ncu_deviceptr)(uintptr_t)p;
  return NCU_SUCCESS;
}

static ncu_result fk_cuMemFreeHost(void *p) {
  free(p);
  return NCU_SUCCESS;
}

FK_API long fakecuda_launch_count(void) {
  pthread_mutex_lock(&fk_lock);
  long n = fk_nlaunches;
  pthread_mutex_unlock(&fk_lock);
  return n;
}

/* Launch number i (0-based, counting every launch of the process); false
 * once it has left the ring. */
FK_API bool fakecuda_launch_get(long i, fakecuda_launch_t *out) {
  pthread_mutex_lock(&fk_lock);
  bool ok = i >= 0 && i < fk_nlaunches && fk_nlaunches - i <= FK_MAX_LAUNCHES;
  if (ok) *out = fk_launches[i % FK_MAX_LAUNCHES];
  pthread_mutex_unlock(&fk_lock);
  return ok;
}

/* ------------------------------------------------------- proc addresses */

typedef struct {
  const char *name;
  void *fn;
} fk_entry_t;

static const fk_entry_t fk_table[] = {
#define FK_ENTRY(name, params) {#name, (void *)fk_##name},
    SYMM_CU_DRIVER_FUNCTIONS(FK_ENTRY)
#undef FK_ENTRY
};

static const fk_entry_t fk_kernel_table[] = {
#define FK_ENTRY(name, params) {#name, (void *)fk_##name},
    SYMM_CU_COLL_DRIVER_FUNCTIONS(FK_ENTRY)
#undef FK_ENTRY
    {"cuLaunchKernelEx", (void *)fk_cuLaunchKernelEx},
};

static void *fk_lookup(const fk_entry_t *table, size_t n, const char *symbol) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(table[i].name, symbol) == 0) return table[i].fn;
  return NULL;
}

FK_API ncu_result cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                      unsigned long long flags, int *status) {
  if (!symbol || !pfn) return NCU_ERROR_INVALID_VALUE;
  *pfn = NULL;
  if (strncmp(symbol, "cuMulticast", 11) == 0) {
    fprintf(stderr, "fakecuda: %s resolved although multicast must stay off; aborting\n",
            symbol);
    abort();
  }
  if (version < 12000) {
    if (status) *status = NCU_PROC_VERSION_TOO_LOW;
    return NCU_ERROR_NOT_FOUND;
  }
  /* The collectives' entry points can be hidden as a driver without them. */
  bool hidden = fk_env_int("FAKECUDA_NO_KERNELS", 0) ||
                (strcmp(symbol, "cuLaunchKernelEx") == 0 && fk_env_int("FAKECUDA_NO_LAUNCH_EX", 0));
  *pfn = fk_lookup(fk_table, sizeof fk_table / sizeof fk_table[0], symbol);
  if (!*pfn && !hidden)
    *pfn = fk_lookup(fk_kernel_table, sizeof fk_kernel_table / sizeof fk_kernel_table[0], symbol);
  if (status) *status = *pfn ? NCU_PROC_FOUND : NCU_PROC_NOT_FOUND;
  return *pfn ? NCU_SUCCESS : NCU_ERROR_NOT_FOUND;
}

FK_API void fakecuda_stats(fakecuda_stats_t *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_lock(&fk_lock);
  for (fk_handle_t *h = fk_handles; h; h = h->next) s->handles++;
  for (fk_range_t *r = fk_mappings; r; r = r->next) s->mappings++;
  for (fk_range_t *r = fk_reservations; r; r = r->next) s->reservations++;
  for (fk_range_t *r = fk_devallocs; r; r = r->next) {
    s->devallocs++;
    s->ipc_names += r->ipc_name[0] != 0;
  }
  for (fk_range_t *r = fk_ipc_opens; r; r = r->next) s->ipc_opens += r->opens;
  for (int d = 0; d < FK_MAX_DEVICES; d++) s->contexts += fk_ctxs[d].refs;
  s->exports = fk_exports;
  s->imports = fk_imports;
  pthread_mutex_unlock(&fk_lock);
  s->streams = __atomic_load_n(&fk_streams, __ATOMIC_RELAXED);
}
