/*
 * The nccl backend on machines without a GPU: every test loads the fake
 * libnccl of fake_nccl.c (SYMM_NCCL_LIB) over the fake CUDA driver of
 * fake_cuda.c (SYMM_CUDA_LIB), whose "device memory" is shared host memory,
 * so the backend's real paths (unique id through the init blob, the
 * non-blocking communicator, window registration, peer pointers, NCCL's
 * own collectives, the waits that keep to the timeout) run across
 * processes and the CPU checks the data.  One test loads the real library
 * where an nvidia-nccl wheel is installed.  `nccl-fake-tests NAME` runs one
 * test; ctest runs each (list-nccl-fake.h) in its own process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/nccl/nccl.h"
#include "symm_test_access.h"
#include "cb_channel.h"
#include "fakenccl.h"
#include "fake_a2av.h"
#include "fake_user_mem.h"
#include "fake_util.h"
#include "harness.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "list-nccl-fake.h"
#undef TEST_ENTRY

/* ------------------------------------------------------------- helpers */

static void *fakenccl_sym(const char *name) {
  void *lib = dlopen(FAKENCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  void *fn = lib ? dlsym(lib, name) : NULL;
  if (lib) dlclose(lib);
  return fn;
}

static fakenccl_stats_t fakenccl_stats_of(void) {
  fakenccl_stats_t s;
  memset(&s, 0xff, sizeof s);
  void (*fn)(fakenccl_stats_t *) = NULL;
  *(void **)&fn = fakenccl_sym("fakenccl_stats");
  if (fn) fn(&s);
  return s;
}


/* A job of n nccl ranks with SYMM_TIMEOUT_MS = symm_timeout_ms; the number
 * of ranks that failed; status[] (may be NULL) their wait statuses. */
static int run_job_opts(int n, test_rank_fn fn, void *arg, int symm_timeout_ms, int *status) {
  test_job_opts_t o = {.timeout_ms = 50000, .backend = "nccl", .store_timeout_ms = symm_timeout_ms,
                       .kill_rank = -1, .exit_status = status};
  return test_run_ranks_opts(n, fn, arg, &o);
}

static int run_job(int n, test_rank_fn fn, void *arg) {
  return run_job_opts(n, fn, arg, 15000, NULL);
}

static symm_tensor_t *alloc_1d(symm_comm_t *comm, int64_t n, symm_dtype_t dt) {
  symm_tensor_t *t = NULL;
  symm_result_t r = symm_tensor_alloc(comm, &n, 1, dt, &t);
  if (r != SYMM_SUCCESS) fprintf(stderr, "alloc: %s\n", symm_last_error());
  return t;
}

/* What probe says with the environment as it is now. */
static symm_result_t probe_now(char *why, size_t cap) {
  ASSERT_OK(symm_settings_load());
  why[0] = 0;
  return symm_backend_available(SYMM_BACKEND_NCCL, why, cap);
}

/* -------------------------------------------------------------- units */

TEST_IMPL(nccl_fake_version_codes) {
  int a, b, c;
  symm_nccl_version_parts(22902, &a, &b, &c);
  ASSERT(a == 2 && b == 29 && c == 2);
  symm_nccl_version_parts(2804, &a, &b, &c); /* the encoding before 2.9 */
  ASSERT(a == 2 && b == 8 && c == 4);
  symm_nccl_version_parts(23203, &a, &b, &c);
  ASSERT(a == 2 && b == 32 && c == 3);
  ASSERT_EQ(SYMM_NCCL_VERSION(2, 29, 2), 22902);
  ASSERT_EQ(SYMM_NCCL_VERSION(2, 8, 4), 2804);
  ASSERT_EQ(NCCL_PEER_PTR_VERSION, 22902);
  symm_nccl_config_t cfg;
  symm_nccl_config_init(&cfg);
  ASSERT_EQ(cfg.size, sizeof cfg);
  ASSERT_EQ(cfg.magic, 0xcafebeefu);
  ASSERT_EQ(cfg.version, 22700);
  ASSERT_EQ(cfg.blocking, SYMM_NCCL_CONFIG_UNDEF);
  ASSERT_EQ(cfg.nvls_ctas, SYMM_NCCL_CONFIG_UNDEF);
  /* ncclConfig_t of 2.27: 3 header fields, 4 ints, a pointer, 2 ints, a
   * pointer, 4 ints. */
  ASSERT_EQ(offsetof(symm_nccl_config_t, net_name), 32);
  ASSERT_EQ(offsetof(symm_nccl_config_t, comm_name), 48);
  ASSERT_EQ(sizeof cfg, 72);
  return 0;
}

static int forced_rank(int rank, int size, void *arg) {
  (void)size;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), (const char *)arg);
  return 0;
}

TEST_IMPL(nccl_fake_probe_no_library) {
  char why[1024];
  setenv("SYMM_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  ASSERT_RES(probe_now(why, sizeof why), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "/nonexistent/libnccl.so.2");
  ASSERT_STR_CONTAINS(why, "SYMM_NCCL_LIB");
  ASSERT_EQ(run_job(1, forced_rank, "/nonexistent/libnccl.so.2"), 0);
  return 0;
}

TEST_IMPL(nccl_fake_probe_missing_symbol) {
  char why[1024];
  setenv("FAKENCCL_MISSING", "ncclCommWindowRegister", 1);
  ASSERT_RES(probe_now(why, sizeof why), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "ncclCommWindowRegister");
  ASSERT_STR_CONTAINS(why, "2.27");
  ASSERT_STR_CONTAINS(why, FAKENCCL_PATH);
  /* One the benchmark needs too: the loader itself refuses. */
  setenv("FAKENCCL_MISSING", "ncclGetUniqueId", 1);
  symm_nccl_lib_t lib;
  ASSERT(!symm_nccl_lib_load(&lib, FAKENCCL_PATH, why, sizeof why));
  ASSERT_STR_CONTAINS(why, "ncclGetUniqueId");
  return 0;
}

/* A Python environment whose nvidia-nccl wheel holds the library (here the
 * fake) is found when SYMM_NCCL_LIB is left at its default. */
TEST_IMPL(nccl_fake_probe_wheel) {
  char dir[] = "/tmp/symm-wheel-XXXXXX", path[512], why[1024], found[1024], where[1024];
  ASSERT(mkdtemp(dir));
  const char *parts[] = {"/lib", "/lib/python3.99", "/lib/python3.99/site-packages",
                         "/lib/python3.99/site-packages/nvidia",
                         "/lib/python3.99/site-packages/nvidia/nccl",
                         "/lib/python3.99/site-packages/nvidia/nccl/lib"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    snprintf(path, sizeof path, "%s%s", dir, parts[i]);
    ASSERT_EQ(mkdir(path, 0700), 0);
  }
  snprintf(path, sizeof path, "%s%s/libnccl.so.2", dir, parts[5]);
  ASSERT_EQ(symlink(FAKENCCL_PATH, path), 0);
  unsetenv("SYMM_NCCL_LIB");
  unsetenv("CONDA_PREFIX");
  setenv("VIRTUAL_ENV", "/nonexistent-env", 1);
  setenv("HOME", "/nonexistent-home", 1);
  setenv("PATH", "/nonexistent-bin", 1);
  ASSERT(!nccl_find_wheel(found, sizeof found, where, sizeof where));
  ASSERT_STR_CONTAINS(where, "/nonexistent-env/lib/python3*/site-packages/nvidia/nccl/lib/");
  setenv("VIRTUAL_ENV", dir, 1);
  ASSERT(nccl_find_wheel(found, sizeof found, where, sizeof where));
  ASSERT_STR_CONTAINS(found, path);
  /* The loader's own search comes first: end to end only where it has none. */
  void *sys = dlopen(SYMM_NCCL_LIB_DEFAULT, RTLD_NOW | RTLD_LOCAL);
  if (sys) {
    printf("the dynamic loader finds a libnccl.so.2 here, which comes before the wheel\n");
    snprintf(path, sizeof path, "%s", SYMM_NCCL_LIB_DEFAULT);
  }
  ASSERT_OK(probe_now(why, sizeof why));
  char out[4096] = "";
  FILE *f = fmemopen(out, sizeof out - 1, "w");
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NCCL, f));
  fclose(f);
  ASSERT_STR_CONTAINS(out, path);
  if (!sys) {
    ASSERT_STR_CONTAINS(out, "NCCL 2.29.2");
    ASSERT_STR_CONTAINS(out, "peer pointers: yes");
  }
  snprintf(path, sizeof path, "%s%s/libnccl.so.2", dir, parts[5]);
  unlink(path);
  for (size_t i = sizeof parts / sizeof parts[0]; i-- > 0;) {
    snprintf(path, sizeof path, "%s%s", dir, parts[i]);
    rmdir(path);
  }
  rmdir(dir);
  return 0;
}

/* A copy of the fake (a file of its own, so that the loader loads it as
 * another library) as env/lib/python3.99/site-packages/nvidia/nccl/lib/
 * libnccl.so.2; its path into lib. */
static int make_wheel_env(const char *env, char *lib, size_t cap) {
  static const char *const parts[] = {"", "/lib", "/lib/python3.99",
                                      "/lib/python3.99/site-packages",
                                      "/lib/python3.99/site-packages/nvidia",
                                      "/lib/python3.99/site-packages/nvidia/nccl",
                                      "/lib/python3.99/site-packages/nvidia/nccl/lib"};
  char path[512], cmd[1200];
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    snprintf(path, sizeof path, "%s%s", env, parts[i]);
    ASSERT_EQ(mkdir(path, 0700), 0);
  }
  snprintf(lib, cap, "%s%s/libnccl.so.2", env, parts[6]);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", FAKENCCL_PATH, lib);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* Two NCCLs in two Python environments, the older first: the newest is
 * taken, and describe says which and over which; a library that
 * SYMM_NCCL_LIB names is taken alone, whatever its version. */
TEST_IMPL(nccl_fake_newest_found) {
  char dir[] = "/tmp/symm-nccls-XXXXXX", old_env[256], new_env[256], old_lib[512],
      new_lib[512], why[1024];
  ASSERT(mkdtemp(dir));
  snprintf(old_env, sizeof old_env, "%s/nccl-old-env", dir);
  snprintf(new_env, sizeof new_env, "%s/nccl-new-env", dir);
  ASSERT_EQ(make_wheel_env(old_env, old_lib, sizeof old_lib), 0);
  ASSERT_EQ(make_wheel_env(new_env, new_lib, sizeof new_lib), 0);
  setenv("FAKENCCL_VERSION_IF", "nccl-old-env=22809,nccl-new-env=22902", 1);
  unsetenv("SYMM_NCCL_LIB");
  setenv("VIRTUAL_ENV", old_env, 1);
  setenv("CONDA_PREFIX", new_env, 1);
  setenv("HOME", "/nonexistent-home", 1);
  char *path_was = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  setenv("PATH", "/nonexistent-bin", 1);
  void *sys = dlopen(SYMM_NCCL_LIB_DEFAULT, RTLD_NOW | RTLD_LOCAL);
  ASSERT_OK(probe_now(why, sizeof why));
  char out[4096] = "";
  FILE *f = fmemopen(out, sizeof out - 1, "w");
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NCCL, f));
  fclose(f);
  printf("%s", out);
  ASSERT_STR_CONTAINS(out, "chosen: the newest usable of ");
  ASSERT_STR_CONTAINS(out, "NCCL 2.28.9 at ");
  ASSERT_STR_CONTAINS(out, old_lib);
  if (!sys) { /* else the loader's own is a third, and may be newer */
    ASSERT_STR_CONTAINS(out, "of 2 found");
    char want[600];
    snprintf(want, sizeof want, "library: %s, NCCL 2.29.2", new_lib);
    ASSERT_STR_CONTAINS(out, want);
  }
  /* Named: that one only, though older. */
  setenv("SYMM_NCCL_LIB", old_lib, 1);
  ASSERT_OK(probe_now(why, sizeof why));
  memset(out, 0, sizeof out);
  f = fmemopen(out, sizeof out - 1, "w");
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NCCL, f));
  fclose(f);
  char want[600];
  snprintf(want, sizeof want, "library: %s, NCCL 2.28.9", old_lib);
  ASSERT_STR_CONTAINS(out, want);
  ASSERT(!strstr(out, "chosen:"));
  setenv("PATH", path_was, 1);
  free(path_was);
  snprintf(want, sizeof want, "rm -rf '%s'", dir);
  ASSERT_EQ(system(want), 0);
  return 0;
}

/* `auto` passes nccl over even where it is usable (native unusable here:
 * cuda or host runs). */
static int auto_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  char why[512];
  ASSERT_OK(symm_backend_available(SYMM_BACKEND_NCCL, why, sizeof why));
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(symm_comm_backend(comm) != SYMM_BACKEND_NCCL &&
                 symm_comm_backend(comm) != SYMM_BACKEND_NVSHMEM,
             "auto chose %s", symm_backend_name(symm_comm_backend(comm)));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_not_auto) {
  setenv("FAKECUDA_NO_VMM", "1", 1); /* native unusable: nccl would be next */
  test_job_opts_t o = {.backend = "auto", .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(2, auto_rank, NULL, &o), 0);
  return 0;
}

/* ---------------------------------------------------------- full path */

static int64_t value_at(int writer, int64_t i) { return (int64_t)writer * 1000003 + i; }

static int full_path_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(strcmp(symm_backend_name(symm_comm_backend(comm)), "nccl") == 0, "backend %s",
             symm_backend_name(symm_comm_backend(comm)));
  ASSERT_MSG(getenv("NCCL_NVLS_ENABLE") && strcmp(getenv("NCCL_NVLS_ENABLE"), "0") == 0,
             "NVLS not off");
  int64_t sizes[2] = {3, 1001}, numel = 3 * 1001;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, sizes, 2, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, right, &v));
  ASSERT_MSG(v.device == symm_comm_device(comm), "view device %d", v.device);
  for (int64_t i = 0; i < numel; i++) ((int64_t *)v.data)[i] = value_at(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const int64_t *mine = symm_tensor_data(t);
  for (int64_t i = 0; i < numel; i++)
    ASSERT_MSG(mine[i] == value_at(left, i), "[%lld] = %lld", (long long)i, (long long)mine[i]);
  void *const *ptrs, *const *dev;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++)
    ASSERT_MSG(((int64_t *)ptrs[r])[5] == value_at((r + size - 1) % size, 5), "rank %d's data", r);
  ASSERT_OK(symm_tensor_peer_ptrs_device(t, &dev));
  symm_view_t cv;
  ASSERT_RES(symm_tensor_contiguous_view(t, &cv), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "native");
  void *h = NULL;
  ASSERT_OK(symm_comm_backend_handle(comm, &h));
  ASSERT_MSG(h != NULL, "no ncclComm_t");
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.live_comms == 1 && s.nonblocking == 1 && s.inits_config == 1 && s.inits_plain == 0,
             "comms %ld nonblocking %ld config %ld plain %ld", s.live_comms, s.nonblocking,
             s.inits_config, s.inits_plain);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  s = fakenccl_stats_of();
  ASSERT_MSG(s.live_comms == 0 && s.live_windows == 0 && s.live_allocs == 0,
             "left: comms %ld windows %ld allocs %ld", s.live_comms, s.live_windows, s.live_allocs);
  return 0;
}

TEST_IMPL(nccl_fake_full_path_2) {
  ASSERT_EQ(run_job(2, full_path_rank, NULL), 0);
  return 0;
}

TEST_IMPL(nccl_fake_full_path_4) {
  setenv("FAKECUDA_DEVICES", "4", 1);
  ASSERT_EQ(run_job(4, full_path_rank, NULL), 0);
  return 0;
}

static int blocking_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.inits_plain == 1 && s.inits_config == 0 && s.nonblocking == 0,
             "plain %ld config %ld", s.inits_plain, s.inits_config);
  symm_tensor_t *t = alloc_1d(comm, 1024, SYMM_DTYPE_F32);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, 1 - rank, &v));
  ((float *)v.data)[3] = (float)rank + 0.5f;
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_MSG(((float *)symm_tensor_data(t))[3] == (float)(1 - rank) + 0.5f, "data");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

/* An NCCL without ncclCommInitRankConfig: the blocking init. */
TEST_IMPL(nccl_fake_blocking_init) {
  setenv("FAKENCCL_MISSING", "ncclCommInitRankConfig", 1);
  ASSERT_EQ(run_job(2, blocking_rank, NULL), 0);
  return 0;
}

/* One registration per allocation: a pooled one keeps its window. */
static int register_once_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  long base = fakenccl_stats_of().registrations; /* startup's reach probe */
  ASSERT_MSG(base == 1, "startup registered %ld windows", base);
  symm_tensor_t *t = alloc_1d(comm, 4096, SYMM_DTYPE_F32);
  ASSERT_MSG(t, "alloc");
  void *first = symm_tensor_data(t);
  ASSERT_EQ(fakenccl_stats_of().registrations, base + 1);
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  for (int i = 0; i < 5; i++) {
    t = alloc_1d(comm, 4096, SYMM_DTYPE_F32);
    ASSERT_MSG(t && symm_tensor_data(t) == first, "not the pooled allocation");
    ASSERT_OK(symm_tensor_rendezvous(t));
    symm_tensor_free(t);
  }
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.registrations == base + 1 && s.live_windows == 1, "registrations %ld live %ld",
             s.registrations, s.live_windows);
  size_t released = 0;
  ASSERT_OK(symm_comm_pool_trim(comm, &released));
  ASSERT_MSG(released > 0 && fakenccl_stats_of().live_windows == 0, "trim left %ld windows",
             fakenccl_stats_of().live_windows);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_register_once) {
  ASSERT_EQ(run_job(2, register_once_rank, NULL), 0);
  return 0;
}

/* The ncclComm_t runs the user's own NCCL calls on our tensors. */
static int handle_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  void *h = NULL, *h2 = NULL;
  ASSERT_OK(symm_comm_backend_handle(comm, &h));
  ASSERT_OK(symm_comm_native_handle(comm, &h2));
  ASSERT_MSG(h && h == h2, "handles %p %p", h, h2);
  symm_tensor_t *t = alloc_1d(comm, 256, SYMM_DTYPE_I32);
  ASSERT_MSG(t, "alloc");
  int32_t *x = symm_tensor_data(t);
  for (int i = 0; i < 256; i++) x[i] = rank + i;
  int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *) = NULL;
  *(void **)&all_reduce = fakenccl_sym("ncclAllReduce");
  ASSERT_MSG(all_reduce && all_reduce(x, x, 256, SYMM_NCCL_INT32, SYMM_NCCL_SUM, h, NULL) == 0,
             "ncclAllReduce");
  for (int i = 0; i < 256; i++)
    ASSERT_MSG(x[i] == size * (size - 1) / 2 + size * i, "[%d] = %d", i, x[i]);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_handle_mixes) {
  ASSERT_EQ(run_job(3, handle_rank, NULL), 0);
  return 0;
}

/* --------------------------------------------- NCCL's own collectives */

/* Every collective through the provider, checked on the host. */
static int provider_colls(symm_comm_t *comm, int rank, int size) {
  const int64_t n = 64;
  symm_tensor_t *a = alloc_1d(comm, n * size, SYMM_DTYPE_I32);
  symm_tensor_t *b = alloc_1d(comm, n * size, SYMM_DTYPE_I32);
  ASSERT_MSG(a && b, "alloc");
  int32_t *x = symm_tensor_data(a), *y = symm_tensor_data(b);
  for (int i = 0; i < n; i++) x[i] = rank * 100 + i;
  ASSERT_OK(symm_all_reduce(comm, x, y, (size_t)n, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < n; i++)
    ASSERT_MSG(y[i] == 100 * size * (size - 1) / 2 + size * i, "all-reduce [%d] = %d", i, y[i]);
  ASSERT_OK(symm_all_reduce(comm, x, y, (size_t)n, SYMM_DTYPE_I32, SYMM_REDUCE_MAX, NULL));
  ASSERT_MSG(y[1] == 100 * (size - 1) + 1, "max %d", y[1]);
  ASSERT_OK(symm_all_gather(comm, x, y, (size_t)n, SYMM_DTYPE_I32, NULL));
  for (int r = 0; r < size; r++) ASSERT_MSG(y[r * n + 7] == r * 100 + 7, "all-gather from %d", r);
  for (int i = 0; i < n * size; i++) x[i] = rank + i;
  ASSERT_OK(symm_reduce_scatter(comm, x, y, (size_t)n, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < n; i++)
    ASSERT_MSG(y[i] == size * (size - 1) / 2 + size * (rank * (int)n + i), "reduce-scatter [%d]",
               i);
  for (int i = 0; i < n; i++) x[i] = 1000 * rank + i;
  ASSERT_OK(symm_broadcast(comm, x, y, (size_t)n, SYMM_DTYPE_I32, size - 1, NULL));
  ASSERT_MSG(y[9] == 1000 * (size - 1) + 9, "broadcast %d", y[9]);
  for (int i = 0; i < n * size; i++) x[i] = 10000 * rank + i;
  ASSERT_OK(symm_all_to_all(comm, x, y, (size_t)n, SYMM_DTYPE_I32, NULL));
  for (int r = 0; r < size; r++)
    ASSERT_MSG(y[r * n + 3] == 10000 * r + rank * n + 3, "all-to-all from %d: %d", r, y[r * n + 3]);
  symm_tensor_free(a);
  symm_tensor_free(b);
  return 0;
}

static int old_version_rank(int rank, int size, void *arg) {
  const char *version = arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(fakenccl_stats_of().registrations == 0, "no reach probe without peer pointers");
  symm_tensor_t *t = alloc_1d(comm, 64, SYMM_DTYPE_I32);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  int peer = (rank + 1) % size;
  symm_view_t v;
  ASSERT_RES(symm_tensor_remote_view(t, peer, &v), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), version);
  ASSERT_STR_CONTAINS(symm_last_error(), "2.29.2");
  ASSERT_STR_CONTAINS(symm_last_error(), "ncclGetPeerDevicePointer");
  void *const *ptrs, *const *dev;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_MSG(ptrs[rank] && !ptrs[peer], "pointers %p %p", ptrs[rank], ptrs[peer]);
  ASSERT_RES(symm_tensor_peer_ptrs_device(t, &dev), SYMM_ERR_UNSUPPORTED);
  ASSERT_RES(symm_signal_put(t, peer, 0, NULL), SYMM_ERR_UNSUPPORTED);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  long before = fakenccl_stats_of().collectives;
  if (provider_colls(comm, rank, size)) return 1;
  ASSERT_MSG(fakenccl_stats_of().collectives == before + 6, "%ld NCCL collectives",
             fakenccl_stats_of().collectives - before);
  symm_comm_destroy(comm);
  return 0;
}

/* An NCCL before 2.29.2: allocation, registration and NCCL's collectives
 * work, remote views are refused naming both versions. */
TEST_IMPL(nccl_fake_old_version) {
  setenv("FAKENCCL_VERSION", "22805", 1);
  ASSERT_EQ(run_job(3, old_version_rank, "2.28.5"), 0);
  return 0;
}

static int p2p_rank(int rank, int size, void *arg) {
  if (old_version_rank(rank, size, arg)) return 1;
  ASSERT_MSG(fakenccl_stats_of().p2p_groups == 1, "%ld groups", fakenccl_stats_of().p2p_groups);
  return 0;
}

/* No ncclAlltoAll (before 2.28): sends and receives in one group. */
TEST_IMPL(nccl_fake_alltoall_by_p2p) {
  setenv("FAKENCCL_VERSION", "22705", 1);
  ASSERT_EQ(run_job(3, p2p_rank, "2.27.5"), 0);
  return 0;
}

static int unreachable_rank(int rank, int size, void *arg) {
  (void)arg;
  const int far = size - 1;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_1d(comm, 64, SYMM_DTYPE_I32);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  for (int r = 0; r < size; r++) {
    if (r == rank) continue;
    if ((rank == far) == (r == far)) {
      ASSERT_OK(symm_tensor_remote_view(t, r, &v));
    } else {
      ASSERT_RES(symm_tensor_remote_view(t, r, &v), SYMM_ERR_UNSUPPORTED);
      ASSERT_STR_CONTAINS(symm_last_error(), "maps no pointer");
    }
  }
  symm_tensor_free(t);
  long before = fakenccl_stats_of().collectives;
  if (provider_colls(comm, rank, size)) return 1;
  ASSERT_MSG(fakenccl_stats_of().collectives == before + 6, "collectives ran elsewhere");
  symm_comm_destroy(comm);
  return 0;
}

/* A peer NCCL maps no pointer to (another host): views of it refused,
 * collectives through NCCL. */
TEST_IMPL(nccl_fake_unreachable_peer) {
  setenv("FAKENCCL_UNREACHABLE", "2", 1);
  ASSERT_EQ(run_job(3, unreachable_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------- failure modes */

static int null_window_init_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  symm_result_t res = symm_comm_init(NULL, &comm);
  ASSERT_MSG(res != SYMM_SUCCESS && !comm, "init: %s", symm_strerror(res));
  ASSERT_STR_CONTAINS(symm_last_error(), "no symmetric-memory support");
  return 0;
}

/* ncclSuccess without a window at start-up's registration: init fails on
 * every rank, naming why. */
TEST_IMPL(nccl_fake_null_window_startup) {
  setenv("FAKENCCL_NULL_WINDOW", "1", 1);
  ASSERT_EQ(run_job(2, null_window_init_rank, NULL), 0);
  return 0;
}

static int null_window_alloc_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 1024;
  symm_tensor_t *t = NULL;
  for (int i = 0; i < 2; i++) {
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "no symmetric-memory support");
    ASSERT_MSG(!t, "a tensor without a window");
  }
  ASSERT_EQ(fakenccl_stats_of().live_allocs, 0); /* allocations left */
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

/* The same at an allocation's registration (no start-up registration
 * before 2.29.2): the allocation fails on every rank, nothing leaks. */
TEST_IMPL(nccl_fake_null_window_alloc) {
  setenv("FAKENCCL_NULL_WINDOW", "1", 1);
  setenv("FAKENCCL_VERSION", "22805", 1);
  ASSERT_EQ(run_job(2, null_window_alloc_rank, NULL), 0);
  return 0;
}

static int init_fail_rank(int rank, int size, void *arg) {
  (void)size;
  int timeout_ms = *(int *)arg;
  uint64_t start = test_now_ms();
  symm_comm_t *comm = NULL;
  symm_result_t res = symm_comm_init(NULL, &comm);
  uint64_t took = test_now_ms() - start;
  ASSERT_MSG(res != SYMM_SUCCESS && !comm, "init: %s", symm_strerror(res));
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  ASSERT_MSG(took < (uint64_t)timeout_ms / 2, "took %llu ms", (unsigned long long)took);
  if (rank == 1) ASSERT_STR_CONTAINS(symm_last_error(), "FAKENCCL_INIT_FAIL_RANK");
  printf("rank %d: %s after %llu ms: %s\n", rank, symm_strerror(res), (unsigned long long)took,
         symm_last_error());
  return 0;
}

/* One rank's ncclCommInitRank fails: the others, waiting in NCCL for it,
 * learn it from the store at once, not at the timeout. */
TEST_IMPL(nccl_fake_init_fails_on_one_rank) {
  int timeout_ms = 20000;
  setenv("FAKENCCL_INIT_FAIL_RANK", "1", 1);
  ASSERT_EQ(run_job_opts(3, init_fail_rank, &timeout_ms, timeout_ms, NULL), 0);
  return 0;
}

/* init_fail_rank on the caller's callbacks (no store anywhere) of
 * `version`, with timeout_ms. */
typedef struct {
  unsigned version;
  int timeout_ms;
} cb_fail_t;

static int init_fail_cb_rank(int rank, int size, void *arg) {
  const cb_fail_t *f = arg;
  cb_channel_forget_store();
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  cb_channel_open(&ch, 0, rank, size, f->version, &cb);
  uint64_t start = test_now_ms();
  symm_comm_t *comm = NULL;
  symm_result_t res = cb_channel_comm_init(&cb, SYMM_BACKEND_NCCL, f->timeout_ms, &comm);
  uint64_t took = test_now_ms() - start;
  printf("rank %d: %s after %llu ms (%d note looks): %s\n", rank, symm_strerror(res),
         (unsigned long long)took, ch.note_gets, symm_last_error());
  ASSERT_MSG(res != SYMM_SUCCESS && !comm, "init: %s", symm_strerror(res));
  if (rank == 1) ASSERT_STR_CONTAINS(symm_last_error(), "FAKENCCL_INIT_FAIL_RANK");
  if (f->version >= 2) {
    /* Told through the notes while they waited in NCCL. */
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
    ASSERT_MSG(took < (uint64_t)f->timeout_ms / 2, "took %llu ms", (unsigned long long)took);
    if (rank != 1) ASSERT_MSG(ch.note_gets > 0, "rank %d never looked at the notes", rank);
  } else {
    /* No notes: the peers learn no sooner than their wait in NCCL ends,
     * yet within the deadline. */
    ASSERT_EQ(ch.note_gets, 0);
    ASSERT_MSG(took < (uint64_t)f->timeout_ms + 2000, "took %llu ms", (unsigned long long)took);
  }
  return 0;
}

/* The same on the caller's callbacks: rank 1's failure reaches the
 * others through the callbacks' notes, well before the timeout. */
TEST_IMPL(nccl_fake_init_fails_callbacks) {
  cb_channel_map();
  cb_fail_t f = {SYMM_BOOTSTRAP_CALLBACKS_VERSION, 20000};
  setenv("FAKENCCL_INIT_FAIL_RANK", "1", 1);
  ASSERT_EQ(run_job_opts(3, init_fail_cb_rank, &f, f.timeout_ms, NULL), 0);
  return 0;
}

/* Callbacks of version 1 (no notes): still accepted; the failure ends
 * the others' init within their deadline, which they wait out in NCCL. */
TEST_IMPL(nccl_fake_init_fails_callbacks_v1) {
  cb_channel_map();
  cb_fail_t f = {1, 1500};
  setenv("FAKENCCL_INIT_FAIL_RANK", "1", 1);
  ASSERT_EQ(run_job_opts(3, init_fail_cb_rank, &f, f.timeout_ms, NULL), 0);
  return 0;
}

static int lost_rank(int rank, int size, void *arg) {
  (void)size;
  int timeout_ms = *(int *)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 1024;
  symm_tensor_t *t = NULL;
  uint64_t start = test_now_ms();
  symm_result_t res = symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t); /* rank 1 exits here */
  uint64_t took = test_now_ms() - start;
  ASSERT_MSG(res == SYMM_ERR_PEER_LOST, "alloc: %s (%s)", symm_strerror(res), symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  ASSERT_MSG(took < (uint64_t)timeout_ms / 2, "took %llu ms", (unsigned long long)took);
  void *h;
  ASSERT_RES(symm_comm_backend_handle(comm, &h), SYMM_ERR_STATE); /* aborted */
  symm_comm_destroy(comm);
  return 0;
}

/* A rank gone while its peers wait in a window registration (where NCCL
 * itself waits forever): SYMM_ERR_PEER_LOST naming it, well before the
 * timeout, and the NCCL communicator aborted. */
TEST_IMPL(nccl_fake_peer_lost_in_register) {
  int timeout_ms = 20000, status[3];
  setenv("FAKENCCL_EXIT_IN_REGISTER", "1:2", 1); /* the 1st is start-up's */
  ASSERT_EQ(run_job_opts(3, lost_rank, &timeout_ms, timeout_ms, status), 1);
  ASSERT(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 3);
  ASSERT(fakenccl_stats_of().live_comms <= 0); /* this process made none */
  return 0;
}

static int stall_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 1024;
  symm_tensor_t *t = NULL;
  symm_result_t res = symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t);
  /* Its own timeout, or the first rank's, which it publishes. */
  ASSERT_MSG(res == SYMM_ERR_TIMEOUT, "alloc: %s (%s)", symm_strerror(res), symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_TIMEOUT_MS");
  ASSERT_MSG(fakenccl_stats_of().aborts == 1, "%ld aborts", fakenccl_stats_of().aborts);
  symm_comm_destroy(comm);
  return 0;
}

/* A registration that never finishes ends at SYMM_TIMEOUT_MS with the
 * communicator aborted. */
TEST_IMPL(nccl_fake_timeout_in_register) {
  setenv("FAKENCCL_STALL_REGISTER", "1:2", 1);
  ASSERT_EQ(run_job_opts(2, stall_rank, NULL, 1500, NULL), 0);
  return 0;
}

/* ------------------------------------------------ groups (ncclCommSplit) */

typedef int (*split_fn_t)(void *, int, int, void **, symm_nccl_config_t *);
typedef int (*comm_int_fn_t)(void *, int *);

/* The group's NCCL communicator has the group's rank and size. */
static int check_group_comm(symm_comm_t *g) {
  void *h = NULL;
  ASSERT_OK(symm_comm_backend_handle(g, &h));
  comm_int_fn_t count = NULL, user_rank = NULL;
  *(void **)&count = fakenccl_sym("ncclCommCount");
  *(void **)&user_rank = fakenccl_sym("ncclCommUserRank");
  int n = -1, r = -1;
  ASSERT_MSG(count && user_rank && count(h, &n) == 0 && user_rank(h, &r) == 0, "count, rank");
  ASSERT_MSG(n == symm_comm_size(g) && r == symm_comm_rank(g), "NCCL rank %d of %d, symmem %d "
             "of %d", r, n, symm_comm_rank(g), symm_comm_size(g));
  return 0;
}

/* The group at work: NCCL's all-reduce on its communicator over one of
 * its tensors (sum of the members' x = 100 * parent rank + i), and a
 * remote view into the next member's data. */
static int use_group(symm_comm_t *g, int parent_rank, int member_sum) {
  const int gr = symm_comm_rank(g), gs = symm_comm_size(g);
  symm_tensor_t *t = alloc_1d(g, 64, SYMM_DTYPE_I32);
  ASSERT_MSG(t, "alloc on the group");
  int32_t *x = symm_tensor_data(t);
  for (int i = 0; i < 64; i++) x[i] = 100 * parent_rank + i;
  void *h = NULL;
  ASSERT_OK(symm_comm_backend_handle(g, &h));
  int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *) = NULL;
  *(void **)&all_reduce = fakenccl_sym("ncclAllReduce");
  ASSERT_MSG(all_reduce && all_reduce(x, x, 64, SYMM_NCCL_INT32, SYMM_NCCL_SUM, h, NULL) == 0,
             "ncclAllReduce on the group");
  for (int i = 0; i < 64; i++)
    ASSERT_MSG(x[i] == 100 * member_sum + gs * i, "[%d] = %d", i, x[i]);
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (gr + 1) % gs, &v));
  ASSERT_OK(symm_comm_barrier(g)); /* every member read its sums */
  ((int32_t *)v.data)[7] = 1000 + gr;
  ASSERT_OK(symm_comm_barrier(g));
  ASSERT_MSG(x[7] == 1000 + (gr + gs - 1) % gs, "from the previous member: %d", x[7]);
  ASSERT_OK(symm_tensor_free(t));
  return 0;
}

/* Ranks 0, 2, 4 ... in one group ranked in reverse (key -rank), 1, 3 ...
 * in another, the last rank in none: every rank calls ncclCommSplit once,
 * the opting-out one too, and no rank makes an NCCL communicator of its
 * own for its group. */
static int split_groups_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL, *g = (symm_comm_t *)0x1;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const fakenccl_stats_t was = fakenccl_stats_of();
  const int color = rank == size - 1 ? SYMM_SPLIT_NONE : rank % 2;
  ASSERT_OK(symm_comm_split(comm, color, -rank, &g));
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.splits == was.splits + 1, "%ld ncclCommSplit calls", s.splits - was.splits);
  ASSERT_MSG(s.unique_ids == was.unique_ids && s.inits_config == was.inits_config &&
                 s.inits_plain == was.inits_plain,
             "the group made a communicator of its own: %ld ids, %ld inits",
             s.unique_ids - was.unique_ids,
             s.inits_config + s.inits_plain - was.inits_config - was.inits_plain);
  if (color == SYMM_SPLIT_NONE) {
    ASSERT(g == NULL);
    ASSERT_EQ(s.live_comms, 1);
  } else {
    int members = 0, above = 0, sum = 0;
    for (int r = 0; r < size - 1; r++)
      if (r % 2 == color) members++, above += r > rank, sum += r;
    ASSERT_EQ(symm_comm_size(g), members);
    ASSERT_EQ(symm_comm_rank(g), above);
    ASSERT_EQ(s.live_comms, 2);
    if (check_group_comm(g) || use_group(g, rank, sum)) return 1;
  }
  /* The parent's NCCL communicator goes on beside its groups. */
  symm_tensor_t *t = alloc_1d(comm, 256, SYMM_DTYPE_F32);
  ASSERT_MSG(t, "alloc on the parent");
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_tensor_free(t));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(g);
  symm_comm_destroy(comm);
  s = fakenccl_stats_of();
  ASSERT_MSG(s.live_comms == 0 && s.live_windows == 0 && s.live_allocs == 0,
             "left: comms %ld windows %ld allocs %ld", s.live_comms, s.live_windows, s.live_allocs);
  return 0;
}

/* Groups of 2 and 1 and a rank out, at 4 ranks; symmem-info's line. */
TEST_IMPL(nccl_fake_split_groups) {
  setenv("FAKECUDA_DEVICES", "4", 1);
  char why[1024], out[4096] = "";
  ASSERT_OK(probe_now(why, sizeof why));
  FILE *f = fmemopen(out, sizeof out - 1, "w");
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NCCL, f));
  fclose(f);
  ASSERT_STR_CONTAINS(out, "groups: ncclCommSplit");
  ASSERT_EQ(run_job(4, split_groups_rank, NULL), 0);
  return 0;
}

/* The same on a blocking parent (no ncclCommInitRankConfig): a blocking
 * ncclCommSplit. */
TEST_IMPL(nccl_fake_split_blocking) {
  setenv("FAKENCCL_MISSING", "ncclCommInitRankConfig", 1);
  ASSERT_EQ(run_job(3, split_groups_rank, NULL), 0);
  return 0;
}

/* The fake's ncclCommSplit is collective over the parent: rank 0's stays
 * in progress, its new communicator unwritten, until rank 1 calls it. */
static int split_collective_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  void *h = NULL, *child = NULL;
  ASSERT_OK(symm_comm_backend_handle(comm, &h));
  split_fn_t split = NULL;
  comm_int_fn_t async = NULL, user_rank = NULL;
  int (*destroy)(void *) = NULL;
  *(void **)&split = fakenccl_sym("ncclCommSplit");
  *(void **)&async = fakenccl_sym("ncclCommGetAsyncError");
  *(void **)&user_rank = fakenccl_sym("ncclCommUserRank");
  *(void **)&destroy = fakenccl_sym("ncclCommDestroy");
  ASSERT_MSG(split && async && user_rank && destroy, "entry points");
  symm_nccl_config_t cfg;
  symm_nccl_config_init(&cfg);
  cfg.blocking = 0;
  int state = -1;
  if (rank == 0) {
    ASSERT_EQ(split(h, 5, 1, &child, &cfg), SYMM_NCCL_IN_PROGRESS);
    for (uint64_t end = test_now_ms() + 300; test_now_ms() < end; usleep(2000)) {
      ASSERT_EQ(async(h, &state), 0);
      ASSERT_MSG(state == SYMM_NCCL_IN_PROGRESS, "state %d without rank 1", state);
    }
    ASSERT(child == NULL);
  }
  ASSERT_OK(symm_comm_barrier(comm)); /* rank 1 splits only now */
  if (rank == 1) {
    int rc = split(h, 5, 0, &child, &cfg);
    ASSERT_MSG(rc == 0 || rc == SYMM_NCCL_IN_PROGRESS, "ncclCommSplit: %d", rc);
  }
  for (uint64_t end = test_now_ms() + 10000; state != 0 && test_now_ms() < end; usleep(1000))
    ASSERT_EQ(async(h, &state), 0);
  ASSERT_EQ(state, 0);
  int r = -1;
  ASSERT_MSG(child && user_rank(child, &r) == 0, "no communicator");
  ASSERT_EQ(r, 1 - rank); /* by key */
  ASSERT_EQ(destroy(child), 0);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_split_is_collective) {
  ASSERT_EQ(run_job(2, split_collective_rank, NULL), 0);
  return 0;
}

/* Whether this process's log (SYMM_DEBUG_FILE = dir/%p.log, opened at the
 * first settings' load: the ranks it forks write there too) holds needle. */
static bool own_log_has(const char *dir, const char *needle) {
  char path[256], line[2048];
  snprintf(path, sizeof path, "%s/%d.log", dir, (int)getpid());
  FILE *f = fopen(path, "r");
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
  if (f) fclose(f);
  return found;
}

/* An NCCL without ncclCommSplit: each group makes its own communicator
 * (rank 0 of each, a unique id), and the log says why. */
static int split_fallback_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL, *g = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const fakenccl_stats_t was = fakenccl_stats_of();
  ASSERT_OK(symm_comm_split(comm, rank % 2, rank, &g));
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_EQ(s.splits, 0);
  ASSERT_EQ(s.inits_config, was.inits_config + 1);
  ASSERT_EQ(s.unique_ids, was.unique_ids + (symm_comm_rank(g) == 0));
  if (check_group_comm(g) || use_group(g, rank, rank % 2 ? 1 : 2)) return 1;
  symm_comm_destroy(g);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_split_without_symbol) {
  setenv("FAKENCCL_MISSING", "ncclCommSplit", 1);
  char why[1024], out[4096] = "", dir[] = "/tmp/symm-split-log.XXXXXX", pattern[64];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(pattern, sizeof pattern, "%s/%%p.log", dir);
  setenv("SYMM_DEBUG", "INFO", 1); /* read once, at the first settings' load */
  setenv("SYMM_DEBUG_FILE", pattern, 1);
  ASSERT_OK(probe_now(why, sizeof why));
  FILE *f = fmemopen(out, sizeof out - 1, "w");
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NCCL, f));
  fclose(f);
  ASSERT_STR_CONTAINS(out, "groups: a new NCCL communicator per group");
  ASSERT_STR_CONTAINS(out, "no ncclCommSplit");
  int failed = run_job(3, split_fallback_rank, NULL);
  bool said = own_log_has(dir, "has no ncclCommSplit (NCCL 2.18 and later have it); each group "
                              "makes a new one");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  ASSERT_EQ(failed, 0);
  ASSERT_MSG(said, "no INFO line says why the groups make their own");
  return 0;
}

/* Rank 1's ncclCommSplit fails: symm_comm_split fails on every rank, soon,
 * naming rank 1 and why, no rank keeps a group; the parent stays in step,
 * its NCCL communicator aborted on every rank alike (NCCL cannot cancel a
 * split but so), and its next split makes new NCCL communicators. */
static int split_fail_rank(int rank, int size, void *arg) {
  const int timeout_ms = *(int *)arg;
  symm_comm_t *comm = NULL, *g = (symm_comm_t *)0x1;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const uint64_t start = test_now_ms();
  symm_result_t res = symm_comm_split(comm, rank == size - 1 ? SYMM_SPLIT_NONE : 0, rank, &g);
  const uint64_t took = test_now_ms() - start;
  printf("rank %d: %s after %llu ms: %s\n", rank, symm_strerror(res), (unsigned long long)took,
         symm_last_error());
  ASSERT_RES(res, SYMM_ERR_BACKEND);
  ASSERT(g == NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "symm_comm_split(color");
  ASSERT_STR_CONTAINS(symm_last_error(), "ncclCommSplit failed on rank 1");
  ASSERT_STR_CONTAINS(symm_last_error(), "FAKENCCL_SPLIT_FAIL_RANK");
  ASSERT_MSG(took < (uint64_t)timeout_ms / 2, "took %llu ms", (unsigned long long)took);
  ASSERT_EQ(fakenccl_stats_of().live_comms, 0);
  ASSERT_OK(symm_comm_barrier(comm));
  void *h = NULL;
  ASSERT_RES(symm_comm_backend_handle(comm, &h), SYMM_ERR_STATE);
  int64_t n = 1024;
  symm_tensor_t *t = NULL;
  ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_STATE);
  ASSERT_STR_CONTAINS(symm_last_error(), "aborted");
  const fakenccl_stats_t was = fakenccl_stats_of();
  ASSERT_OK(symm_comm_split(comm, 0, rank, &g));
  ASSERT_EQ(fakenccl_stats_of().splits, was.splits);
  ASSERT_EQ(fakenccl_stats_of().inits_config, was.inits_config + 1);
  ASSERT_EQ(symm_comm_size(g), size);
  if (check_group_comm(g) || use_group(g, rank, size * (size - 1) / 2)) return 1;
  symm_comm_destroy(g);
  symm_comm_destroy(comm);
  ASSERT_EQ(fakenccl_stats_of().live_comms, 0);
  return 0;
}

TEST_IMPL(nccl_fake_split_fails_on_one_rank) {
  int timeout_ms = 20000;
  setenv("FAKENCCL_SPLIT_FAIL_RANK", "1", 1);
  ASSERT_EQ(run_job_opts(3, split_fail_rank, &timeout_ms, timeout_ms, NULL), 0);
  return 0;
}

/* The same where rank 1's split fails at its end, after the other
 * members got their new communicators: they give them up. */
TEST_IMPL(nccl_fake_split_fails_late) {
  int timeout_ms = 20000;
  setenv("FAKENCCL_SPLIT_FAIL_RANK", "1:late", 1);
  ASSERT_EQ(run_job_opts(3, split_fail_rank, &timeout_ms, timeout_ms, NULL), 0);
  return 0;
}

/* ---------------------------------------------------- the real library */

/* The real libnccl where one is installed (SYMM_NCCL_REAL_LIB, else what
 * the backend finds with SYMM_NCCL_LIB at its default: the loader's path,
 * then the Python environments' nvidia-nccl wheels): every entry point the
 * backend uses resolves, and the version parses to one that has them. */
TEST_IMPL(nccl_real_library) {
  char why[1024] = "";
  const char *given = getenv("SYMM_NCCL_REAL_LIB");
  symm_nccl_lib_t own;
  const symm_nccl_lib_t *lib = NULL;
  const char *path = given;
  if (given && *given) {
    if (symm_nccl_lib_load(&own, given, why, sizeof why)) lib = &own;
  } else {
    unsetenv("SYMM_NCCL_LIB");
    ASSERT_OK(symm_settings_load());
    lib = nccl_library(why, sizeof why);
    path = nccl_library_path();
  }
  if (!lib) {
    printf("SKIP: no real libnccl: %s\n", why);
    return TEST_SKIP;
  }
  int maj, min, pat;
  symm_nccl_version_parts(lib->version, &maj, &min, &pat);
  printf("%s: NCCL %d.%d.%d (code %d)\n", path, maj, min, pat, lib->version);
  ASSERT_EQ(maj, 2);
  ASSERT_GE(min, 27);
  ASSERT_EQ(SYMM_NCCL_VERSION(maj, min, pat), lib->version);
  why[0] = 0;
  nccl_missing(lib, path, why, sizeof why);
  ASSERT_STR_CONTAINS(why, ""); /* printed if not empty */
  ASSERT_EQ(why[0], 0);
  const void *fns[] = {(void *)lib->comm_init_rank_config, (void *)lib->comm_abort,
                       (void *)lib->comm_get_async_error, (void *)lib->mem_alloc,
                       (void *)lib->mem_free, (void *)lib->comm_window_register,
                       (void *)lib->comm_window_deregister, (void *)lib->get_last_error,
                       (void *)lib->comm_split, (void *)lib->comm_count,
                       (void *)lib->comm_user_rank};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) ASSERT(fns[i] != NULL);
  if (lib->version >= SYMM_NCCL_VERSION(2, 28, 0)) ASSERT(lib->all_to_all != NULL);
  if (lib->version >= NCCL_PEER_PTR_VERSION) ASSERT(lib->get_peer_device_pointer != NULL);
  else ASSERT(lib->get_peer_device_pointer == NULL);
  const char *s = lib->get_error_string(SYMM_NCCL_IN_PROGRESS);
  ASSERT(s && *s);
  printf("every entry point resolves; ncclGetErrorString(ncclInProgress) = \"%s\"\n", s);
  return 0;
}


/* ------------------------------------------------------- all-to-all-v */

/* symm_all_to_all_v and symm_all_to_all_vdev launch the GPU engine's
 * all-to-all-v kernel with the call's parameters (fake_a2av.h). */
static int a2av_launch_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *buf = alloc_1d(comm, 8192, SYMM_DTYPE_U64);
  symm_tensor_t *board = alloc_1d(comm, 8, SYMM_DTYPE_U64);
  ASSERT_MSG(buf && board, "alloc: %s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(buf));
  ASSERT_OK(symm_tensor_rendezvous(board));
  if (fake_a2av_launches(comm, buf, board)) return 1;
  symm_comm_barrier(comm);
  symm_tensor_free(board);
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nccl_fake_a2av_launch) {
  ASSERT_EQ(run_job(2, a2av_launch_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------ registered memory */

/* The refusals, on every rank alike and before any NCCL call (no window
 * registered, nothing aborted): cuMemAlloc memory, and a window that does
 * not start on a 4 KiB boundary of its allocation. */
static int register_refusals(symm_comm_t *comm, void *good, void *plain) {
  const long before = fakenccl_stats_of().registrations;
  fake_user_refused(comm, 0, plain, good, 1000, "is not VMM memory");
  fake_user_refused(comm, 1, (char *)good + 256, good, 1000, "4096-byte boundary");
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.registrations == before && s.aborts == 0,
             "registrations %ld (before %ld), aborts %ld", s.registrations, before, s.aborts);
  return 0;
}

/* Stores through remote views of registered memory land in the peer's
 * own buffer; the peers' pointers are NCCL's (the window's). */
static int register_stores(symm_comm_t *comm, symm_tensor_t *t, uint64_t *mine, int64_t n) {
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
  for (int64_t i = 0; i < n; i++) ((uint64_t *)v.data)[i] = (uint64_t)value_at(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const int left = (rank + size - 1) % size;
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(mine[i], (uint64_t)value_at(left, i));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_MSG(ptrs[rank] == mine, "own pointer %p, the user's %p", ptrs[rank], (void *)mine);
  ASSERT_OK(symm_comm_barrier(comm));
  return 0;
}

static int register_user_rank(int rank, int size, void *arg) {
  (void)arg, (void)size;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  fake_user_vmm_t um;
  const size_t gran = fake_user_granularity(comm);
  char *base = fake_user_vmm(comm, gran, &um);
  void *plain = fake_user_plain(comm, gran);
  ASSERT_MSG(base && plain && gran >= 3 * 4096, "the user's memory (granularity %zu)", gran);
  if (register_refusals(comm, base, plain)) return 1;
  /* A window 4 KiB into the allocation, of a size that is no whole page. */
  uint64_t *mine = (uint64_t *)(base + 4096);
  int64_t n = 1000;
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = mine;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_register(comm, &m, &n, 1, SYMM_DTYPE_U64, &t));
  fakenccl_stats_t s = fakenccl_stats_of();
  ASSERT_MSG(s.user_windows == 1 && s.live_user_windows == 1, "user windows %ld live %ld",
             s.user_windows, s.live_user_windows);
  if (register_stores(comm, t, mine, n)) return 1;
  ASSERT_OK(symm_tensor_free(t));
  s = fakenccl_stats_of();
  ASSERT_MSG(s.live_user_windows == 0 && s.user_deregistrations == 1,
             "after free: live user windows %ld, deregistered %ld", s.live_user_windows,
             s.user_deregistrations);
  const int left = (rank + size - 1) % size;
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(mine[i], (uint64_t)value_at(left, i));
  fake_user_vmm_free(comm, &um); /* the user's to release: the driver still has it */
  fake_user_plain_free(comm, plain);
  symm_comm_destroy(comm); /* the pad's ncclMemAlloc block and window go */
  s = fakenccl_stats_of();
  ASSERT_MSG(s.live_windows == 0 && s.live_allocs == 0 && s.user_deregistrations == 1,
             "left: windows %ld allocs %ld, user deregistrations %ld", s.live_windows,
             s.live_allocs, s.user_deregistrations);
  return 0;
}

TEST_IMPL(nccl_fake_register_user) {
  ASSERT_EQ(run_job(2, register_user_rank, NULL), 0);
  return 0;
}

/* -------------------------------------------------------------- main */

static const fake_test_t nccl_fake_tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name},
#include "list-nccl-fake.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  setenv("SYMM_CUDA_LIB", FAKECUDA_PATH, 1);
  setenv("SYMM_NCCL_LIB", FAKENCCL_PATH, 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  return fake_tests_main(argc, argv, nccl_fake_tests,
                         sizeof nccl_fake_tests / sizeof nccl_fake_tests[0]);
}
