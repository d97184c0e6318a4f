/*
 * A stand-in for libnvshmem_host.so.3 that lets the nvshmem backend run on
 * machines without a GPU (SYMM_NVSHMEM_LIB=.../libsymm-fakenvshmem.so,
 * with SYMM_CUDA_LIB naming the fake driver, fake_cuda.c).  It implements
 * the host entry points the backend uses, over shared memory:
 *
 *  - nvshmemx_get_uniqueid makes a random token; every PE that starts with
 *    it (nvshmemx_hostlib_init_attr, NVSHMEMX_INIT_WITH_UNIQUEID) meets
 *    the others in a shared control segment named after it;
 *  - or, as NVSHMEM does with flags 0, a NULL attribute struct and
 *    NVSHMEM_BOOTSTRAP=plugin: it loads NVSHMEM_BOOTSTRAP_PLUGIN, calls its
 *    nvshmemi_bootstrap_plugin_init with the bootstrap ABI version
 *    (FAKENVSHMEM_BOOTSTRAP_ABI, default 30000), checks the handle's
 *    version, learns the node layout and the control segment's name
 *    through the handle's all-gather, ends init with its barrier, runs an
 *    all-gather when the heap "grows" inside nvshmem_malloc (every 2 MiB
 *    of the heap first used) and a barrier in finalize; like NVSHMEM it
 *    keeps that bootstrap past nvshmemx_hostlib_finalize (a later init
 *    reuses it, whatever its flags, without calling the plugin again) and
 *    calls the handle's finalize at exit;
 *  - each PE's symmetric heap is "device memory" of the fake driver
 *    (cuMemCreate, a memfd): every PE imports every PE's heap through
 *    /proc/<pid>/fd and maps them back to back in one reservation, as
 *    NVSHMEM maps its peers' heaps, so nvshmem_ptr is an addition and the
 *    GPU engine's driver calls accept the memory;
 *  - nvshmem_malloc / nvshmem_free are collective (a barrier each, as in
 *    NVSHMEM), and nvshmem_malloc checks that every PE asks for the same
 *    size in the same order: otherwise it aborts the process, which is
 *    what the core's mismatch check must prevent;
 *  - nvshmemx_buffer_register_symmetric is collective too (the same size
 *    on every PE): it checks the user's buffer on each PE first (VMM
 *    memory of the fake driver, the start of its mapping, whole pages),
 *    then every PE exports its buffer's handle and maps every PE's back to
 *    back in a reservation of its own, whose own slot is the symmetric
 *    address nvshmem_ptr translates; nvshmemx_buffer_unregister_symmetric
 *    undoes it (FAKENVSHMEM_MISSING takes them away, as a library without
 *    them);
 *  - the on-stream collectives run for real on the host (the stream is
 *    ignored: they complete before they return), refuse buffers outside
 *    the symmetric heap (as NVSHMEM requires) and check that every PE
 *    called the same one with the same size;
 *  - waits detect a PE that failed init or whose process is gone, and give
 *    up after FAKENVSHMEM_TIMEOUT_MS (default 30000).
 *
 * The ABI is checked as the backend builds it: struct versions of the
 * unique id and the init attributes, the unique-id flag, and
 * NVSHMEM_DISABLE_NVLS=1 in the environment (else init fails: NVLS would
 * be on).
 *
 * Switches: FAKENVSHMEM_INIT_FAIL_RANK=<r> (init fails on PE r, the others
 * see it fail), FAKENVSHMEM_MISSING=<symbol>[,<symbol>...] (dlsym finds
 * no such entry point: every export is an IFUNC whose resolver asks),
 * FAKENVSHMEM_UNREACHABLE=<r>[,<r>...] (PE r is "on another node":
 * nvshmem_ptr gives NULL between it and every other PE; its collectives
 * still work), FAKENVSHMEM_VERSION=<major.minor.patch> (default 3.8.0),
 * FAKENVSHMEM_HEAP_BYTES (default 512 MiB), FAKENVSHMEM_BOOTSTRAP_ABI
 * (the bootstrap ABI offered to a plugin).  fakenvshmem_stats reports
 * what a test checks for leaks, and how NVSHMEM was bootstrapped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>

#include "backends/nvshmem/nvshmem_boot_abi.h"
#include "backends/nvshmem/nvshmem_lib.h"
#include "fakenvshmem.h"
#include "gpu/cu_driver.h"
#include "../float_bits.h"
#include "../int_list.h"

#define FK_API __attribute__((visibility("default")))
#define FK_MAX_PES 64
#define FK_ALIGN ((size_t)4096)
#define FK_ERR 7 /* NVSHMEMX_ERROR_INTERNAL */
#define FK_GROW ((size_t)2 << 20) /* the heap's growth step (plugin bootstrap) */

/* Every export resolves through fk_hidden, so FAKENVSHMEM_MISSING can take
 * any of them away from dlsym. */
static bool fk_hidden(const char *name) {
  const char *list = getenv("FAKENVSHMEM_MISSING");
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return true;
    p = end ? end + 1 : p + len;
  }
  return false;
}

#define FK_EXPORT(ret, name, params)                                          \
  static ret fk_##name params;                                                \
  static __typeof__(&fk_##name) fk_resolve_##name(void) {                    \
    return fk_hidden(#name) ? NULL : fk_##name;                               \
  }                                                                           \
  FK_API ret name params __attribute__((ifunc("fk_resolve_" #name)));

/* ---------------------------------------------------------------- state */

typedef struct fk_ctl {
  atomic_uint joined, arrived, generation, failed; /* failed: 1 + the PE */
  int32_t pid[FK_MAX_PES], fd[FK_MAX_PES];
  int32_t reg_fd[FK_MAX_PES]; /* a registration in progress: each PE's exported buffer */
  uint64_t op_n[FK_MAX_PES], op_arg[FK_MAX_PES]; /* what each PE is calling */
} fk_ctl_t;

/* A buffer registered with nvshmemx_buffer_register_symmetric: every
 * PE's buffer mapped here, back to back, as NVSHMEM maps them into its
 * heap's address space; this PE's slot is the symmetric address. */
typedef struct fk_reg {
  size_t bytes;
  ncu_deviceptr va;
  ncu_mem_handle h[FK_MAX_PES];
  bool have_h[FK_MAX_PES], mapped[FK_MAX_PES];
  struct fk_reg *next;
} fk_reg_t;

typedef struct fk_block {
  size_t off, size;
  bool used;
  struct fk_block *next;
} fk_block_t;

static struct {
  const symm_cu_driver_t *cu;
  bool up;
  int pe, npes;
  fk_ctl_t *ctl;
  size_t heap;               /* bytes per PE */
  ncu_deviceptr va;          /* npes heaps back to back */
  ncu_mem_handle h[FK_MAX_PES];
  bool have_h[FK_MAX_PES], mapped[FK_MAX_PES];
  int export_fd;
  fk_block_t *blocks;
  fk_reg_t *regs;
  uint64_t ops;              /* collective calls made (malloc, free, collectives) */
  size_t grown;              /* bytes of the heap "mapped" so far (plugin bootstrap) */
  fakenvshmem_stats_t stats;
} fk;

/* The plugin bootstrap, kept from its init until the process exits. */
static struct {
  bool up;
  void *dl;
  nvsh_boot_handle_t h;      /* NVSHMEM's global handle, which the plugin fills */
  long inits;                /* the plugin's init calls in this process */
} fk_boot;

static int fk_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static bool fk_in_list(const char *var, int pe) { return int_list_contains(getenv(var), pe); }

static uint64_t fk_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool fk_pid_gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *paren = strrchr(buf, ')');
  return paren && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Waits until cond() or a reason to give up: 0 met, -1 a PE failed or is
 * gone, -2 timed out.  Polls with growing sleeps. */
static int fk_wait(bool (*cond)(unsigned), unsigned arg, const char *what) {
  const uint64_t deadline = fk_now_ms() + (uint64_t)fk_env_int("FAKENVSHMEM_TIMEOUT_MS", 30000);
  unsigned spins = 0;
  while (!cond(arg)) {
    if (atomic_load(&fk.ctl->failed)) return -1;
    if (++spins % 64 == 0) {
      for (int p = 0; p < fk.npes; p++)
        if (p != fk.pe && fk_pid_gone(fk.ctl->pid[p])) {
          fprintf(stderr, "fakenvshmem: PE %d: PE %d is gone (%s)\n", fk.pe, p, what);
          return -1;
        }
      if (fk_now_ms() > deadline) {
        fprintf(stderr, "fakenvshmem: PE %d: timed out in %s\n", fk.pe, what);
        return -2;
      }
    }
    if (spins < 200) {
      sched_yield();
    } else {
      struct timespec ts = {0, spins < 2000 ? 50000 : 1000000};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}

static bool fk_all_joined(unsigned n) { return atomic_load(&fk.ctl->joined) >= n; }
static bool fk_gen_moved(unsigned gen) { return atomic_load(&fk.ctl->generation) != gen; }

static int fk_barrier(const char *what) {
  unsigned gen = atomic_load(&fk.ctl->generation);
  if (atomic_fetch_add(&fk.ctl->arrived, 1) + 1 == (unsigned)fk.npes) {
    atomic_store(&fk.ctl->arrived, 0);
    atomic_fetch_add(&fk.ctl->generation, 1);
    return 0;
  }
  return fk_wait(fk_gen_moved, gen, what);
}

/* A collective call: every PE says what it calls (its n-th operation and an
 * argument); all must agree, else the process aborts, naming both. */
static int fk_enter(const char *what, uint64_t arg) {
  fk.ops++;
  fk.ctl->op_n[fk.pe] = fk.ops;
  fk.ctl->op_arg[fk.pe] = arg;
  int rc = fk_barrier(what);
  if (rc) return rc;
  for (int p = 0; p < fk.npes; p++)
    if (fk.ctl->op_n[p] != fk.ops || fk.ctl->op_arg[p] != arg) {
      fprintf(stderr, "fakenvshmem: PE %d: %s (call %llu, argument %llu), but PE %d is in its "
              "call %llu with argument %llu: NVSHMEM would hang or corrupt memory\n", fk.pe,
              what, (unsigned long long)fk.ops, (unsigned long long)arg, p,
              (unsigned long long)fk.ctl->op_n[p], (unsigned long long)fk.ctl->op_arg[p]);
      abort();
    }
  /* Nobody rewrites its slot before everybody compared. */
  return fk_barrier(what);
}

/* ---------------------------------------------------------------- driver */

/* The fake driver (SYMM_CUDA_LIB), the process's one: its entry points
 * through cuGetProcAddress_v2, as the library resolves them. */
static symm_cu_driver_t fk_drv;

static bool fk_driver(void) {
  if (fk.cu) return true;
  const char *path = getenv("SYMM_CUDA_LIB");
  void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  fk_drv.get_proc = h ? (ncu_result(*)(const char *, void **, int, unsigned long long, int *))
                            dlsym(h, "cuGetProcAddress_v2")
                      : NULL;
  if (!fk_drv.get_proc) {
    fprintf(stderr, "fakenvshmem: SYMM_CUDA_LIB=%s is not the fake CUDA driver\n",
            path ? path : "(unset)");
    return false;
  }
  bool ok = true;
#define FK_RESOLVE(name, params) \
  ok = ok && fk_drv.get_proc(#name, (void **)&fk_drv.name, 12000, 0, NULL) == NCU_SUCCESS;
  SYMM_CU_DRIVER_FUNCTIONS(FK_RESOLVE)
#undef FK_RESOLVE
  if (ok) fk.cu = &fk_drv;
  return ok;
}

/* ------------------------------------------------------------ heaps */

static char *fk_base(int pe) { return (char *)(uintptr_t)fk.va + (size_t)pe * fk.heap; }

/* Offset of [p, p + n) in this PE's heap, or -1 when it is not inside. */
static long long fk_heap_off(const void *p, size_t n) {
  const char *c = p, *mine = fk_base(fk.pe);
  if (!fk.up || c < mine || c + n > mine + fk.heap) return -1;
  return (long long)(c - mine);
}

static void fk_unmap_heaps(void) {
  for (int p = 0; p < fk.npes; p++) {
    if (fk.mapped[p]) fk.cu->cuMemUnmap((ncu_deviceptr)(uintptr_t)fk_base(p), fk.heap);
    if (fk.have_h[p]) fk.cu->cuMemRelease(fk.h[p]);
    fk.mapped[p] = fk.have_h[p] = false;
  }
  if (fk.va) fk.cu->cuMemAddressFree(fk.va, fk.heap * (size_t)fk.npes);
  fk.va = 0;
  if (fk.export_fd >= 0) close(fk.export_fd);
  fk.export_fd = -1;
}

static int fk_map_heap(int p) {
  if (p != fk.pe) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)fk.ctl->pid[p], (int)fk.ctl->fd[p]);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    ncu_result r = fk.cu->cuMemImportFromShareableHandle(&fk.h[p], (void *)(intptr_t)fd,
                                                          NCU_HANDLE_POSIX_FD);
    close(fd);
    if (r != NCU_SUCCESS) return -1;
    fk.have_h[p] = true;
  }
  ncu_deviceptr at = (ncu_deviceptr)(uintptr_t)fk_base(p);
  if (fk.cu->cuMemMap(at, fk.heap, 0, fk.h[p], 0) != NCU_SUCCESS) return -1;
  fk.mapped[p] = true;
  ncu_access_desc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = NCU_LOCATION_DEVICE;
  acc.location.id = 0;
  acc.flags = NCU_ACCESS_READWRITE;
  return fk.cu->cuMemSetAccess(at, fk.heap, &acc, 1) == NCU_SUCCESS ? 0 : -1;
}

/* This PE's heap made and published; every PE's mapped once all are. */
static int fk_make_heaps(void) {
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = NCU_HANDLE_POSIX_FD;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = 0;
  if (fk.cu->cuMemCreate(&fk.h[fk.pe], fk.heap, &prop, 0) != NCU_SUCCESS) return -1;
  fk.have_h[fk.pe] = true;
  if (fk.cu->cuMemExportToShareableHandle(&fk.export_fd, fk.h[fk.pe], NCU_HANDLE_POSIX_FD, 0) !=
      NCU_SUCCESS)
    return -1;
  fk.ctl->fd[fk.pe] = fk.export_fd;
  if (fk.cu->cuMemAddressReserve(&fk.va, fk.heap * (size_t)fk.npes, 0, 0, 0) != NCU_SUCCESS)
    return -1;
  if (fk_barrier("init: publishing heaps")) return -1;
  for (int p = 0; p < fk.npes; p++)
    if (fk_map_heap(p)) {
      fprintf(stderr, "fakenvshmem: PE %d cannot map PE %d's heap\n", fk.pe, p);
      return -1;
    }
  fk.blocks = calloc(1, sizeof *fk.blocks);
  if (!fk.blocks) return -1;
  fk.blocks->size = fk.heap;
  return fk_barrier("init: mapping heaps");
}

static void fk_reg_free(fk_reg_t *r);

static void fk_teardown(void) {
  while (fk.regs) { /* left registered: counted in live_registered */
    fk_reg_t *r = fk.regs;
    fk.regs = r->next;
    fk_reg_free(r);
  }
  if (fk.cu) fk_unmap_heaps();
  for (fk_block_t *b = fk.blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  fk.blocks = NULL;
  if (fk.ctl) munmap(fk.ctl, sizeof *fk.ctl);
  fk.ctl = NULL;
  fk.up = false;
}

/* ----------------------------------------------------- plugin bootstrap */

/* The handle's rounds, counted for the tests. */
static int fk_boot_allgather(const void *send, void *recv, int bytes) {
  fk.stats.boot_rounds++;
  return fk_boot.h.allgather(send, recv, bytes, &fk_boot.h);
}

static int fk_boot_barrier(void) {
  fk.stats.boot_rounds++;
  return fk_boot.h.barrier(&fk_boot.h);
}

/* NVSHMEM's atexit handler: the plugin's finalize, then dlclose. */
static void fk_boot_exit(void) {
  if (!fk_boot.up) return;
  if (fk_boot.h.finalize(&fk_boot.h) != 0)
    fprintf(stderr, "fakenvshmem: the bootstrap plugin's finalize failed\n");
  dlclose(fk_boot.dl);
  fk_boot.up = false;
}

static uint64_t fk_host_hash(void) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

/* The handle as NVSHMEM checks it, then the node layout through it (its
 * first round): 0, or -1 after saying why. */
static int fk_boot_check(int abi) {
  nvsh_boot_handle_t *h = &fk_boot.h;
  if (NVSH_BOOT_ABI_MAJOR_MINOR(abi) < NVSH_BOOT_ABI_MAJOR_MINOR(h->version)) {
    fprintf(stderr, "fakenvshmem: the bootstrap returned an incompatible version %d, expected "
            "%d\n", h->version, abi);
    return -1;
  }
  if (!h->allgather || !h->alltoall || !h->barrier || !h->finalize || !h->show_info ||
      h->pg_size < 1 || h->pg_size > FK_MAX_PES || h->pg_rank < 0 || h->pg_rank >= h->pg_size) {
    fprintf(stderr, "fakenvshmem: the bootstrap plugin filled the handle badly (PE %d of %d)\n",
            h->pg_rank, h->pg_size);
    return -1;
  }
  uint64_t mine = fk_host_hash(), all[FK_MAX_PES];
  if (fk_boot_allgather(&mine, all, sizeof mine)) {
    fprintf(stderr, "fakenvshmem: allgather of host hashes failed\n");
    return -1;
  }
  h->mype_node = h->npes_node = 0;
  for (int p = 0; p < h->pg_size; p++)
    if (all[p] == mine) {
      if (p == h->pg_rank) h->mype_node = h->npes_node;
      h->npes_node++;
    }
  return 0;
}

/* NVSHMEM_BOOTSTRAP=plugin: NVSHMEM_BOOTSTRAP_PLUGIN loaded, its init
 * called with the ABI version, the handle checked.  0, or -1. */
static int fk_boot_plugin(void) {
  const char *mode = getenv("NVSHMEM_BOOTSTRAP"), *path = getenv("NVSHMEM_BOOTSTRAP_PLUGIN");
  if (!mode || strcasecmp(mode, "plugin") != 0 || !path || !*path) {
    fprintf(stderr, "fakenvshmem: init flags 0 with NVSHMEM_BOOTSTRAP=%s "
            "NVSHMEM_BOOTSTRAP_PLUGIN=%s: the fake bootstraps through a plugin only\n",
            mode ? mode : "(unset)", path ? path : "(unset)");
    return -1;
  }
  fk_boot.dl = dlopen(path, RTLD_NOW);
  nvsh_boot_plugin_init_fn init = NULL;
  if (fk_boot.dl) *(void **)&init = dlsym(fk_boot.dl, NVSH_BOOT_PLUGIN_INIT);
  if (!init) {
    fprintf(stderr, "fakenvshmem: bootstrap unable to load '%s' or its %s: %s\n", path,
            NVSH_BOOT_PLUGIN_INIT, dlerror());
    if (fk_boot.dl) dlclose(fk_boot.dl);
    return -1;
  }
  memset(&fk_boot.h, 0, sizeof fk_boot.h);
  const int abi = fk_env_int("FAKENVSHMEM_BOOTSTRAP_ABI", NVSH_BOOT_ABI);
  fk_boot.inits++;
  if (init(NULL, &fk_boot.h, abi) != 0 || fk_boot_check(abi) != 0) {
    fprintf(stderr, "fakenvshmem: bootstrap plugin init failed for '%s'\n", path);
    dlclose(fk_boot.dl);
    return -1;
  }
  static bool registered;
  if (!registered) atexit(fk_boot_exit);
  registered = fk_boot.up = true;
  const char *info = getenv("NVSHMEM_INFO");
  if (info && (*info == '1' || *info == 'y' || *info == 't')) fk_boot.h.show_info(&fk_boot.h, 0);
  return 0;
}

/* ---------------------------------------------------------- init, fini */

static void fk_shm_name(const nvsh_uid_t *uid, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "/fakenvshmem-");
  for (int i = 8; i < 24 && n + 2 < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%02x", (unsigned char)uid->internal[i]);
}

/* The control segment's name through the plugin bootstrap: PE 0's random
 * token, all-gathered. */
static int fk_boot_shm_name(char *out, size_t cap) {
  nvsh_uid_t mine, *all = calloc(FK_MAX_PES, sizeof *all);
  if (!all) return -1;
  memset(&mine, 0, sizeof mine);
  if (getrandom(mine.internal + 8, 16, 0) != 16 ||
      fk_boot_allgather(&mine, all, sizeof mine) != 0) {
    free(all);
    return -1;
  }
  fk_shm_name(&all[0], out, cap);
  free(all);
  return 0;
}

static bool fk_nvls_off(const char *where) {
  const char *v = getenv("NVSHMEM_DISABLE_NVLS");
  if (v && strcmp(v, "1") == 0) return true;
  fprintf(stderr, "fakenvshmem: %s with NVSHMEM_DISABLE_NVLS=%s: NVLS would be on\n", where,
          v ? v : "(unset)");
  return false;
}

FK_EXPORT(int, nvshmemx_get_uniqueid, (nvsh_uid_t * uid))
static int fk_nvshmemx_get_uniqueid(nvsh_uid_t *uid) {
  if (!uid || uid->version != NVSH_STRUCT_VERSION(1, nvsh_uid_t) || !fk_nvls_off("get_uniqueid"))
    return FK_ERR;
  memset(uid->internal, 0, sizeof uid->internal);
  memcpy(uid->internal, "fknvshm", 8);
  if (getrandom(uid->internal + 8, 16, 0) != 16) return FK_ERR;
  return 0;
}

FK_EXPORT(int, nvshmemx_set_attr_uniqueid_args,
          (int myrank, int nranks, const nvsh_uid_t *uid, nvsh_init_attr_t *attr))
static int fk_nvshmemx_set_attr_uniqueid_args(int myrank, int nranks, const nvsh_uid_t *uid,
                                             nvsh_init_attr_t *attr) {
  if (!attr) return FK_ERR;
  attr->args.uid_args.id = (nvsh_uid_t *)uid;
  attr->args.uid_args.myrank = myrank;
  attr->args.uid_args.nranks = nranks;
  return 0;
}

static bool fk_attr_ok(unsigned flags, const nvsh_init_attr_t *a) {
  const nvsh_uid_args_t *u = a ? &a->args.uid_args : NULL;
  return a && flags == NVSH_INIT_WITH_UNIQUEID &&
         a->version == NVSH_STRUCT_VERSION(2, nvsh_init_attr_t) &&
         a->args.version == NVSH_STRUCT_VERSION(2, nvsh_init_args_t) &&
         u->version == NVSH_STRUCT_VERSION(1, nvsh_uid_args_t) && u->id &&
         memcmp(u->id->internal, "fknvshm", 8) == 0 && u->nranks > 0 &&
         u->nranks <= FK_MAX_PES && u->myrank >= 0 && u->myrank < u->nranks;
}

/* NVSHMEM's bootstrap for this init: the plugin's kept from an earlier
 * one (flags and attr then ignored, as NVSHMEM does), a new plugin
 * bootstrap (flags 0, attr NULL), or the unique id.  PE, PEs and the
 * control segment's name set; 0, or -1 after saying why. */
static int fk_bootstrap(unsigned flags, nvsh_init_attr_t *attr, char *name, size_t cap) {
  if (!fk_boot.up && flags == 0 && attr) {
    fprintf(stderr, "fakenvshmem: hostlib_init_attr: expected a NULL nvshmemx_init_attr_t "
            "with the plugin bootstrap\n");
    return -1;
  }
  if (!fk_boot.up && flags == 0 && fk_boot_plugin() != 0) return -1;
  if (fk_boot.up) {
    fk.pe = fk_boot.h.pg_rank;
    fk.npes = fk_boot.h.pg_size;
    return fk_boot_shm_name(name, cap);
  }
  if (!fk_attr_ok(flags, attr)) {
    fprintf(stderr, "fakenvshmem: hostlib_init_attr: bad flags or attribute versions\n");
    return -1;
  }
  fk.pe = attr->args.uid_args.myrank;
  fk.npes = attr->args.uid_args.nranks;
  fk_shm_name(attr->args.uid_args.id, name, cap);
  return 0;
}

/* Every PE in the control segment `name`; this one's heap made and every
 * PE's mapped.  0, or -1 (the others see it fail). */
static int fk_join(const char *name) {
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
  if (fd < 0) return -1;
  if (ftruncate(fd, sizeof(fk_ctl_t)) != 0) {
    close(fd);
    return -1;
  }
  fk.ctl = mmap(NULL, sizeof *fk.ctl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (fk.ctl == MAP_FAILED) {
    fk.ctl = NULL;
    return -1;
  }
  fk.ctl->pid[fk.pe] = getpid();
  atomic_fetch_add(&fk.ctl->joined, 1);
  int rc = fk_wait(fk_all_joined, (unsigned)fk.npes, "init: waiting for every PE");
  if (fk.pe == 0 || rc) shm_unlink(name); /* everybody has it mapped, or nobody will come */
  if (!rc && fk_in_list("FAKENVSHMEM_INIT_FAIL_RANK", fk.pe)) {
    fprintf(stderr, "fakenvshmem: PE %d fails init (FAKENVSHMEM_INIT_FAIL_RANK)\n", fk.pe);
    atomic_store(&fk.ctl->failed, 1u + (unsigned)fk.pe);
    rc = -1;
  }
  if (!rc) rc = fk_make_heaps();
  if (rc && fk.ctl && !atomic_load(&fk.ctl->failed))
    atomic_store(&fk.ctl->failed, 1u + (unsigned)fk.pe);
  return rc;
}

FK_EXPORT(int, nvshmemx_hostlib_init_attr, (unsigned int flags, nvsh_init_attr_t *attr))
static int fk_nvshmemx_hostlib_init_attr(unsigned int flags, nvsh_init_attr_t *attr) {
  if (fk.up) {
    fprintf(stderr, "fakenvshmem: hostlib_init_attr: already initialised\n");
    return FK_ERR;
  }
  if (!fk_nvls_off("hostlib_init_attr") || !fk_driver()) return FK_ERR;
  memset(&fk.stats, 0, sizeof fk.stats);
  fk.heap = (size_t)strtoull(getenv("FAKENVSHMEM_HEAP_BYTES") ? getenv("FAKENVSHMEM_HEAP_BYTES")
                                                              : "536870912", NULL, 0);
  fk.export_fd = -1;
  fk.ops = 0;
  fk.grown = 0;
  char name[96];
  if (fk_bootstrap(flags, attr, name, sizeof name) != 0) return FK_ERR;
  fk.stats.boot_plugin = fk_boot.up;
  if (fk_join(name) != 0 || (fk_boot.up && fk_boot_barrier() != 0)) {
    if (fk.ctl && !atomic_load(&fk.ctl->failed)) atomic_store(&fk.ctl->failed, 1u + (unsigned)fk.pe);
    fk_teardown();
    return FK_ERR;
  }
  fk.up = true;
  fk.stats.inits++;
  fk.stats.boot_inits = fk_boot.inits;
  return 0;
}

FK_EXPORT(void, nvshmemx_hostlib_finalize, (void))
static void fk_nvshmemx_hostlib_finalize(void) {
  if (!fk.up) return;
  if (fk_barrier("finalize")) fprintf(stderr, "fakenvshmem: PE %d finalises alone\n", fk.pe);
  /* NVSHMEM's own barrier over its bootstrap, which (a plugin's) stays. */
  if (fk_boot.up && fk_boot_barrier() != 0)
    fprintf(stderr, "fakenvshmem: PE %d: the bootstrap's barrier in finalize failed\n", fk.pe);
  fakenvshmem_stats_t keep = fk.stats;
  for (fk_block_t *b = fk.blocks; b; b = b->next) keep.live += b->used;
  keep.finalizes++;
  fk_teardown();
  fk.stats = keep;
}

/* ------------------------------------------------------------- memory */

/* The heap "grows" to cover `end` (plugin bootstrap): as NVSHMEM maps
 * more of a growing heap, every PE exchanges its new extent through the
 * bootstrap, and they must agree.  0, or -1. */
static int fk_grow(size_t end) {
  if (!fk_boot.up || end <= fk.grown) return 0;
  uint64_t mine = (end + FK_GROW - 1) / FK_GROW * FK_GROW, all[FK_MAX_PES];
  if (fk_boot_allgather(&mine, all, sizeof mine) != 0) {
    fprintf(stderr, "fakenvshmem: PE %d: the heap's growth exchange failed\n", fk.pe);
    return -1;
  }
  for (int p = 0; p < fk.npes; p++)
    if (all[p] != mine) {
      fprintf(stderr, "fakenvshmem: PE %d grows the heap to %llu bytes, PE %d to %llu\n", fk.pe,
              (unsigned long long)mine, p, (unsigned long long)all[p]);
      return -1;
    }
  fk.grown = (size_t)mine;
  return 0;
}

FK_EXPORT(void *, nvshmem_malloc, (size_t size))
static void *fk_nvshmem_malloc(size_t size) {
  if (!fk.up || size == 0) return NULL;
  if (fk_enter("nvshmem_malloc", size)) return NULL;
  size_t want = (size + FK_ALIGN - 1) & ~(FK_ALIGN - 1);
  for (fk_block_t *b = fk.blocks; b; b = b->next) {
    if (b->used || b->size < want) continue;
    if (b->size > want) {
      fk_block_t *rest = calloc(1, sizeof *rest);
      if (!rest) return NULL;
      rest->off = b->off + want;
      rest->size = b->size - want;
      rest->next = b->next;
      b->next = rest;
      b->size = want;
    }
    if (fk_grow(b->off + want)) return NULL;
    b->used = true;
    fk.stats.mallocs++;
    fk.stats.live++;
    return fk_base(fk.pe) + b->off;
  }
  return NULL; /* every PE runs out together: the same heap, the same calls */
}

FK_EXPORT(void, nvshmem_free, (void *ptr))
static void fk_nvshmem_free(void *ptr) {
  if (!fk.up || !ptr) return;
  long long off = fk_heap_off(ptr, 1);
  if (fk_enter("nvshmem_free", (uint64_t)off)) return;
  for (fk_block_t *b = fk.blocks; b; b = b->next)
    if (b->used && (long long)b->off == off) {
      b->used = false;
      fk.stats.live--;
      fk.stats.frees++;
      /* Merge with the free blocks after it. */
      while (b->next && !b->next->used) {
        fk_block_t *n = b->next;
        b->size += n->size;
        b->next = n->next;
        free(n);
      }
      return;
    }
  fprintf(stderr, "fakenvshmem: PE %d: nvshmem_free(%p) of no allocation\n", fk.pe, ptr);
  abort();
}

/* ----------------------------------------------- registered buffers */

static void fk_reg_free(fk_reg_t *r) {
  for (int p = 0; p < fk.npes; p++) {
    if (r->mapped[p]) fk.cu->cuMemUnmap(r->va + (size_t)p * r->bytes, r->bytes);
    if (r->have_h[p]) fk.cu->cuMemRelease(r->h[p]);
  }
  if (r->va) fk.cu->cuMemAddressFree(r->va, r->bytes * (size_t)fk.npes);
  free(r);
}

/* Maps PE p's registered buffer (its fd published in the control
 * segment; this PE's own handle for itself) into its slot. */
static int fk_reg_map(fk_reg_t *r, int p) {
  if (p != fk.pe) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)fk.ctl->pid[p], (int)fk.ctl->reg_fd[p]);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    ncu_result res = fk.cu->cuMemImportFromShareableHandle(&r->h[p], (void *)(intptr_t)fd,
                                                            NCU_HANDLE_POSIX_FD);
    close(fd);
    if (res != NCU_SUCCESS) return -1;
    r->have_h[p] = true;
  }
  ncu_deviceptr at = r->va + (size_t)p * r->bytes;
  if (fk.cu->cuMemMap(at, r->bytes, 0, r->h[p], 0) != NCU_SUCCESS) return -1;
  r->mapped[p] = true;
  ncu_access_desc acc = {{NCU_LOCATION_DEVICE, 0}, NCU_ACCESS_READWRITE};
  return fk.cu->cuMemSetAccess(at, r->bytes, &acc, 1) == NCU_SUCCESS ? 0 : -1;
}

/* NVSHMEM's checks of the user's buffer, made on this PE alone (so a PE
 * that fails them leaves the others waiting in the exchange, as NVSHMEM
 * does): VMM memory, the start of its mapping, whole pages, inside it. */
static bool fk_reg_check(void *buf, size_t size, ncu_mem_handle *h) {
  ncu_deviceptr start = 0;
  size_t bytes = 0;
  if (fk.cu->cuMemRetainAllocationHandle(h, buf) != NCU_SUCCESS) {
    fprintf(stderr, "fakenvshmem: PE %d: %p is not VMM memory\n", fk.pe, buf);
    return false;
  }
  fk.cu->cuPointerGetAttribute(&start, NCU_PTR_ATTR_RANGE_START, (ncu_deviceptr)(uintptr_t)buf);
  fk.cu->cuPointerGetAttribute(&bytes, NCU_PTR_ATTR_RANGE_SIZE, (ncu_deviceptr)(uintptr_t)buf);
  if (start == (ncu_deviceptr)(uintptr_t)buf && size % FK_ALIGN == 0 && size <= bytes) return true;
  fprintf(stderr, "fakenvshmem: PE %d: %p (%zu bytes) is not the start of a mapping of whole "
          "pages holding it\n", fk.pe, buf, size);
  fk.cu->cuMemRelease(*h);
  return false;
}

/* Every PE publishes its buffer, then maps every PE's. */
static int fk_reg_exchange(fk_reg_t *r) {
  int fd = -1;
  int rc = fk.cu->cuMemExportToShareableHandle(&fd, r->h[fk.pe], NCU_HANDLE_POSIX_FD, 0) ==
                   NCU_SUCCESS ? 0 : -1;
  fk.ctl->reg_fd[fk.pe] = fd;
  if (fk_barrier("buffer_register_symmetric: publishing") || rc) rc = -1;
  if (!rc && fk.cu->cuMemAddressReserve(&r->va, r->bytes * (size_t)fk.npes, 0, 0, 0) != NCU_SUCCESS)
    rc = -1;
  for (int p = 0; p < fk.npes && !rc; p++) rc = fk_reg_map(r, p);
  if (fk_barrier("buffer_register_symmetric: mapping")) rc = -1;
  if (fd >= 0) close(fd);
  return rc;
}

FK_EXPORT(void *, nvshmemx_buffer_register_symmetric, (void *buf, size_t size, int flags))
static void *fk_nvshmemx_buffer_register_symmetric(void *buf, size_t size, int flags) {
  (void)flags;
  fk_reg_t *r = calloc(1, sizeof *r);
  if (!fk.up || !buf || !size || !r || !fk_reg_check(buf, size, &r->h[fk.pe])) {
    free(r);
    return NULL;
  }
  r->have_h[fk.pe] = true;
  r->bytes = size;
  if (fk_enter("nvshmemx_buffer_register_symmetric", size) || fk_reg_exchange(r)) {
    fk_reg_free(r);
    return NULL;
  }
  r->next = fk.regs;
  fk.regs = r;
  fk.stats.registrations++;
  fk.stats.live_registered++;
  return (void *)(uintptr_t)(r->va + (size_t)fk.pe * size);
}

FK_EXPORT(int, nvshmemx_buffer_unregister_symmetric, (void *sym, size_t size))
static int fk_nvshmemx_buffer_unregister_symmetric(void *sym, size_t size) {
  fk_reg_t **pp = &fk.regs;
  while (*pp && ((*pp)->va + (size_t)fk.pe * (*pp)->bytes != (ncu_deviceptr)(uintptr_t)sym ||
                 (*pp)->bytes != size))
    pp = &(*pp)->next;
  if (!fk.up || !*pp) {
    fprintf(stderr, "fakenvshmem: PE %d: unregister of %p (%zu bytes): not registered\n", fk.pe,
            sym, size);
    return FK_ERR;
  }
  fk_reg_t *r = *pp;
  if (fk_enter("nvshmemx_buffer_unregister_symmetric", size)) return FK_ERR;
  *pp = r->next;
  fk_reg_free(r);
  fk.stats.unregistrations++;
  fk.stats.live_registered--;
  return 0;
}

/* A registered buffer's copy of PE pe for p, or NULL. */
static void *fk_reg_ptr(const void *p, int pe) {
  for (fk_reg_t *r = fk.regs; r; r = r->next) {
    ncu_deviceptr mine = r->va + (size_t)fk.pe * r->bytes, at = (ncu_deviceptr)(uintptr_t)p;
    if (at >= mine && at < mine + r->bytes)
      return (void *)(uintptr_t)(r->va + (size_t)pe * r->bytes + (at - mine));
  }
  return NULL;
}

static bool fk_unreachable(int pe) {
  return pe != fk.pe && (fk_in_list("FAKENVSHMEM_UNREACHABLE", pe) ||
                         fk_in_list("FAKENVSHMEM_UNREACHABLE", fk.pe));
}

FK_EXPORT(void *, nvshmem_ptr, (const void *ptr, int pe))
static void *fk_nvshmem_ptr(const void *ptr, int pe) {
  long long off = fk_heap_off(ptr, 1);
  if (pe < 0 || pe >= fk.npes || fk_unreachable(pe)) return NULL;
  if (off < 0) return fk_reg_ptr(ptr, pe);
  return fk_base(pe) + off;
}

FK_EXPORT(int, nvshmem_my_pe, (void))
static int fk_nvshmem_my_pe(void) { return fk.up ? fk.pe : -1; }
FK_EXPORT(int, nvshmem_n_pes, (void))
static int fk_nvshmem_n_pes(void) { return fk.up ? fk.npes : -1; }

FK_EXPORT(void, nvshmemx_vendor_get_version_info, (int *major, int *minor, int *patch))
static void fk_nvshmemx_vendor_get_version_info(int *major, int *minor, int *patch) {
  const char *v = getenv("FAKENVSHMEM_VERSION");
  *major = 3, *minor = 8, *patch = 0;
  if (v && *v) sscanf(v, "%d.%d.%d", major, minor, patch);
}

/* ----------------------------------------------------- on-stream RMA */

/* A peer's copy of the symmetric [p, p + n), or NULL (aborting: NVSHMEM
 * needs symmetric memory there). */
static char *fk_sym(const void *p, size_t n, int pe, const char *what) {
  long long off = fk_heap_off(p, n);
  if (off < 0 || pe < 0 || pe >= fk.npes) {
    fprintf(stderr, "fakenvshmem: PE %d: %s on %p (%zu bytes, PE %d) outside the symmetric "
            "heap\n", fk.pe, what, p, n, pe);
    abort();
  }
  return fk_base(pe) + off;
}

FK_EXPORT(void, nvshmemx_putmem_on_stream,
          (void *dest, const void *src, size_t bytes, int pe, void *stream))
static void fk_nvshmemx_putmem_on_stream(void *dest, const void *src, size_t bytes, int pe,
                                         void *stream) {
  (void)stream;
  memcpy(fk_sym(dest, bytes, pe, "putmem"), src, bytes);
}

FK_EXPORT(void, nvshmemx_getmem_on_stream,
          (void *dest, const void *src, size_t bytes, int pe, void *stream))
static void fk_nvshmemx_getmem_on_stream(void *dest, const void *src, size_t bytes, int pe,
                                         void *stream) {
  (void)stream;
  memcpy(dest, fk_sym(src, bytes, pe, "getmem"), bytes);
}

/* ------------------------------------------------------- collectives */

static float fk_from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0 && m == 0) bits = sign;
  else if (e == 31) bits = sign | 0x7f800000u | (m << 13);
  else if (e == 0) { /* subnormal */
    float f = (float)m / 1024.0f / 16384.0f;
    return sign ? -f : f;
  } else bits = sign | ((e + 112) << 23) | (m << 13);
  return f32_of_bits(bits);
}

static uint16_t fk_to_half(float f) {
  uint32_t b = bits_of(f);
  uint32_t sign = (b >> 16) & 0x8000;
  int e = (int)((b >> 23) & 255) - 112;
  uint32_t m = b & 0x7fffff;
  if (e <= 0) return (uint16_t)sign;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13);
  if (m & 0x1000) h++; /* round half up: close enough for the tests' integers */
  return (uint16_t)h;
}

static float fk_load(int type, const char *p, size_t i) {
  switch (type) {
    case 0: return ((const float *)p)[i];
    case 1: {
      uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
      float f;
      memcpy(&f, &b, sizeof f);
      return f;
    }
    case 2: return fk_from_half(((const uint16_t *)p)[i]);
    default: return (float)((const int32_t *)p)[i];
  }
}

static void fk_store(int type, char *p, size_t i, double v, int32_t iv) {
  switch (type) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: {
      float f = (float)v;
      uint32_t b;
      memcpy(&b, &f, sizeof b);
      ((uint16_t *)p)[i] = (uint16_t)((b + 0x8000u) >> 16);
      break;
    }
    case 2: ((uint16_t *)p)[i] = fk_to_half((float)v); break;
    default: ((int32_t *)p)[i] = iv; break;
  }
}

static const size_t fk_type_bytes[NVSH_RED_TYPES] = {4, 2, 2, 4};

/* dest[i] = op over every PE of src_pe[at + i], i < n. */
static int fk_reduce(int type, int op, void *dest, const void *src, size_t n, bool scatter) {
  const size_t es = fk_type_bytes[type], in = n * es * (scatter ? (size_t)fk.npes : 1);
  char *mine = fk_sym(src, in, fk.pe, "reduce source");
  fk_sym(dest, n * es, fk.pe, "reduce destination");
  if (fk_enter(scatter ? "reducescatter" : "reduce", (uint64_t)(type * 16 + op) << 48 | n))
    return FK_ERR;
  const size_t at = scatter ? (size_t)fk.pe * n : 0;
  for (size_t i = 0; i < n; i++) {
    double acc = 0;
    int32_t iacc = 0;
    for (int p = 0; p < fk.npes; p++) {
      const char *s = fk_base(p) + (mine - fk_base(fk.pe));
      double v = type == 3 ? 0 : fk_load(type, s, at + i);
      int32_t iv = type == 3 ? ((const int32_t *)s)[at + i] : 0;
      if (p == 0) acc = v, iacc = iv;
      else if (op == 0) acc += v, iacc = (int32_t)((uint32_t)iacc + (uint32_t)iv);
      else if (op == 1) acc = v < acc ? v : acc, iacc = iv < iacc ? iv : iacc;
      else acc = v > acc ? v : acc, iacc = iv > iacc ? iv : iacc;
    }
    fk_store(type, dest, i, acc, iacc);
  }
  return fk_barrier("reduce: done reading");
}

#define FK_REDUCE(tname, tidx, opname, opidx)                                              \
  FK_EXPORT(int, nvshmemx_##tname##_##opname##_reduce_on_stream,                           \
            (int32_t team, void *d, const void *s, size_t n, void *st))                    \
  static int fk_nvshmemx_##tname##_##opname##_reduce_on_stream(int32_t team, void *d,      \
                                                              const void *s, size_t n,     \
                                                              void *st) {                  \
    (void)st;                                                                              \
    return team == NVSH_TEAM_WORLD ? fk_reduce(tidx, opidx, d, s, n, false) : FK_ERR;      \
  }                                                                                        \
  FK_EXPORT(int, nvshmemx_##tname##_##opname##_reducescatter_on_stream,                    \
            (int32_t team, void *d, const void *s, size_t n, void *st))                    \
  static int fk_nvshmemx_##tname##_##opname##_reducescatter_on_stream(                     \
      int32_t team, void *d, const void *s, size_t n, void *st) {                          \
    (void)st;                                                                              \
    return team == NVSH_TEAM_WORLD ? fk_reduce(tidx, opidx, d, s, n, true) : FK_ERR;       \
  }
#define FK_REDUCE_OPS(tname, tidx) \
  FK_REDUCE(tname, tidx, sum, 0) FK_REDUCE(tname, tidx, min, 1) FK_REDUCE(tname, tidx, max, 2)
FK_REDUCE_OPS(float, 0)
FK_REDUCE_OPS(bfloat16, 1)
FK_REDUCE_OPS(half, 2)
FK_REDUCE_OPS(int32, 3)

/* kind: 0 fcollect, 1 broadcast, 2 alltoall; bytes per PE. */
static int fk_move(int kind, void *dest, const void *src, size_t bytes, int root) {
  const size_t w = (size_t)fk.npes;
  const size_t in = kind == 2 ? bytes * w : bytes, out = kind == 1 ? bytes : bytes * w;
  char *s = fk_sym(src, in, fk.pe, "collective source");
  char *d = fk_sym(dest, out, fk.pe, "collective destination");
  if (fk_enter(kind == 0 ? "fcollect" : kind == 1 ? "broadcast" : "alltoall",
               (uint64_t)kind << 56 | (uint64_t)(root & 0xff) << 48 | bytes))
    return FK_ERR;
  const size_t soff = (size_t)(s - fk_base(fk.pe));
  for (size_t p = 0; p < w; p++) {
    const char *peer = fk_base((int)p) + soff;
    if (kind == 0) memcpy(d + p * bytes, peer, bytes);
    else if (kind == 2) memcpy(d + p * bytes, peer + (size_t)fk.pe * bytes, bytes);
    else if ((int)p == root) memcpy(d, peer, bytes);
  }
  return fk_barrier("collective: done reading");
}

/* fk_move over the team, the only one the fake has (NVSH_TEAM_WORLD);
 * root is broadcast's, 0 for the others. */
static int fk_team_move(int32_t team, int kind, void *d, const void *s, size_t bytes, int root) {
  return team == NVSH_TEAM_WORLD && root >= 0 && root < fk.npes
             ? fk_move(kind, d, s, bytes, root)
             : FK_ERR;
}

/* The collectives without a root, the same but for fk_move's kind. */
#define FK_ROOTLESS_COLLECTIVE(name, kind)                                                 \
  FK_EXPORT(int, name, (int32_t team, void *d, const void *s, size_t bytes, void *st))     \
  static int fk_##name(int32_t team, void *d, const void *s, size_t bytes, void *st) {     \
    (void)st;                                                                              \
    return fk_team_move(team, kind, d, s, bytes, 0);                                       \
  }
FK_ROOTLESS_COLLECTIVE(nvshmemx_fcollectmem_on_stream, 0)
FK_ROOTLESS_COLLECTIVE(nvshmemx_alltoallmem_on_stream, 2)

FK_EXPORT(int, nvshmemx_broadcastmem_on_stream,
          (int32_t team, void *d, const void *s, size_t bytes, int root, void *st))
static int fk_nvshmemx_broadcastmem_on_stream(int32_t team, void *d, const void *s, size_t bytes,
                                              int root, void *st) {
  (void)st;
  return fk_team_move(team, 1, d, s, bytes, root);
}

/* ------------------------------------------------------------- tests */

FK_API void fakenvshmem_stats(fakenvshmem_stats_t *out) {
  *out = fk.stats;
  out->up = fk.up;
}
