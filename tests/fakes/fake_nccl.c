/*
 * A stand-in for libnccl.so.2 that lets the nccl backend run on machines
 * without a GPU (SYMM_NCCL_LIB=.../libsymm-fakenccl.so), over the fake CUDA
 * driver (fake_cuda.c, SYMM_CUDA_LIB), whose "device memory" is host
 * memory.  It implements the entry points the backend uses, for real across
 * processes:
 *  - ncclGetUniqueId makes the communicator's shared segment (a memfd; the
 *    id names the creating process and fd, which the others open through
 *    /proc), ncclCommInitRank[Config] joins it; a config with blocking = 0
 *    answers ncclInProgress and ncclCommGetAsyncError reports when every
 *    rank joined, as NCCL's non-blocking communicators do;
 *  - ncclCommSplit is collective over the parent: each rank publishes its
 *    color and key in the parent's segment, and the split ends once every
 *    rank of the parent has (a rank that does not call it keeps the others
 *    waiting); the first member of each group by key makes the group's
 *    segment, its members join it ranked by key, then parent rank, and
 *    NCCL_SPLIT_NOCOLOR joins none.  On a non-blocking parent it answers
 *    ncclInProgress, ncclCommGetAsyncError(parent) reports its end, and the
 *    new communicator is written then, as NCCL does; ncclCommCount and
 *    ncclCommUserRank tell its size and rank;
 *  - ncclMemAlloc is cuMemCreate + map of the fake driver, so the GPU engine
 *    can zero and check it like any device memory;
 *  - ncclCommWindowRegister is collective: each rank publishes its memory's
 *    POSIX fd in the segment (an ncclMemAlloc block's, or the physical
 *    allocation under any other VMM mapping, which it retains for the
 *    window's life, as NCCL does with user buffers; memory that is not
 *    VMM fails with ncclUnhandledCudaError, a window off a 4 KiB boundary
 *    of its allocation with ncclInvalidArgument), imports and maps every
 *    peer's, then waits
 *    until every rank mapped (in progress on a non-blocking communicator,
 *    without any timeout of its own: a lost peer hangs it, as in NCCL);
 *    ncclGetPeerDevicePointer gives those mappings;
 *  - the collectives compute for real on the host, through per-rank staging
 *    areas in the segment, synchronously; sends and receives in a group run
 *    as one exchange (the pattern of an all-to-all).
 * Strict where the backend could go wrong: a communicator made while
 * NCCL_NVLS_ENABLE is not 0 is refused; a config without NCCL's magic, or
 * one older than 2.27's layout, is refused.
 *
 * Environment: FAKENCCL_VERSION (ncclGetVersion's code, default 22902;
 * below 22902 there is no ncclGetPeerDevicePointer, below 22800 no
 * ncclAlltoAll, below 22700 no windows), FAKENCCL_VERSION_IF=s=code[,...]
 * (the code of a copy whose file path contains s), FAKENCCL_MISSING=sym[,sym...]
 * (dlsym finds none of them), FAKENCCL_NULL_WINDOW=1 (registration
 * succeeds without a window, as on a communicator without symmetric
 * support), FAKENCCL_INIT_FAIL_RANK=r (rank r's init fails),
 * FAKENCCL_UNREACHABLE=r (rank r and the others get no pointers to each
 * other), FAKENCCL_EXIT_IN_REGISTER=r[:n] (rank r exits inside its n-th
 * registration, after publishing its memory: a peer lost in a collective
 * NCCL call), FAKENCCL_STALL_REGISTER=r[:n] (rank r's n-th registration
 * never finishes: nobody completes it), FAKENCCL_SPLIT_FAIL_RANK=r (rank r's
 * ncclCommSplit fails without publishing: on a non-blocking parent through
 * ncclCommGetAsyncError, as a failed split reports, else at once; its
 * peers wait for it; r:late: it fails at its end, once its peers have
 * their new communicators), FAKENCCL_TIMEOUT_MS (blocking waits, default 30000).
 * ncclCommSplit came with 2.18: FAKENCCL_VERSION below 21800, or
 * FAKENCCL_MISSING=ncclCommSplit, plays an NCCL without it.
 *
 * Entry points are GNU indirect functions, so that dlsym of one that is
 * hidden (version, FAKENCCL_MISSING) returns NULL, as for a library that
 * lacks it; the fake never calls its own exported names.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backends/nccl/nccl_lib.h"
#include "gpu/cu_driver.h"
#include "fakenccl.h"

#define FN_API __attribute__((visibility("default")))
#define FN_MAX_RANKS 16
#define FN_SLOTS 4                       /* registrations in flight: a ring */
#define FN_STAGE ((size_t)8 << 20)       /* staging bytes per rank */
#define FN_MAGIC 0x464e434cu

enum { FN_OK = 0, FN_ESYS = 2, FN_EINVAL = 4, FN_EUSAGE = 5, FN_EREMOTE = 6, FN_INPROGRESS = 7 };

/* ---------------------------------------------------------------- shared */

typedef struct {
  _Atomic uint64_t seq; /* registration published, 0: none yet */
  int32_t pid, fd;
  uint64_t size;        /* the allocation's bytes, which peers map */
  uint64_t offset;      /* where the window starts in it */
} fn_pub_t;

/* One rank's part in its communicator's n-th ncclCommSplit. */
typedef struct {
  _Atomic uint64_t seq; /* the split published, 0: none yet */
  int32_t color, key, pid;
  int32_t fd;           /* a group's first rank: its new segment (an fd of pid) */
  _Atomic uint64_t made; /* the split whose fd is set */
} fn_split_pub_t;

typedef struct {
  uint32_t magic;
  int32_t nranks;
  _Atomic int32_t pids[FN_MAX_RANKS];      /* joined ranks' processes */
  /* Splits alternate between two rows: a rank starts its split n + 2
   * only once every rank has published n + 1, hence finished n. */
  fn_split_pub_t split[2][FN_MAX_RANKS];
  fn_pub_t pub[FN_SLOTS][FN_MAX_RANKS];
  _Atomic uint64_t mapped[FN_SLOTS][FN_MAX_RANKS];
  _Atomic uint64_t coll_in[FN_MAX_RANKS], coll_out[FN_MAX_RANKS];
} fn_seg_t;

#define FN_SEG_BYTES (((sizeof(fn_seg_t) + 4095) & ~(size_t)4095) + FN_MAX_RANKS * FN_STAGE)
static char *fn_stage(fn_seg_t *s, int r) {
  return (char *)s + ((sizeof(fn_seg_t) + 4095) & ~(size_t)4095) + (size_t)r * FN_STAGE;
}

typedef struct {
  char magic[8];
  int32_t pid, fd;
} fn_id_t;

/* ---------------------------------------------------------------- local */

typedef struct fn_alloc {
  uintptr_t va;
  size_t size;
  ncu_mem_handle h;
  int fd; /* exported, kept while windows may be imported */
  struct fn_alloc *next;
} fn_alloc_t;

struct fn_comm;

/* A split in progress on this rank (ncclCommSplit). */
typedef struct fn_split {
  uint64_t seq;
  int color, key;
  bool blocking;          /* the new communicator's */
  bool failed;            /* FAKENCCL_SPLIT_FAIL_RANK on a non-blocking parent */
  bool fail_late;         /* FAKENCCL_SPLIT_FAIL_RANK=r:late */
  struct fn_comm *child;  /* joined, until every member has */
  void **out;             /* the caller's, written when done */
} fn_split_t;

typedef struct fn_window {
  struct fn_comm *comm;
  uint64_t seq;
  int slot;
  void *local;
  size_t size;
  uintptr_t peer[FN_MAX_RANKS];      /* each rank's window start, mapped here */
  uintptr_t peer_map[FN_MAX_RANKS];  /* the peer's whole allocation, mapped here */
  size_t peer_size[FN_MAX_RANKS];
  ncu_mem_handle peer_h[FN_MAX_RANKS];
  /* A window on memory not from ncclMemAlloc (the user's VMM memory): the
   * physical allocation's handle NCCL retains, and its exported fd. */
  bool user;
  ncu_mem_handle user_h;
  int user_fd;
} fn_window_t;

typedef struct fn_comm {
  fn_seg_t *seg;
  int seg_fd, rank, nranks;
  bool blocking, joined;
  uint64_t windows, colls;
  fn_window_t *pending;       /* a registration in progress */
  fn_window_t **pending_out;
  bool stalled;               /* FAKENCCL_STALL_REGISTER */
  int async;                  /* an error of a non-blocking operation */
  uint64_t splits;            /* ncclCommSplit calls */
  fn_split_t *split;          /* one in progress */
  struct { const void *buf; void *rbuf; size_t bytes; int peer; bool send; } ops[2 * FN_MAX_RANKS];
  int nops;
} fn_comm_t;

static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
static fn_alloc_t *fn_allocs;
static fakenccl_stats_t fn_stats;
static __thread char fn_last[256];
static __thread int fn_group_depth;
static __thread fn_comm_t *fn_group_comm;

static int fn_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

/* ncclGetVersion's code: FAKENCCL_VERSION_IF=substr=code[,...] gives the
 * code of the first substr this copy's file path contains (copies of the
 * fake in several places play several NCCLs), else FAKENCCL_VERSION. */
static int fn_version(void) {
  const char *m = getenv("FAKENCCL_VERSION_IF");
  Dl_info info;
  if (m && *m && dladdr((void *)&fn_version, &info) && info.dli_fname) {
    for (const char *p = m; *p;) {
      size_t n = strcspn(p, ","), k = strcspn(p, "=");
      char sub[256];
      if (k < n && k < sizeof sub) {
        memcpy(sub, p, k);
        sub[k] = 0;
        if (strstr(info.dli_fname, sub)) return atoi(p + k + 1);
      }
      p += n + (p[n] == ',');
    }
  }
  return fn_env_int("FAKENCCL_VERSION", 22902);
}

static int fn_fail(int code, const char *msg) {
  snprintf(fn_last, sizeof fn_last, "%s", msg);
  return code;
}

static uint64_t fn_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A switch "RANK:N": this rank's N-th window registration (N 1 if absent). */
static bool fn_switch_at(const char *name, int rank, uint64_t seq) {
  const char *v = getenv(name);
  if (!v || !*v) return false;
  int r = -1, n = 1;
  if (sscanf(v, "%d:%d", &r, &n) < 1) return false;
  return r == rank && (uint64_t)n == seq;
}

static bool fn_pid_gone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/* Blocking waits: until done(arg), a dead peer or FAKENCCL_TIMEOUT_MS. */
static int fn_wait(fn_comm_t *c, bool (*done)(fn_comm_t *, void *), void *arg) {
  uint64_t end = fn_now_ms() + (uint64_t)fn_env_int("FAKENCCL_TIMEOUT_MS", 30000);
  while (!done(c, arg)) {
    for (int r = 0; r < c->nranks; r++)
      if (fn_pid_gone(atomic_load(&c->seg->pids[r]))) return fn_fail(FN_EREMOTE, "a peer exited");
    if (fn_now_ms() > end) return fn_fail(FN_ESYS, "fake NCCL: timed out waiting for peers");
    usleep(200);
  }
  return FN_OK;
}

/* ---------------------------------------------------------------- driver */

typedef ncu_result (*fn_gpa_t)(const char *, void **, int, unsigned long long, int *);
static struct {
  bool ok;
#define FN_DRV(name, params) ncu_result(*name) params;
  SYMM_CU_DRIVER_FUNCTIONS(FN_DRV)
#undef FN_DRV
} fn_drv;

/* The fake driver this process loaded (SYMM_CUDA_LIB). */
static bool fn_driver(void) {
  if (fn_drv.ok) return true;
  const char *path = getenv("SYMM_CUDA_LIB");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  fn_gpa_t gpa = lib ? (fn_gpa_t)dlsym(lib, "cuGetProcAddress_v2") : NULL;
  if (!gpa) return false;
#define FN_DRV(name, params) gpa(#name, (void **)&fn_drv.name, 12000, 0, NULL);
  SYMM_CU_DRIVER_FUNCTIONS(FN_DRV)
#undef FN_DRV
  fn_drv.ok = true;
  return true;
}

static size_t fn_gran(void) {
  const char *v = getenv("FAKECUDA_GRANULARITY");
  return v && *v ? (size_t)strtoull(v, NULL, 0) : (size_t)2 << 20;
}

/* Reserves and maps handle h of `size` bytes read-write. */
static int fn_map(ncu_mem_handle h, size_t size, uintptr_t *va) {
  ncu_deviceptr p = 0;
  if (fn_drv.cuMemAddressReserve(&p, size, 0, 0, 0) != NCU_SUCCESS) return FN_ESYS;
  if (fn_drv.cuMemMap(p, size, 0, h, 0) != NCU_SUCCESS) {
    fn_drv.cuMemAddressFree(p, size);
    return FN_ESYS;
  }
  ncu_access_desc acc = {{NCU_LOCATION_DEVICE, 0}, NCU_ACCESS_READWRITE};
  if (fn_drv.cuMemSetAccess(p, size, &acc, 1) != NCU_SUCCESS) {
    fn_drv.cuMemUnmap(p, size);
    fn_drv.cuMemAddressFree(p, size);
    return FN_ESYS;
  }
  *va = (uintptr_t)p;
  return FN_OK;
}

static void fn_unmap(uintptr_t va, size_t size) {
  fn_drv.cuMemUnmap(va, size);
  fn_drv.cuMemAddressFree(va, size);
}

/* ------------------------------------------------------------ the calls */

static int fn_ncclGetVersion(int *v) {
  if (!v) return FN_EINVAL;
  *v = fn_version();
  return FN_OK;
}

static const char *fn_ncclGetErrorString(int r) {
  static const char *const s[] = {"no error", "unhandled cuda error", "unhandled system error",
                                  "internal error", "invalid argument", "invalid usage",
                                  "remote process exited or there was a network error",
                                  "NCCL operation in progress", "timeout"};
  return r >= 0 && r < 9 ? s[r] : "unknown result code";
}

static const char *fn_ncclGetLastError(void *comm) {
  (void)comm;
  return fn_last;
}

/* A communicator's shared segment, named by this process and an fd. */
static int fn_new_segment(fn_id_t *f) {
  int fd = memfd_create("fakenccl-comm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)FN_SEG_BYTES) != 0) {
    if (fd >= 0) close(fd);
    return fn_fail(FN_ESYS, "fake NCCL: cannot make the shared segment");
  }
  *f = (fn_id_t){.magic = "fakencl", .pid = getpid(), .fd = fd};
  return FN_OK;
}

static int fn_ncclGetUniqueId(symm_nccl_unique_id_t *id) {
  pthread_mutex_lock(&fn_lock);
  fn_stats.unique_ids++;
  pthread_mutex_unlock(&fn_lock);
  fn_id_t f;
  int res = fn_new_segment(&f);
  if (res != FN_OK) return res;
  memset(id, 0, sizeof *id);
  memcpy(id->bytes, &f, sizeof f);
  return FN_OK;
}

static bool fn_all_joined(fn_comm_t *c, void *arg) {
  (void)arg;
  for (int r = 0; r < c->nranks; r++)
    if (!atomic_load(&c->seg->pids[r])) return false;
  return true;
}

static void fn_comm_free(fn_comm_t *c) {
  if (c->seg) munmap(c->seg, FN_SEG_BYTES);
  if (c->seg_fd >= 0) close(c->seg_fd);
  free(c->pending);
  if (c->split && c->split->child) fn_comm_free(c->split->child);
  free(c->split);
  free(c);
  pthread_mutex_lock(&fn_lock);
  fn_stats.live_comms--;
  pthread_mutex_unlock(&fn_lock);
}

static bool fn_nvls_off(void) {
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  return nvls && strcmp(nvls, "0") == 0;
}

/* Joins the communicator of segment f as `rank` of n: in *out at once,
 * complete once every rank joined (fn_all_joined). */
static int fn_attach(fn_comm_t **out, int n, const fn_id_t *f, int rank, bool blocking) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)f->pid, (int)f->fd);
  /* The id's creator hands its fd to the communicator (one id, one comm). */
  int fd = f->pid == getpid() ? f->fd : open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return fn_fail(FN_ESYS, "fake NCCL: cannot open the unique id's segment");
  fn_comm_t *c = calloc(1, sizeof *c);
  c->seg_fd = fd;
  c->seg = mmap(NULL, FN_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  c->rank = rank;
  c->nranks = n;
  c->blocking = blocking;
  pthread_mutex_lock(&fn_lock);
  fn_stats.live_comms++;
  fn_stats.nonblocking += !blocking;
  pthread_mutex_unlock(&fn_lock);
  if (c->seg == MAP_FAILED) {
    c->seg = NULL;
    fn_comm_free(c);
    return fn_fail(FN_ESYS, "fake NCCL: cannot map the segment");
  }
  if (rank == 0) {
    c->seg->magic = FN_MAGIC;
    c->seg->nranks = n;
  }
  atomic_store(&c->seg->pids[rank], getpid());
  *out = c;
  return FN_OK;
}

static int fn_init(fn_comm_t **out, int n, symm_nccl_unique_id_t id, int rank, bool blocking) {
  *out = NULL;
  if (!fn_nvls_off())
    return fn_fail(FN_EUSAGE, "fake NCCL: NCCL_NVLS_ENABLE must be 0 (NVLS stays off)");
  if (n < 1 || n > FN_MAX_RANKS || rank < 0 || rank >= n) return fn_fail(FN_EINVAL, "bad rank");
  if (fn_env_int("FAKENCCL_INIT_FAIL_RANK", -1) == rank)
    return fn_fail(FN_ESYS, "fake NCCL: init fails on this rank (FAKENCCL_INIT_FAIL_RANK)");
  fn_id_t f;
  memcpy(&f, id.bytes, sizeof f);
  if (memcmp(f.magic, "fakencl", 8) != 0) return fn_fail(FN_EINVAL, "not a fake NCCL unique id");
  int res = fn_attach(out, n, &f, rank, blocking);
  if (res != FN_OK) return res;
  fn_comm_t *c = *out;
  if (!blocking) return fn_all_joined(c, NULL) ? FN_OK : FN_INPROGRESS;
  res = fn_wait(c, fn_all_joined, NULL);
  if (res != FN_OK) {
    fn_comm_free(c);
    *out = NULL;
  }
  return res;
}

static int fn_ncclCommInitRank(void **comm, int n, symm_nccl_unique_id_t id, int rank) {
  pthread_mutex_lock(&fn_lock);
  fn_stats.inits_plain++;
  pthread_mutex_unlock(&fn_lock);
  return fn_init((fn_comm_t **)comm, n, id, rank, true);
}

static int fn_ncclCommInitRankConfig(void **comm, int n, symm_nccl_unique_id_t id, int rank,
                                     symm_nccl_config_t *cfg) {
  pthread_mutex_lock(&fn_lock);
  fn_stats.inits_config++;
  pthread_mutex_unlock(&fn_lock);
  if (cfg && (cfg->magic != SYMM_NCCL_CONFIG_MAGIC || cfg->size < sizeof *cfg ||
              cfg->version < 22700))
    return fn_fail(FN_EINVAL, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
  return fn_init((fn_comm_t **)comm, n, id, rank, !cfg || cfg->blocking != 0);
}

static void fn_window_free(fn_window_t *w);

static int fn_ncclCommDestroy(void *comm) {
  if (!comm) return FN_EINVAL;
  fn_comm_free(comm);
  return FN_OK;
}

static int fn_ncclCommAbort(void *comm) {
  pthread_mutex_lock(&fn_lock);
  fn_stats.aborts++;
  pthread_mutex_unlock(&fn_lock);
  fn_comm_t *c = comm;
  if (c && c->pending) {
    fn_window_free(c->pending);
    c->pending = NULL;
  }
  return comm ? fn_ncclCommDestroy(comm) : FN_OK;
}

/* ------------------------------------------------------------- memory */

static int fn_ncclMemAlloc(void **ptr, size_t size) {
  if (!ptr || !size) return fn_fail(FN_EINVAL, "ncclMemAlloc: bad argument");
  if (!fn_driver()) return fn_fail(FN_ESYS, "fake NCCL needs the fake CUDA driver (SYMM_CUDA_LIB)");
  fn_alloc_t *a = calloc(1, sizeof *a);
  a->size = (size + fn_gran() - 1) / fn_gran() * fn_gran();
  a->fd = -1;
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = NCU_HANDLE_POSIX_FD;
  prop.location.type = NCU_LOCATION_DEVICE;
  if (fn_drv.cuMemCreate(&a->h, a->size, &prop, 0) != NCU_SUCCESS ||
      fn_map(a->h, a->size, &a->va) != FN_OK) {
    free(a);
    return fn_fail(FN_ESYS, "fake NCCL: device memory allocation failed");
  }
  pthread_mutex_lock(&fn_lock);
  a->next = fn_allocs;
  fn_allocs = a;
  fn_stats.live_allocs++;
  pthread_mutex_unlock(&fn_lock);
  *ptr = (void *)a->va;
  return FN_OK;
}

static fn_alloc_t *fn_alloc_of(const void *p, bool unlink) {
  pthread_mutex_lock(&fn_lock);
  fn_alloc_t *a = NULL;
  for (fn_alloc_t **pp = &fn_allocs; *pp; pp = &(*pp)->next)
    if ((uintptr_t)p >= (*pp)->va && (uintptr_t)p < (*pp)->va + (*pp)->size) {
      a = *pp;
      if (unlink) *pp = a->next, fn_stats.live_allocs--;
      break;
    }
  pthread_mutex_unlock(&fn_lock);
  return a;
}

static int fn_ncclMemFree(void *ptr) {
  fn_alloc_t *a = fn_alloc_of(ptr, true);
  if (!a || a->va != (uintptr_t)ptr) return fn_fail(FN_EINVAL, "ncclMemFree: not ncclMemAlloc's");
  fn_unmap(a->va, a->size);
  fn_drv.cuMemRelease(a->h);
  if (a->fd >= 0) close(a->fd);
  free(a);
  return FN_OK;
}

/* ------------------------------------------------------------ windows */

/* Whether this rank gets a pointer to rank `peer` (FAKENCCL_UNREACHABLE). */
static bool fn_reaches(const fn_comm_t *c, int peer) {
  int u = fn_env_int("FAKENCCL_UNREACHABLE", -1);
  return u < 0 || peer == c->rank || (c->rank == u) == (peer == u);
}

static void fn_window_free(fn_window_t *w) {
  for (int r = 0; r < w->comm->nranks; r++)
    if (w->peer_map[r] && r != w->comm->rank) {
      fn_unmap(w->peer_map[r], w->peer_size[r]);
      fn_drv.cuMemRelease(w->peer_h[r]);
    }
  if (w->user) {
    if (w->user_fd >= 0) close(w->user_fd);
    fn_drv.cuMemRelease(w->user_h);
  }
  free(w);
}

/* Imports and maps every published peer's memory, once all published. */
static bool fn_import_all(fn_comm_t *c, fn_window_t *w) {
  for (int r = 0; r < c->nranks; r++)
    if (atomic_load(&c->seg->pub[w->slot][r].seq) != w->seq) return false;
  for (int r = 0; r < c->nranks; r++) {
    fn_pub_t *p = &c->seg->pub[w->slot][r];
    if (r == c->rank || !fn_reaches(c, r) || w->peer[r]) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)p->pid, (int)p->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ncu_mem_handle h;
    bool ok = fd >= 0 && fn_drv.cuMemImportFromShareableHandle(
                             &h, (void *)(intptr_t)fd, NCU_HANDLE_POSIX_FD) == NCU_SUCCESS;
    if (fd >= 0) close(fd);
    if (!ok || fn_map(h, p->size, &w->peer_map[r]) != FN_OK) {
      c->async = fn_fail(FN_ESYS, "fake NCCL: cannot map a peer's window");
      return false;
    }
    w->peer_h[r] = h;
    w->peer_size[r] = p->size;
    w->peer[r] = w->peer_map[r] + p->offset;
  }
  atomic_store(&c->seg->mapped[w->slot][c->rank], w->seq);
  return true;
}

static bool fn_all_mapped(fn_comm_t *c, fn_window_t *w) {
  for (int r = 0; r < c->nranks; r++)
    if (atomic_load(&c->seg->mapped[w->slot][r]) != w->seq) return false;
  return true;
}

/* Moves the pending registration on; FN_OK once done. */
static int fn_progress(fn_comm_t *c) {
  fn_window_t *w = c->pending;
  if (!w) return FN_OK;
  if (c->async) return c->async;
  if (c->stalled) return FN_INPROGRESS;
  if (!w->peer[c->rank]) {
    if (!fn_import_all(c, w)) return c->async ? c->async : FN_INPROGRESS;
    w->peer[c->rank] = (uintptr_t)w->local;
  }
  if (!fn_all_mapped(c, w)) return FN_INPROGRESS;
  *c->pending_out = w;
  c->pending = NULL;
  pthread_mutex_lock(&fn_lock);
  fn_stats.registrations++;
  fn_stats.live_windows++;
  fn_stats.user_windows += w->user;
  fn_stats.live_user_windows += w->user;
  pthread_mutex_unlock(&fn_lock);
  return FN_OK;
}

static bool fn_progress_done(fn_comm_t *c, void *arg) {
  (void)arg;
  int r = fn_progress(c);
  return r != FN_INPROGRESS;
}

/* The memory under a window, as NCCL checks it: an ncclMemAlloc block
 * (its exported fd, kept with the block), else any VMM mapping of the
 * fake driver (the user's: its handle retained and exported for the
 * window's life), the window 4 KiB aligned in it and inside it.  Memory
 * that is not VMM fails in the driver call, as NCCL's cuMem calls do. */
static int fn_window_memory(void *buf, size_t size, int flags, fn_window_t *w, int *fd,
                            uint64_t *span, uint64_t *offset) {
  if (size % 4096 || !(flags & 1))
    return fn_fail(FN_EINVAL, "fake NCCL: a window is whole 4 KiB pages, NCCL_WIN_COLL_SYMMETRIC");
  const ncu_deviceptr p = (ncu_deviceptr)(uintptr_t)buf;
  fn_alloc_t *a = fn_alloc_of(buf, false);
  ncu_deviceptr start = 0;
  size_t bytes = 0;
  w->user_fd = -1;
  if (a) {
    start = a->va, bytes = a->size;
  } else if (fn_drv.cuMemRetainAllocationHandle(&w->user_h, buf) != NCU_SUCCESS) {
    return fn_fail(1, "fake NCCL: cuMemRetainAllocationHandle failed: the buffer is not VMM "
                   "memory (ncclUnhandledCudaError)");
  } else {
    w->user = true;
    fn_drv.cuPointerGetAttribute(&start, NCU_PTR_ATTR_RANGE_START, p);
    fn_drv.cuPointerGetAttribute(&bytes, NCU_PTR_ATTR_RANGE_SIZE, p);
  }
  int res = FN_OK;
  if ((p - start) % 4096 != 0)
    res = fn_fail(FN_EINVAL, "fake NCCL: Window address must be suitably aligned");
  else if (p - start + size > bytes)
    res = fn_fail(FN_EINVAL, "fake NCCL: the window runs past its allocation");
  else if (a && a->fd < 0 &&
           fn_drv.cuMemExportToShareableHandle(&a->fd, a->h, NCU_HANDLE_POSIX_FD, 0) != NCU_SUCCESS)
    res = fn_fail(FN_ESYS, "fake NCCL: export failed");
  else if (!a && fn_drv.cuMemExportToShareableHandle(&w->user_fd, w->user_h, NCU_HANDLE_POSIX_FD,
                                                     0) != NCU_SUCCESS)
    res = fn_fail(FN_ESYS, "fake NCCL: the user's memory cannot be exported as a POSIX fd");
  if (res != FN_OK) {
    if (w->user) fn_drv.cuMemRelease(w->user_h);
    return res;
  }
  *fd = a ? a->fd : w->user_fd;
  *span = bytes;
  *offset = p - start;
  return FN_OK;
}

static int fn_ncclCommWindowRegister(void *comm, void *buf, size_t size, void **win, int flags) {
  fn_comm_t *c = comm;
  if (!c || !win || !buf || !size) return fn_fail(FN_EINVAL, "ncclCommWindowRegister: bad argument");
  *win = NULL;
  if (c->pending) return fn_fail(FN_EUSAGE, "a registration is in progress");
  if (fn_env_int("FAKENCCL_NULL_WINDOW", 0)) return FN_OK; /* no symmetric support */
  fn_window_t *w = calloc(1, sizeof *w);
  int fd = -1;
  uint64_t span = 0, offset = 0;
  int res = fn_window_memory(buf, size, flags, w, &fd, &span, &offset);
  if (res != FN_OK) {
    free(w);
    return res;
  }
  w->comm = c;
  w->seq = ++c->windows;
  w->slot = (int)(w->seq % FN_SLOTS);
  w->local = buf;
  w->size = size;
  c->pending = w;
  c->pending_out = (fn_window_t **)win;
  if (fn_switch_at("FAKENCCL_STALL_REGISTER", c->rank, w->seq)) {
    c->stalled = true; /* never publishes: its peers and itself wait */
    return c->blocking ? fn_wait(c, fn_progress_done, NULL) : FN_INPROGRESS;
  }
  fn_pub_t *p = &c->seg->pub[w->slot][c->rank];
  p->pid = getpid();
  p->fd = fd;
  p->size = span;
  p->offset = offset;
  atomic_store(&p->seq, w->seq);
  if (fn_switch_at("FAKENCCL_EXIT_IN_REGISTER", c->rank, w->seq)) _exit(3);
  if (!c->blocking) return fn_progress(c);
  res = fn_wait(c, fn_progress_done, NULL);
  return res != FN_OK ? res : c->async ? c->async : FN_OK;
}

static int fn_ncclCommWindowDeregister(void *comm, void *win) {
  if (!comm || !win) return FN_OK;
  const bool user = ((fn_window_t *)win)->user;
  fn_window_free(win);
  pthread_mutex_lock(&fn_lock);
  fn_stats.live_windows--;
  fn_stats.deregistrations++;
  fn_stats.live_user_windows -= user;
  fn_stats.user_deregistrations += user;
  pthread_mutex_unlock(&fn_lock);
  return FN_OK;
}

static int fn_ncclGetPeerDevicePointer(void *win, size_t offset, int peer, void **out) {
  fn_window_t *w = win;
  if (!w || !out || peer < 0 || peer >= w->comm->nranks) return FN_EINVAL;
  *out = w->peer[peer] ? (void *)(w->peer[peer] + offset) : NULL;
  return FN_OK;
}

/* ------------------------------------------------------------- splits */

/* Rank r's record of split seq in c's segment. */
static fn_split_pub_t *fn_split_pub(fn_comm_t *c, uint64_t seq, int r) {
  return &c->seg->split[seq % 2][r];
}

/* Whether parent rank a comes before rank b in their group: by key, then
 * by parent rank (NCCL's order). */
static bool fn_split_before(fn_comm_t *c, uint64_t seq, int a, int b) {
  const fn_split_pub_t *pa = fn_split_pub(c, seq, a), *pb = fn_split_pub(c, seq, b);
  return pa->key < pb->key || (pa->key == pb->key && a < b);
}

/* Joins this rank's group: its first rank (by key) makes the group's
 * segment and names it in its record, the others open that one. */
static int fn_split_join(fn_comm_t *c, fn_split_t *sp) {
  int rank = 0, n = 0, first = -1;
  for (int r = 0; r < c->nranks; r++) {
    if (fn_split_pub(c, sp->seq, r)->color != sp->color) continue;
    n++;
    if (r != c->rank && fn_split_before(c, sp->seq, r, c->rank)) rank++;
    if (first < 0 || fn_split_before(c, sp->seq, r, first)) first = r;
  }
  fn_split_pub_t *fp = fn_split_pub(c, sp->seq, first);
  fn_id_t f = {.magic = "fakencl", .pid = fp->pid, .fd = fp->fd};
  if (first == c->rank) {
    int res = fn_new_segment(&f);
    if (res != FN_OK) return res;
    fp->fd = f.fd;
    atomic_store(&fp->made, sp->seq);
  } else if (atomic_load(&fp->made) != sp->seq) {
    return FN_INPROGRESS;
  } else {
    f.fd = fp->fd;
  }
  return fn_attach(&sp->child, n, &f, rank, sp->blocking);
}

/* Moves the split in progress on: every rank of the parent must have
 * called ncclCommSplit, then every member of this rank's group must have
 * joined its new communicator.  FN_OK once done, the new communicator
 * (NULL for NCCL_SPLIT_NOCOLOR) in the caller's pointer, as NCCL writes
 * it when a split finishes. */
static int fn_split_progress(fn_comm_t *c) {
  fn_split_t *sp = c->split;
  if (!sp) return FN_OK;
  if (sp->failed) return FN_ESYS;
  for (int r = 0; r < c->nranks; r++)
    if (atomic_load(&fn_split_pub(c, sp->seq, r)->seq) != sp->seq) return FN_INPROGRESS;
  if (sp->color != SYMM_NCCL_SPLIT_NOCOLOR) {
    if (!sp->child) {
      int res = fn_split_join(c, sp);
      if (res != FN_OK) return res;
    }
    if (!fn_all_joined(sp->child, NULL)) return FN_INPROGRESS;
  }
  if (sp->fail_late) { /* its peers have theirs; this rank's fails */
    if (sp->child) fn_comm_free(sp->child);
    sp->child = NULL;
    sp->failed = true;
    return fn_fail(FN_ESYS, "fake NCCL: ncclCommSplit fails on this rank at its end "
                   "(FAKENCCL_SPLIT_FAIL_RANK)");
  }
  *sp->out = sp->child;
  c->split = NULL;
  free(sp);
  return FN_OK;
}

static bool fn_split_done(fn_comm_t *c, void *arg) {
  (void)arg;
  return fn_split_progress(c) != FN_INPROGRESS;
}

/* Collective over the parent: this rank publishes its color and key, and
 * the split ends (fn_split_progress) once every rank of the parent has. */
static int fn_ncclCommSplit(void *comm, int color, int key, void **newcomm,
                            symm_nccl_config_t *cfg) {
  fn_comm_t *c = comm;
  pthread_mutex_lock(&fn_lock);
  fn_stats.splits++;
  pthread_mutex_unlock(&fn_lock);
  if (!c || !newcomm || color < SYMM_NCCL_SPLIT_NOCOLOR)
    return fn_fail(FN_EINVAL, "ncclCommSplit: bad argument");
  *newcomm = NULL;
  if (cfg && (cfg->magic != SYMM_NCCL_CONFIG_MAGIC || cfg->size < sizeof *cfg ||
              cfg->version < 22700))
    return fn_fail(FN_EINVAL, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
  if (!fn_nvls_off())
    return fn_fail(FN_EUSAGE, "fake NCCL: NCCL_NVLS_ENABLE must be 0 (NVLS stays off)");
  if (c->pending || c->split || !fn_all_joined(c, NULL))
    return fn_fail(FN_EUSAGE, "fake NCCL: ncclCommSplit while the communicator is busy");
  fn_split_t *sp = calloc(1, sizeof *sp);
  sp->seq = ++c->splits;
  sp->color = color;
  sp->key = key;
  /* No config: the parent's; a config's undefined blocking: blocking. */
  sp->blocking = !cfg ? c->blocking : cfg->blocking != 0;
  sp->out = newcomm;
  c->split = sp;
  const char *fail = getenv("FAKENCCL_SPLIT_FAIL_RANK");
  sp->fail_late = fail && strstr(fail, ":late") && fn_env_int("FAKENCCL_SPLIT_FAIL_RANK", -1) ==
                                                       c->rank;
  if (!sp->fail_late && fn_env_int("FAKENCCL_SPLIT_FAIL_RANK", -1) == c->rank) {
    fn_fail(FN_ESYS, "fake NCCL: ncclCommSplit fails on this rank (FAKENCCL_SPLIT_FAIL_RANK)");
    sp->failed = true; /* never publishes: its peers wait for it */
    if (!c->blocking) return FN_INPROGRESS; /* told by ncclCommGetAsyncError */
    c->split = NULL;
    free(sp);
    return FN_ESYS;
  }
  fn_split_pub_t *p = fn_split_pub(c, sp->seq, c->rank);
  p->color = color;
  p->key = key;
  p->pid = getpid();
  p->fd = -1;
  atomic_store(&p->seq, sp->seq);
  if (!c->blocking) return fn_split_progress(c) == FN_OK ? FN_OK : FN_INPROGRESS;
  int res = fn_wait(c, fn_split_done, NULL);
  if (res == FN_OK && c->split) res = fn_split_progress(c); /* an error of its own */
  if (res != FN_OK && c->split) {
    if (c->split->child) fn_comm_free(c->split->child);
    free(c->split);
    c->split = NULL;
  }
  return res;
}

static int fn_ncclCommCount(void *comm, int *count) {
  const fn_comm_t *c = comm;
  if (!c || !count) return FN_EINVAL;
  *count = c->nranks;
  return FN_OK;
}

static int fn_ncclCommUserRank(void *comm, int *rank) {
  const fn_comm_t *c = comm;
  if (!c || !rank) return FN_EINVAL;
  *rank = c->rank;
  return FN_OK;
}

static int fn_ncclCommGetAsyncError(void *comm, int *state) {
  fn_comm_t *c = comm;
  if (!c || !state) return FN_EINVAL;
  if (!fn_all_joined(c, NULL)) *state = FN_INPROGRESS;
  else if (c->split) *state = fn_split_progress(c);
  else *state = fn_progress(c);
  return FN_OK;
}

/* ------------------------------------------------------- collectives */

static size_t fn_size(int dt) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return dt >= 0 && dt < 10 ? s[dt] : 0;
}

static float fn_bf16_to_f(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t fn_f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

#define FN_REDUCE(T, a, b, op) \
  (op == SYMM_NCCL_SUM ? (T)((a) + (b)) : op == SYMM_NCCL_MAX ? ((a) > (b) ? (a) : (b)) : ((a) < (b) ? (a) : (b)))

/* acc[i] = acc[i] op x[i] for n elements of dtype dt. */
static bool fn_reduce(void *acc, const void *x, size_t n, int dt, int op) {
  for (size_t i = 0; i < n; i++) switch (dt) {
      case SYMM_NCCL_FLOAT32: ((float *)acc)[i] = FN_REDUCE(float, ((float *)acc)[i], ((const float *)x)[i], op); break;
      case SYMM_NCCL_FLOAT64: ((double *)acc)[i] = FN_REDUCE(double, ((double *)acc)[i], ((const double *)x)[i], op); break;
      case SYMM_NCCL_INT32: ((int32_t *)acc)[i] = FN_REDUCE(int32_t, ((int32_t *)acc)[i], ((const int32_t *)x)[i], op); break;
      case SYMM_NCCL_INT64: ((int64_t *)acc)[i] = FN_REDUCE(int64_t, ((int64_t *)acc)[i], ((const int64_t *)x)[i], op); break;
      case SYMM_NCCL_UINT32: ((uint32_t *)acc)[i] = FN_REDUCE(uint32_t, ((uint32_t *)acc)[i], ((const uint32_t *)x)[i], op); break;
      case SYMM_NCCL_UINT64: ((uint64_t *)acc)[i] = FN_REDUCE(uint64_t, ((uint64_t *)acc)[i], ((const uint64_t *)x)[i], op); break;
      case SYMM_NCCL_BFLOAT16: {
        float a = fn_bf16_to_f(((uint16_t *)acc)[i]), b = fn_bf16_to_f(((const uint16_t *)x)[i]);
        ((uint16_t *)acc)[i] = fn_f_to_bf16(FN_REDUCE(float, a, b, op));
        break;
      }
      default: return false;
    }
  return true;
}

typedef struct {
  int phase; /* 0: every rank staged; 1: every rank read */
  uint64_t seq;
} fn_phase_t;

static bool fn_phase_done(fn_comm_t *c, void *arg) {
  const fn_phase_t *p = arg;
  for (int r = 0; r < c->nranks; r++)
    if (atomic_load(p->phase ? &c->seg->coll_out[r] : &c->seg->coll_in[r]) < p->seq) return false;
  return true;
}

typedef enum { FN_AR, FN_AG, FN_RS, FN_BC, FN_A2A } fn_kind_t;

/* Stages `send` bytes, waits for every rank, computes recv, waits again. */
static int fn_collective(fn_comm_t *c, fn_kind_t kind, const void *send, void *recv, size_t count,
                         int dt, int op, int root) {
  size_t es = fn_size(dt);
  if (!c || !es) return fn_fail(FN_EINVAL, "bad communicator or data type");
  size_t n = (size_t)c->nranks, bytes = count * es;
  size_t in = kind == FN_RS || kind == FN_A2A ? bytes * n : bytes;
  if (in > FN_STAGE) return fn_fail(FN_EINVAL, "fake NCCL: more than its staging area");
  if (send && (kind != FN_BC || c->rank == root)) memcpy(fn_stage(c->seg, c->rank), send, in);
  fn_phase_t p = {0, ++c->colls};
  atomic_store(&c->seg->coll_in[c->rank], p.seq);
  int res = fn_wait(c, fn_phase_done, &p);
  if (res != FN_OK) return res;
  char *out = recv;
  switch (kind) {
    case FN_AR:
    case FN_RS: {
      size_t off = kind == FN_RS ? (size_t)c->rank * bytes : 0;
      char *tmp = malloc(bytes ? bytes : 1);
      memcpy(tmp, fn_stage(c->seg, 0) + off, bytes);
      for (int r = 1; r < c->nranks && res == FN_OK; r++)
        if (!fn_reduce(tmp, fn_stage(c->seg, r) + off, count, dt, op))
          res = fn_fail(FN_EINVAL, "fake NCCL: cannot reduce this type");
      if (res == FN_OK) memcpy(out, tmp, bytes);
      free(tmp);
      break;
    }
    case FN_AG:
      for (int r = 0; r < c->nranks; r++) memcpy(out + (size_t)r * bytes, fn_stage(c->seg, r), bytes);
      break;
    case FN_BC: memcpy(out, fn_stage(c->seg, root), bytes); break;
    case FN_A2A:
      for (int r = 0; r < c->nranks; r++)
        memcpy(out + (size_t)r * bytes, fn_stage(c->seg, r) + (size_t)c->rank * bytes, bytes);
      break;
  }
  p.phase = 1;
  atomic_store(&c->seg->coll_out[c->rank], p.seq);
  int res2 = fn_wait(c, fn_phase_done, &p);
  pthread_mutex_lock(&fn_lock);
  fn_stats.collectives++;
  pthread_mutex_unlock(&fn_lock);
  return res != FN_OK ? res : res2;
}

static int fn_ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
  (void)st;
  return fn_collective(c, FN_AR, s, r, n, dt, op, 0);
}
static int fn_ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
  (void)st;
  return fn_collective(c, FN_RS, s, r, n, dt, op, 0);
}
static int fn_ncclAllGather(const void *s, void *r, size_t n, int dt, void *c, void *st) {
  (void)st;
  return fn_collective(c, FN_AG, s, r, n, dt, 0, 0);
}
static int fn_ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *c, void *st) {
  (void)st;
  return fn_collective(c, FN_BC, s, r, n, dt, 0, root);
}
static int fn_ncclAlltoAll(const void *s, void *r, size_t n, int dt, void *c, void *st) {
  (void)st;
  return fn_collective(c, FN_A2A, s, r, n, dt, 0, 0);
}

/* Sends and receives are only accepted in a group, and run at its end as
 * one exchange: one send and one receive of equal size per rank, the
 * buffers back to back in rank order (an all-to-all). */
static int fn_p2p(const void *buf, void *rbuf, size_t n, int dt, int peer, void *comm, bool send) {
  fn_comm_t *c = comm;
  if (!fn_group_depth) return fn_fail(FN_EUSAGE, "fake NCCL: send/recv outside a group");
  if (!c || (fn_group_comm && fn_group_comm != c) || c->nops >= 2 * FN_MAX_RANKS)
    return fn_fail(FN_EUSAGE, "fake NCCL: one communicator per group");
  fn_group_comm = c;
  c->ops[c->nops].buf = buf;
  c->ops[c->nops].rbuf = rbuf;
  c->ops[c->nops].bytes = n * fn_size(dt);
  c->ops[c->nops].peer = peer;
  c->ops[c->nops].send = send;
  c->nops++;
  return FN_OK;
}

static int fn_ncclSend(const void *b, size_t n, int dt, int peer, void *c, void *st) {
  (void)st;
  return fn_p2p(b, NULL, n, dt, peer, c, true);
}
static int fn_ncclRecv(void *b, size_t n, int dt, int peer, void *c, void *st) {
  (void)st;
  return fn_p2p(NULL, b, n, dt, peer, c, false);
}

static int fn_ncclGroupStart(void) {
  fn_group_depth++;
  return FN_OK;
}

static int fn_ncclGroupEnd(void) {
  if (fn_group_depth <= 0) return fn_fail(FN_EUSAGE, "ncclGroupEnd without ncclGroupStart");
  if (--fn_group_depth || !fn_group_comm) return FN_OK;
  fn_comm_t *c = fn_group_comm;
  fn_group_comm = NULL;
  int nops = c->nops, res = FN_OK;
  c->nops = 0;
  if (nops != 2 * c->nranks) return fn_fail(FN_EUSAGE, "fake NCCL: a group must exchange with every rank");
  size_t bytes = c->ops[0].bytes;
  const char *sbase = NULL;
  char *rbase = NULL;
  for (int i = 0; i < nops; i++) {
    if (c->ops[i].bytes != bytes) return fn_fail(FN_EUSAGE, "fake NCCL: unequal sizes in a group");
    if (c->ops[i].send && c->ops[i].peer == 0) sbase = c->ops[i].buf;
    if (!c->ops[i].send && c->ops[i].peer == 0) rbase = c->ops[i].rbuf;
  }
  for (int i = 0; i < nops; i++) {
    const char *want = c->ops[i].send ? sbase + (size_t)c->ops[i].peer * bytes : NULL;
    if (!sbase || !rbase || (c->ops[i].send ? c->ops[i].buf != want
                                            : c->ops[i].rbuf != rbase + (size_t)c->ops[i].peer * bytes))
      return fn_fail(FN_EUSAGE, "fake NCCL: a group's buffers must lie back to back in rank order");
  }
  res = fn_collective(c, FN_A2A, sbase, rbase, bytes, SYMM_NCCL_UINT8, 0, 0);
  pthread_mutex_lock(&fn_lock);
  fn_stats.p2p_groups++;
  pthread_mutex_unlock(&fn_lock);
  return res;
}

/* ------------------------------------------------------------- exports */

/* Whether dlsym must not find `name` (FAKENCCL_MISSING, or a version
 * older than the one that brought it). */
static bool fn_hidden(const char *name, int since) {
  const char *m = getenv("FAKENCCL_MISSING");
  size_t len = strlen(name);
  for (const char *p = m; p && *p;) {
    size_t n = strcspn(p, ",");
    if (n == len && strncmp(p, name, n) == 0) return true;
    p += n + (p[n] == ',');
  }
  return fn_version() < since;
}

#define FN_EXPORT(ret, name, since, params)                                              \
  static __typeof__(&fn_##name) fn_resolve_##name(void) {                               \
    return fn_hidden(#name, since) ? NULL : fn_##name;                                   \
  }                                                                                      \
  FN_API ret name params __attribute__((ifunc("fn_resolve_" #name)));

FN_EXPORT(int, ncclGetVersion, 0, (int *))
FN_EXPORT(const char *, ncclGetErrorString, 0, (int))
FN_EXPORT(const char *, ncclGetLastError, 0, (void *))
FN_EXPORT(int, ncclGetUniqueId, 0, (symm_nccl_unique_id_t *))
FN_EXPORT(int, ncclCommInitRank, 0, (void **, int, symm_nccl_unique_id_t, int))
FN_EXPORT(int, ncclCommInitRankConfig, 21400,
          (void **, int, symm_nccl_unique_id_t, int, symm_nccl_config_t *))
FN_EXPORT(int, ncclCommDestroy, 0, (void *))
FN_EXPORT(int, ncclCommAbort, 0, (void *))
FN_EXPORT(int, ncclCommGetAsyncError, 0, (void *, int *))
FN_EXPORT(int, ncclCommSplit, 21800, (void *, int, int, void **, symm_nccl_config_t *))
FN_EXPORT(int, ncclCommCount, 0, (void *, int *))
FN_EXPORT(int, ncclCommUserRank, 0, (void *, int *))
FN_EXPORT(int, ncclMemAlloc, 21900, (void **, size_t))
FN_EXPORT(int, ncclMemFree, 21900, (void *))
FN_EXPORT(int, ncclCommWindowRegister, 22700, (void *, void *, size_t, void **, int))
FN_EXPORT(int, ncclCommWindowDeregister, 22700, (void *, void *))
FN_EXPORT(int, ncclGetPeerDevicePointer, 22902, (void *, size_t, int, void **))
FN_EXPORT(int, ncclAllReduce, 0, (const void *, void *, size_t, int, int, void *, void *))
FN_EXPORT(int, ncclReduceScatter, 0, (const void *, void *, size_t, int, int, void *, void *))
FN_EXPORT(int, ncclAllGather, 0, (const void *, void *, size_t, int, void *, void *))
FN_EXPORT(int, ncclBroadcast, 0, (const void *, void *, size_t, int, int, void *, void *))
FN_EXPORT(int, ncclAlltoAll, 22800, (const void *, void *, size_t, int, void *, void *))
FN_EXPORT(int, ncclSend, 0, (const void *, size_t, int, int, void *, void *))
FN_EXPORT(int, ncclRecv, 0, (void *, size_t, int, int, void *, void *))
FN_EXPORT(int, ncclGroupStart, 0, (void))
FN_EXPORT(int, ncclGroupEnd, 0, (void))

FN_API void fakenccl_stats(fakenccl_stats_t *s) {
  pthread_mutex_lock(&fn_lock);
  *s = fn_stats;
  pthread_mutex_unlock(&fn_lock);
}
