/*
 * The nvshmem backend on machines without a GPU: every test loads the fake
 * driver (fake_cuda.c, SYMM_CUDA_LIB) and the fake libnvshmem_host
 * (fake_nvshmem.c, SYMM_NVSHMEM_LIB), whose symmetric heaps are shared
 * "device" memory of the fake driver, so the backend's real protocol
 * (NVSHMEM started through symmem's bootstrap plugin, libsymmem_nvshmem_
 * bootstrap.so, or from a unique id through the bootstrap; collective
 * allocation and free, nvshmem_ptr, the provider's collectives) runs
 * across processes and the CPU checks the data.  One test loads the real library where a
 * wheel provides it.  `nvshmem-fake-tests NAME` runs one test.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/nvshmem/nvshmem_boot_abi.h"
#include "backends/nvshmem/nvshmem_lib.h"
#include "fake_a2av.h"
#include "fake_user_mem.h"
#include "fake_util.h"
#include "fakenvshmem.h"
#include "harness.h"
#include "symm_backend.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "list-nvshmem-fake.h"
#undef TEST_ENTRY

/* ------------------------------------------------------------- helpers */


/* The fake's counters, from the copy the backend loaded. */
static fakenvshmem_stats_t fakenvshmem_stats_of(void) {
  fakenvshmem_stats_t s = {.inits = -1, .finalizes = -1, .mallocs = -1, .frees = -1, .live = -1,
                           .up = -1, .boot_plugin = -1, .boot_rounds = -1, .boot_inits = -1};
  void *lib = dlopen(getenv("SYMM_NVSHMEM_LIB"), RTLD_NOW | RTLD_NOLOAD);
  void (*fn)(fakenvshmem_stats_t *) = NULL;
  if (lib) *(void **)&fn = dlsym(lib, "fakenvshmem_stats");
  if (fn) fn(&s);
  if (lib) dlclose(lib);
  return s;
}

/* A job of n nvshmem ranks: the number of ranks that failed. */
static int run_job(int n, test_rank_fn fn, void *arg) {
  test_job_opts_t o = {.timeout_ms = 50000, .backend = "nvshmem", .store_timeout_ms = 15000,
                       .kill_rank = -1};
  return test_run_ranks_opts(n, fn, arg, &o);
}

static symm_comm_t *comm_or_null(void) {
  symm_comm_t *comm = NULL;
  return symm_comm_init(NULL, &comm) == SYMM_SUCCESS ? comm : NULL;
}

static symm_tensor_t *alloc_u64(symm_comm_t *comm, int64_t n) {
  symm_tensor_t *t = NULL;
  return symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U64, &t) == SYMM_SUCCESS ? t : NULL;
}

/* ------------------------------------------------------------- probing */

TEST_IMPL(nvshmem_fake_probe_no_library) {
  setenv("SYMM_NVSHMEM_LIB", "/nonexistent/libnvshmem_host.so.3", 1);
  char why[1024] = "";
  ASSERT_RES(symm_backend_available(SYMM_BACKEND_NVSHMEM, why, sizeof why),
             SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "/nonexistent/libnvshmem_host.so.3");
  return 0;
}

/* Without any library: the default name is looked for by the loader and
 * in Python environments, and the message says both; forcing the backend
 * fails cleanly on every rank. */
static int forced_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), "nvshmem");
  return 0;
}

TEST_IMPL(nvshmem_fake_forced_unavailable) {
  unsetenv("SYMM_NVSHMEM_LIB");
  setenv("PATH", "/nonexistent", 1); /* no python3 with a wheel */
  unsetenv("VIRTUAL_ENV");
  unsetenv("CONDA_PREFIX");
  setenv("HOME", "/nonexistent", 1);
  char why[1024] = "";
  ASSERT_RES(symm_backend_available(SYMM_BACKEND_NVSHMEM, why, sizeof why),
             SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "libnvshmem_host.so.3");
  ASSERT_STR_CONTAINS(why, "Python environment");
  ASSERT_EQ(run_job(2, forced_rank, NULL), 0);
  return 0;
}

/* SYMM_NVSHMEM_LIB unset: the library a Python environment ships under
 * nvidia/nvshmem/lib (a virtual environment here, holding the fake). */
TEST_IMPL(nvshmem_fake_found_in_python_env) {
  char prefix[] = "/tmp/symm-pyenv-XXXXXX", dir[512], lib[600];
  ASSERT(mkdtemp(prefix) != NULL);
  snprintf(dir, sizeof dir, "%s/lib/python3.99/site-packages/nvidia/nvshmem/lib", prefix);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -s '%s' '%s/%s'", dir, FAKENVSHMEM_PATH, dir,
           NVSH_LIB_DEFAULT);
  ASSERT_EQ(system(cmd), 0);
  snprintf(lib, sizeof lib, "%s/%s", dir, NVSH_LIB_DEFAULT);
  unsetenv("SYMM_NVSHMEM_LIB");
  setenv("VIRTUAL_ENV", prefix, 1);
  char why[1024] = "", buf[4096] = "";
  symm_result_t res = symm_backend_available(SYMM_BACKEND_NVSHMEM, why, sizeof why);
  FILE *f = fmemopen(buf, sizeof buf, "w");
  ASSERT(f != NULL);
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NVSHMEM, f));
  fclose(f);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", prefix);
  ASSERT_EQ(system(cmd), 0);
  if (res != SYMM_SUCCESS) printf("unavailable: %s\n", why);
  ASSERT_OK(res);
  ASSERT_STR_CONTAINS(buf, lib);
  return 0;
}

TEST_IMPL(nvshmem_fake_missing_symbol) {
  setenv("FAKENVSHMEM_MISSING", "nvshmemx_hostlib_init_attr", 1);
  char why[1024] = "";
  ASSERT_RES(symm_backend_available(SYMM_BACKEND_NVSHMEM, why, sizeof why),
             SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "nvshmemx_hostlib_init_attr");
  return 0;
}

TEST_IMPL(nvshmem_fake_old_version) {
  setenv("FAKENVSHMEM_VERSION", "2.11.0", 1);
  char why[1024] = "";
  ASSERT_RES(symm_backend_available(SYMM_BACKEND_NVSHMEM, why, sizeof why),
             SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, "NVSHMEM 2.11.0");
  return 0;
}

/* The library is there, but auto never starts NVSHMEM by itself. */
static int auto_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  ASSERT_MSG(symm_comm_backend(comm) == SYMM_BACKEND_NATIVE, "auto chose %s",
             symm_backend_name(symm_comm_backend(comm)));
  symm_comm_destroy(comm);
  ASSERT_MSG(fakenvshmem_stats_of().inits <= 0, "NVSHMEM was started");
  return 0;
}

TEST_IMPL(nvshmem_fake_auto_skips) {
  ASSERT_OK(symm_backend_available(SYMM_BACKEND_NVSHMEM, NULL, 0));
  test_job_opts_t o = {.timeout_ms = 50000, .backend = "auto", .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(2, auto_rank, NULL, &o), 0);
  return 0;
}

TEST_IMPL(nvshmem_fake_describe) {
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  ASSERT(f != NULL);
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NVSHMEM, f));
  fclose(f);
  printf("%s", buf);
  ASSERT_STR_CONTAINS(buf, "NVSHMEM 3.8.0");
  ASSERT_STR_CONTAINS(buf, FAKENVSHMEM_PATH);
  ASSERT_STR_CONTAINS(buf, "alltoall");
  return 0;
}

/* ----------------------------------------------------------- full path */

static int full_path_rank(int rank, int size, void *arg) {
  (void)arg;
  unsetenv("NVSHMEM_DISABLE_NVLS");
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  ASSERT_EQ(symm_comm_backend(comm), SYMM_BACKEND_NVSHMEM);
  /* NVLS stays off, for NVSHMEM and for children. */
  ASSERT_MSG(getenv("NVSHMEM_DISABLE_NVLS") && strcmp(getenv("NVSHMEM_DISABLE_NVLS"), "1") == 0,
             "NVSHMEM_DISABLE_NVLS=%s", getenv("NVSHMEM_DISABLE_NVLS"));
  ASSERT_MSG(system("test \"$NVSHMEM_DISABLE_NVLS\" = 1") == 0, "a child sees NVLS on");
  const symm_backend_caps_t *caps = symm_comm_caps(comm);
  ASSERT_MSG(caps->collective_alloc && caps->collective_free && !caps->contiguous_view, "caps");

  const int64_t n = 3000;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "%s", symm_last_error());
  void *pad;
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_MIN_BYTES; i++) ASSERT_EQ(((char *)pad)[i], 0);
  ASSERT_OK(symm_tensor_rendezvous(t));
  int right = (rank + 1) % size;
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, right, &v));
  for (int64_t i = 0; i < n; i++) ((uint64_t *)v.data)[i] = pattern(rank, (size_t)i);
  ASSERT_OK(symm_comm_barrier(comm));
  const uint64_t *mine = symm_tensor_data(t);
  int left = (rank + size - 1) % size;
  for (int64_t i = 0; i < n; i++)
    ASSERT_MSG(mine[i] == pattern(left, (size_t)i), "element %lld", (long long)i);
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++) ASSERT_MSG(ptrs[r] != NULL, "rank %d's pointer", r);
  /* Interior pointers of local and peer memory; validation. */
  symm_tensor_t *found;
  int frank;
  size_t off;
  ASSERT_OK(symm_tensor_lookup((const char *)mine + 808, &found, &frank, &off));
  ASSERT_MSG(found == t && frank == rank && off == 808, "local lookup");
  ASSERT_OK(symm_tensor_lookup((char *)v.data + 8 * 1500 + 3, &found, &frank, &off));
  ASSERT_MSG(found == t && frank == right && off == 8 * 1500 + 3, "peer lookup");
  ASSERT_OK(symm_validate(comm, mine, (size_t)n * 8));
  ASSERT_OK(symm_validate(comm, (char *)v.data + 64, 64));
  ASSERT_RES(symm_validate(comm, mine, (size_t)n * 8 + (64 << 20)), SYMM_ERR_INVALID_ARG);
  symm_view_t cv;
  ASSERT_RES(symm_tensor_contiguous_view(t, &cv), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "native");
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.up && s.inits == 1 && s.mallocs >= 2, "inits %ld mallocs %ld", s.inits, s.mallocs);
  /* The pool keeps it: a second tensor of that size reuses it without a
   * new nvshmem_malloc. */
  long before = s.mallocs;
  t = alloc_u64(comm, n);
  ASSERT_MSG(t, "%s", symm_last_error());
  ASSERT_MSG(fakenvshmem_stats_of().mallocs == before, "nvshmem_malloc called for a pooled size");
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_comm_destroy(comm);
  s = fakenvshmem_stats_of();
  ASSERT_MSG(!s.up && s.finalizes == 1 && s.live == 0, "up %d finalizes %ld live %ld", s.up,
             s.finalizes, s.live);
  return 0;
}

TEST_IMPL(nvshmem_fake_full_path_2) {
  ASSERT_EQ(run_job(2, full_path_rank, NULL), 0);
  return 0;
}

TEST_IMPL(nvshmem_fake_full_path_4) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1); /* 4 ranks, 2 fake GPUs */
  ASSERT_EQ(run_job(4, full_path_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------ failure modes */

/* nvshmemx_hostlib_init_attr fails on rank 1: every rank's init fails, in
 * time, and rank 1 names the call. */
static int init_fail_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND);
  ASSERT_MSG(test_now_ms() - t0 < 12000, "took %llu ms", (unsigned long long)(test_now_ms() - t0));
  if (rank == 1) ASSERT_STR_CONTAINS(symm_last_error(), "nvshmemx_hostlib_init_attr");
  ASSERT_MSG(fakenvshmem_stats_of().up <= 0, "an instance is left up");
  return 0;
}

TEST_IMPL(nvshmem_fake_init_fails_one_rank) {
  setenv("FAKENVSHMEM_INIT_FAIL_RANK", "1", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, init_fail_rank, NULL), 0);
  return 0;
}

/* One rank's allocation differs from the others': rank 1 asks for another
 * size (arg NULL), or rank 0's fails its argument checks (a negative size,
 * arg non-NULL).  Either way every other rank gets SYMM_ERR_MISMATCH
 * (naming the refusing rank), nvshmem_malloc is never called with
 * different sizes (the fake would abort the process), the call keeps its
 * place on every rank, and the next allocation pairs up. */
static int alloc_mismatch_rank(int rank, int size, void *arg) {
  (void)size;
  const bool refused = arg != NULL;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  long before = fakenvshmem_stats_of().mallocs;
  const int odd = refused ? 0 : 1;
  int64_t n = rank != odd ? 4096 : refused ? -5 : 8192;
  symm_tensor_t *t = NULL;
  if (refused && rank == odd) {
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(symm_last_error(), "must be positive");
  } else {
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(),
                        refused ? "rank 0's call failed its argument checks" : "rank");
  }
  ASSERT_MSG(fakenvshmem_stats_of().mallocs == before, "nvshmem_malloc ran");
  n = 4096;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_tensor_free(t));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nvshmem_fake_alloc_mismatch) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, alloc_mismatch_rank, NULL), 0);
  return 0;
}

TEST_IMPL(nvshmem_fake_alloc_refused_one_rank) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, alloc_mismatch_rank, "refused"), 0);
  return 0;
}

/* Rank 0 allocates while the others enter a barrier: a mismatch on every
 * rank, never a hang in nvshmem_malloc. */
static int one_rank_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  int64_t n = 4096;
  symm_tensor_t *t = NULL;
  if (rank == 0)
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_MISMATCH);
  else
    ASSERT_RES(symm_comm_barrier(comm), SYMM_ERR_MISMATCH);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  ASSERT_MSG(fakenvshmem_stats_of().live == 0, "live %ld", fakenvshmem_stats_of().live);
  return 0;
}

TEST_IMPL(nvshmem_fake_alloc_one_rank_only) {
  ASSERT_EQ(run_job(2, one_rank_rank, NULL), 0);
  return 0;
}

/* Frees in different orders: SYMM_ERR_MISMATCH everywhere, nothing freed;
 * freeing in allocation order then works, and destroy leaves nothing. */
static int free_order_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  setenv("SYMM_POOL_BYTES", "0", 1); /* every free reaches nvshmem_free */
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  symm_tensor_t *a = alloc_u64(comm, 512), *b = alloc_u64(comm, 512);
  ASSERT_MSG(a && b, "%s", symm_last_error());
  long live = fakenvshmem_stats_of().live;
  ASSERT_RES(symm_tensor_free(rank == 0 ? a : b), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "same order");
  ASSERT_EQ(fakenvshmem_stats_of().live, live);
  ASSERT_OK(symm_tensor_free(a));
  ASSERT_OK(symm_tensor_free(b));
  ASSERT_MSG(fakenvshmem_stats_of().live == live - 2, "live %ld", fakenvshmem_stats_of().live);
  /* Tensors left for destroy go in allocation order on every rank. */
  symm_tensor_t *c = alloc_u64(comm, 100), *d = alloc_u64(comm, 200);
  ASSERT_MSG(c && d, "%s", symm_last_error());
  symm_comm_destroy(comm);
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.live == 0 && s.finalizes == 1, "live %ld finalizes %ld", s.live, s.finalizes);
  return 0;
}

TEST_IMPL(nvshmem_fake_free_out_of_order) {
  ASSERT_EQ(run_job(2, free_order_rank, NULL), 0);
  return 0;
}

/* A second communicator of other processes while one is up: refused on
 * every rank of it, and the first goes on. */
static int second_refused_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  if (rank < 2) {
    symm_config_t cfg = SYMM_CONFIG_INIT;
    cfg.rank = rank;
    cfg.world_size = 2;
    cfg.job_id = "nvshmem-second";
    symm_comm_t *second = NULL;
    ASSERT_RES(symm_comm_init(&cfg, &second), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "one instance per process");
  }
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_t *t = alloc_u64(comm, 64);
  ASSERT_MSG(t, "%s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nvshmem_fake_second_comm_refused) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, second_refused_rank, NULL), 0);
  return 0;
}

/* A second communicator over the same processes in the same order shares
 * the instance: both work, NVSHMEM starts once and is finalised when the
 * last goes. */
static int second_shared_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *first = comm_or_null();
  ASSERT_MSG(first, "%s", symm_last_error());
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.job_id = "nvshmem-shared";
  symm_comm_t *second = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &second));
  symm_tensor_t *a = alloc_u64(first, 64), *b = alloc_u64(second, 64);
  ASSERT_MSG(a && b, "%s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(a));
  ASSERT_OK(symm_tensor_rendezvous(b));
  ASSERT_MSG(symm_tensor_data(a) != symm_tensor_data(b), "one address for two tensors");
  symm_comm_destroy(first);
  /* The instance went with the first. */
  ASSERT_EQ(fakenvshmem_stats_of().up, 1);
  ASSERT_EQ(fakenvshmem_stats_of().inits, 1);
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(b, (rank + 1) % size, &v));
  ((uint64_t *)v.data)[0] = pattern(rank, 0);
  ASSERT_OK(symm_comm_barrier(second));
  ASSERT_MSG(((uint64_t *)symm_tensor_data(b))[0] == pattern((rank + size - 1) % size, 0), "data");
  ASSERT_OK(symm_comm_barrier(second));
  symm_comm_destroy(second);
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(!s.up && s.finalizes == 1 && s.live == 0, "up %d finalizes %ld live %ld", s.up,
             s.finalizes, s.live);
  return 0;
}

TEST_IMPL(nvshmem_fake_second_comm_shared) {
  ASSERT_EQ(run_job(2, second_shared_rank, NULL), 0);
  return 0;
}

/* ---------------------------------------- NVSHMEM over symmem's bootstrap */

/* Tensors (every reachable peer's data read here), an all-reduce and an
 * all-gather on comm, and an allocation that grows the heap: through the
 * plugin, a round of NVSHMEM's bootstrap inside nvshmem_malloc.  The
 * collectives' data is checked where a peer is beyond load/store
 * (FAKENVSHMEM_UNREACHABLE): NVSHMEM's own collectives then run, which
 * the fake computes; the GPU engine's kernels it only records. */
static void plugin_works(symm_comm_t *comm, bool plugin) {
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  const int64_t n = 4096;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "%s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(t));
  for (int64_t i = 0; i < n; i++) ((uint64_t *)symm_tensor_data(t))[i] = pattern(rank, (size_t)i);
  ASSERT_OK(symm_comm_barrier(comm));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++)
    for (int64_t i = 0; ptrs[r] && i < n; i += 97)
      ASSERT_MSG(((const uint64_t *)ptrs[r])[i] == pattern(r, (size_t)i), "rank %d [%lld]", r,
                 (long long)i);
  const long rounds = fakenvshmem_stats_of().boot_rounds;
  symm_tensor_t *big = alloc_u64(comm, 3 << 17); /* 3 MiB: past what the heap had */
  ASSERT_MSG(big, "%s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(big));
  const long grown = fakenvshmem_stats_of().boot_rounds - rounds;
  ASSERT_MSG(plugin ? grown > 0 : grown == 0, "%ld bootstrap rounds as the heap grew", grown);
  enum { N = 256 };
  float x[N], y[N];
  int32_t g[N], all[N * 4];
  for (int i = 0; i < N; i++) x[i] = (float)(rank + i), g[i] = rank * 1000 + i;
  ASSERT_OK(symm_all_reduce(comm, x, y, N, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_all_gather(comm, g, all, N, SYMM_DTYPE_I32, NULL));
  for (int i = 0; getenv("FAKENVSHMEM_UNREACHABLE") && i < N; i++) {
    ASSERT_MSG(y[i] == (float)(size * (size - 1) / 2 + size * i), "sum[%d] = %g", i, y[i]);
    for (int r = 0; r < size; r++)
      ASSERT_MSG(all[r * N + i] == r * 1000 + i, "gather[%d][%d] = %d", r, i, all[r * N + i]);
  }
  ASSERT_OK(symm_tensor_free(big));
  ASSERT_OK(symm_tensor_free(t));
  ASSERT_OK(symm_comm_barrier(comm));
}

/* NVSHMEM bootstrapped through the plugin (its init called once, its
 * rounds run), the process's environment as it was, the backend working;
 * NVSHMEM finalised with nothing left. */
static int plugin_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.boot_plugin == 1 && s.boot_inits == 1 && s.boot_rounds >= 3,
             "plugin %d, its init called %ld times, %ld rounds", s.boot_plugin, s.boot_inits,
             s.boot_rounds);
  ASSERT_MSG(!getenv("NVSHMEM_BOOTSTRAP") && !getenv("NVSHMEM_BOOTSTRAP_PLUGIN"),
             "NVSHMEM_BOOTSTRAP=%s left in the environment", getenv("NVSHMEM_BOOTSTRAP"));
  plugin_works(comm, true);
  symm_comm_destroy(comm);
  s = fakenvshmem_stats_of();
  ASSERT_MSG(!s.up && s.finalizes == 1 && s.live == 0, "up %d finalizes %ld live %ld", s.up,
             s.finalizes, s.live);
  return 0;
}

TEST_IMPL(nvshmem_fake_plugin_2) {
  ASSERT_EQ(run_job(2, plugin_rank, NULL), 0);
  return 0;
}

/* Rank 2 "on another node": NVSHMEM's own collectives, whose data the
 * fake computes, after a start through the plugin. */
TEST_IMPL(nvshmem_fake_plugin_4) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1); /* 4 ranks, 2 fake GPUs */
  setenv("FAKENVSHMEM_UNREACHABLE", "2", 1);
  ASSERT_EQ(run_job(4, plugin_rank, NULL), 0);
  return 0;
}

/* The caller's callbacks as the bootstrap (symm_config_t.bootstrap): an
 * all-gather through a shared segment mapped before the ranks fork, a
 * stand-in for MPI.  No store anywhere. */
#define CB_MAX 4
#define CB_SLOT ((size_t)256 << 10)
typedef struct {
  _Atomic uint64_t seq[CB_MAX];
  unsigned char data[2][CB_MAX][CB_SLOT];
} cb_segment_t;
static cb_segment_t *cb_seg;

typedef struct {
  int rank, size;
  uint64_t round;
  long calls;
} cb_channel_t;

static int cb_wait(const cb_channel_t *ch, uint64_t round, int timeout_ms) {
  const uint64_t end = test_now_ms() + (uint64_t)timeout_ms;
  for (int r = 0; r < ch->size; r++)
    while (atomic_load(&cb_seg->seq[r]) < round) {
      if (test_now_ms() >= end) return SYMM_ERR_TIMEOUT;
      usleep(50);
    }
  return 0;
}

static int cb_allgather(void *ctx, const void *send, void *recv, size_t len, int timeout_ms) {
  cb_channel_t *ch = ctx;
  ch->calls++;
  if (len > CB_SLOT) return SYMM_ERR_INVALID_ARG;
  const uint64_t k = ++ch->round;
  /* Round k reuses round k - 2's slots, read by every rank once every
   * rank published k - 1. */
  int rc = k > 1 ? cb_wait(ch, k - 1, timeout_ms) : 0;
  if (rc) return rc;
  memcpy(cb_seg->data[k & 1][ch->rank], send, len);
  atomic_store(&cb_seg->seq[ch->rank], k);
  if ((rc = cb_wait(ch, k, timeout_ms))) return rc;
  for (int r = 0; r < ch->size; r++)
    memcpy((char *)recv + (size_t)r * len, cb_seg->data[k & 1][r], len);
  return 0;
}

/* NVSHMEM's rounds ride the caller's callbacks: every one of them is a
 * call of the callbacks' all-gather. */
static int plugin_callbacks_rank(int rank, int size, void *arg) {
  (void)arg;
  unsetenv("SYMM_STORE_ADDR");
  unsetenv("SYMM_TOKEN");
  unsetenv("MASTER_ADDR");
  cb_channel_t ch = {.rank = rank, .size = size};
  symm_bootstrap_callbacks_t cb = SYMM_BOOTSTRAP_CALLBACKS_INIT;
  cb.rank = rank;
  cb.world_size = size;
  cb.ctx = &ch;
  cb.allgather = cb_allgather;
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = &cb;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &comm));
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.boot_plugin == 1 && s.boot_rounds >= 3, "plugin %d, %ld rounds", s.boot_plugin,
             s.boot_rounds);
  ASSERT_MSG(ch.calls > s.boot_rounds, "%ld callback rounds for NVSHMEM's %ld and symmem's",
             ch.calls, s.boot_rounds);
  const long calls = ch.calls;
  plugin_works(comm, true);
  ASSERT_MSG(ch.calls > calls, "no callback round after init");
  symm_comm_destroy(comm);
  s = fakenvshmem_stats_of();
  ASSERT_MSG(!s.up && s.finalizes == 1 && s.live == 0, "up %d finalizes %ld live %ld", s.up,
             s.finalizes, s.live);
  return 0;
}

TEST_IMPL(nvshmem_fake_plugin_on_callbacks) {
  cb_seg = mmap(NULL, sizeof *cb_seg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(cb_seg != MAP_FAILED);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, plugin_callbacks_rank, NULL), 0);
  return 0;
}

/* NVSHMEM keeps a plugin bootstrap past its finalize: a later
 * communicator of the same processes in the same order starts NVSHMEM on
 * it again (the plugin's init is not called again), even where
 * SYMM_NVSHMEM_BOOTSTRAP=uniqueid asks for a unique id, which NVSHMEM
 * would ignore; one of the same processes in another order is refused on
 * every rank, saying why. */
static int kept_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  symm_comm_destroy(comm);
  setenv("SYMM_NVSHMEM_BOOTSTRAP", "uniqueid", 1);
  comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.up && s.boot_plugin == 1 && s.boot_inits == 1 && s.inits == 1,
             "up %d plugin %d, its init called %ld times", s.up, s.boot_plugin, s.boot_inits);
  plugin_works(comm, true);
  symm_comm_destroy(comm);
  unsetenv("SYMM_NVSHMEM_BOOTSTRAP");
  test_setenv_int("SYMM_RANK", size - 1 - rank);
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "keeps the bootstrap of an earlier instance");
  ASSERT_STR_CONTAINS(symm_last_error(), "same processes in the same rank order");
  ASSERT_EQ(fakenvshmem_stats_of().up, 0);
  return 0;
}

TEST_IMPL(nvshmem_fake_plugin_kept_bootstrap) {
  ASSERT_EQ(run_job(2, kept_rank, NULL), 0);
  return 0;
}

/* NVSHMEM from rank 0's unique id: no plugin round, the backend working. */
static int uniqueid_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.up && s.boot_plugin == 0 && s.boot_rounds == 0, "plugin %d, %ld rounds",
             s.boot_plugin, s.boot_rounds);
  plugin_works(comm, false);
  symm_comm_destroy(comm);
  ASSERT_EQ(fakenvshmem_stats_of().finalizes, 1);
  return 0;
}

/* What symmem-info's nvshmem lines say about the bootstrap. */
static void describe_says(const char *what, const char *needle) {
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  ASSERT(f != NULL);
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_NVSHMEM, f));
  fclose(f);
  printf("%s", buf);
  ASSERT_STR_CONTAINS(buf, what);
  ASSERT_STR_CONTAINS(buf, needle);
}

TEST_IMPL(nvshmem_fake_uniqueid_by_setting) {
  setenv("SYMM_NVSHMEM_BOOTSTRAP", "uniqueid", 1);
  describe_says("bootstrap: unique id", "SYMM_NVSHMEM_BOOTSTRAP=uniqueid");
  ASSERT_EQ(run_job(2, uniqueid_rank, NULL), 0);
  return 0;
}

#define NO_PLUGIN "/nonexistent/libsymmem_nvshmem_bootstrap.so"

/* SYMM_NVSHMEM_BOOTSTRAP=plugin without the plugin: init fails on every
 * rank, naming where it looked. */
static int plugin_forced_missing_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  setenv("SYMM_NVSHMEM_BOOTSTRAP", "plugin", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_NVSHMEM_BOOTSTRAP=plugin, but");
  ASSERT_STR_CONTAINS(symm_last_error(), NO_PLUGIN);
  ASSERT_MSG(fakenvshmem_stats_of().inits <= 0, "NVSHMEM was started");
  return 0;
}

/* No plugin where auto looks: the unique id, said in symmem-info's lines
 * with the reason; asked for by name, a clear error. */
TEST_IMPL(nvshmem_fake_plugin_missing) {
  setenv("SYMM_NVSHMEM_BOOTSTRAP_PLUGIN", NO_PLUGIN, 1);
  describe_says("bootstrap: unique id", NO_PLUGIN);
  ASSERT_EQ(run_job(2, uniqueid_rank, NULL), 0);
  ASSERT_EQ(run_job(2, plugin_forced_missing_rank, NULL), 0);
  return 0;
}

/* An NVSHMEM whose bootstrap ABI the plugin does not know (4.0.0): the
 * plugin refuses, and every rank's init fails saying so. */
static int abi_refused_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND);
  ASSERT_STR_CONTAINS(symm_last_error(), "NVSHMEM offers bootstrap plugin ABI 4.0.0");
  ASSERT_STR_CONTAINS(symm_last_error(), "implements 3.x only");
  ASSERT_MSG(fakenvshmem_stats_of().up <= 0, "an instance is up");
  return 0;
}

TEST_IMPL(nvshmem_fake_plugin_abi_refused) {
  setenv("FAKENVSHMEM_BOOTSTRAP_ABI", "40000", 1);
  ASSERT_EQ(run_job(2, abi_refused_rank, NULL), 0);
  return 0;
}

/* symmem-info (the shared library, which finds the plugin beside itself)
 * says the plugin route and its file. */
TEST_IMPL(nvshmem_fake_plugin_info) {
  unsetenv("SYMM_NVSHMEM_BOOTSTRAP_PLUGIN");
  char cmd[1024], out[16384] = "";
  snprintf(cmd, sizeof cmd, "%s", test_tool_path("symmem-info"));
  ASSERT_EQ(test_run_command(cmd, out, sizeof out), 0);
  const char *line = strstr(out, "bootstrap: ");
  ASSERT_MSG(line, "no bootstrap line in:\n%s", out);
  printf("%.*s\n", (int)strcspn(line, "\n"), line);
  ASSERT_STR_CONTAINS(line, "bootstrap: plugin /");
  ASSERT_STR_CONTAINS(line, "/libsymmem_nvshmem_bootstrap.so (NVSHMEM's rounds ride symmem's");
  return 0;
}

/* The plugin's two interfaces on their own: NVSHMEM's init refused while
 * nothing is bound and for a binding of another version; an unknown ABI
 * refused with the reason; a newer minor served at the plugin's own
 * version; the handle's rounds going to the binding; finalize. */
static long unit_rounds;
static int unit_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
  (void)ctx;
  unit_rounds++;
  memcpy(recv, send, bytes);
  return 0;
}
static int unit_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  return unit_allgather(ctx, send, recv, bytes);
}
static int unit_barrier(void *ctx) {
  (void)ctx;
  unit_rounds++;
  return 0;
}

TEST_IMPL(nvshmem_fake_plugin_abi) {
  void *dl = dlopen(SYMMEM_NVSHMEM_BOOTSTRAP_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_MSG(dl, "%s", dlerror());
  nvsh_boot_bind_fn bind = NULL;
  nvsh_boot_plugin_init_fn init = NULL;
  *(void **)&bind = dlsym(dl, NVSH_BOOT_BIND);
  *(void **)&init = dlsym(dl, NVSH_BOOT_PLUGIN_INIT);
  ASSERT(bind && init);
  ASSERT(!dlsym(dl, "plugin_fill")); /* nothing else is exported */
  nvsh_boot_handle_t h;
  memset(&h, 0, sizeof h);
  ASSERT_NE(init(NULL, &h, NVSH_BOOT_ABI), 0);
  nvsh_boot_binding_t b = {.version = NVSH_BOOT_BINDING_VERSION + 98};
  ASSERT_EQ(bind(&b), NVSH_BOOT_BINDING_VERSION);
  ASSERT_NE(init(NULL, &h, NVSH_BOOT_ABI), 0);
  b = (nvsh_boot_binding_t){.version = NVSH_BOOT_BINDING_VERSION, .rank = 1, .size = 3,
                            .allgather = unit_allgather, .alltoall = unit_alltoall,
                            .barrier = unit_barrier};
  ASSERT_EQ(bind(&b), NVSH_BOOT_BINDING_VERSION);
  ASSERT_NE(init(NULL, &h, 40000), 0);
  ASSERT_STR_CONTAINS(b.why, "ABI 4.0.0");
  ASSERT_EQ(b.held, 0);
  ASSERT_EQ(init(NULL, &h, 30100), 0);
  ASSERT_EQ(h.version, NVSH_BOOT_ABI);
  ASSERT_EQ(b.abi_seen, 30100);
  ASSERT_EQ(b.held, 1);
  ASSERT(h.pg_rank == 1 && h.pg_size == 3 && h.pre_init_ops == NULL);
  ASSERT(h.allgather && h.alltoall && h.barrier && h.global_exit && h.finalize && h.show_info);
  int x = 7, y = 0;
  ASSERT_EQ(h.allgather(&x, &y, sizeof x, &h), 0);
  ASSERT_EQ(y, 7);
  ASSERT_EQ(h.alltoall(&x, &y, sizeof x, &h), 0);
  ASSERT_EQ(h.barrier(&h), 0);
  ASSERT_EQ(unit_rounds, 3);
  ASSERT_EQ(h.finalize(&h), 0);
  ASSERT_EQ(b.held, 0);
  ASSERT_EQ(bind(NULL), NVSH_BOOT_BINDING_VERSION);
  ASSERT_NE(h.barrier(&h), 0); /* nobody bound: NVSHMEM's round fails */
  ASSERT_EQ(unit_rounds, 3);
  dlclose(dl);
  return 0;
}

/* ----------------------------------------------- peers beyond load/store */

/* Rank 1 is "on another node": its views and signals are refused by name,
 * never a NULL view; the others still see each other. */
static int unreachable_views_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  symm_tensor_t *t = alloc_u64(comm, 256);
  ASSERT_MSG(t, "%s", symm_last_error());
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++) {
    symm_view_t v;
    memset(&v, 0, sizeof v);
    bool far = r != rank && (r == 1 || rank == 1);
    if (far) {
      ASSERT_RES(symm_tensor_remote_view(t, r, &v), SYMM_ERR_UNSUPPORTED);
      char who[32];
      snprintf(who, sizeof who, "rank %d", r);
      ASSERT_STR_CONTAINS(symm_last_error(), who);
      ASSERT_MSG(v.data == NULL && ptrs[r] == NULL, "rank %d's data at %p", r, ptrs[r]);
      ASSERT_RES(symm_signal_put(t, r, 0, NULL), SYMM_ERR_UNSUPPORTED);
      ASSERT_STR_CONTAINS(symm_last_error(), who);
    } else {
      ASSERT_OK(symm_tensor_remote_view(t, r, &v));
      ASSERT_MSG(v.data != NULL, "rank %d", r);
    }
  }
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nvshmem_fake_unreachable_views) {
  setenv("FAKENVSHMEM_UNREACHABLE", "1", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, unreachable_views_rank, NULL), 0);
  return 0;
}

static uint16_t to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return (uint16_t)(b >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Every collective through NVSHMEM's own, with the data checked.  Buffers
 * are not symmetric (the fake refuses those in NVSHMEM's calls): the
 * backend stages them. */
static int unreachable_coll_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  enum { N = 1000 };
  const int w = size;
  float *fs = calloc((size_t)N * w, 4), *fr = calloc((size_t)N * w, 4);
  int32_t *is = calloc((size_t)N * w, 4), *ir = calloc((size_t)N * w, 4);
  uint16_t *hs = calloc(N, 2), *hr = calloc(N, 2);
  ASSERT_MSG(fs && fr && is && ir && hs && hr, "out of memory");
  for (int i = 0; i < N * w; i++) fs[i] = (float)(rank + 1) * (float)(i % 97), is[i] = rank * 1000 + i;

  ASSERT_OK(symm_all_reduce(comm, fs, fr, N, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < N; i++)
    ASSERT_MSG(fr[i] == (float)(w * (w + 1) / 2) * (float)(i % 97), "sum[%d] = %g", i, fr[i]);
  ASSERT_OK(symm_all_reduce(comm, is, ir, N, SYMM_DTYPE_I32, SYMM_REDUCE_MAX, NULL));
  for (int i = 0; i < N; i++) ASSERT_MSG(ir[i] == (w - 1) * 1000 + i, "max[%d] = %d", i, ir[i]);
  ASSERT_OK(symm_all_reduce(comm, is, is, N, SYMM_DTYPE_I32, SYMM_REDUCE_MIN, NULL)); /* in place */
  for (int i = 0; i < N; i++) ASSERT_MSG(is[i] == i, "min[%d] = %d", i, is[i]);
  for (int i = 0; i < N; i++) hs[i] = to_bf16((float)(rank + i % 7));
  ASSERT_OK(symm_all_reduce(comm, hs, hr, N, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < N; i++)
    ASSERT_MSG(from_bf16(hr[i]) == (float)(w * (w - 1) / 2 + w * (i % 7)), "bf16 sum[%d]", i);

  for (int i = 0; i < N * w; i++) is[i] = rank * 1000 + i;
  ASSERT_OK(symm_all_gather(comm, is, ir, N, SYMM_DTYPE_I32, NULL));
  for (int r = 0; r < w; r++)
    for (int i = 0; i < N; i++) ASSERT_MSG(ir[r * N + i] == r * 1000 + i, "gather[%d][%d]", r, i);
  ASSERT_OK(symm_reduce_scatter(comm, is, ir, N, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < N; i++)
    ASSERT_MSG(ir[i] == 1000 * w * (w - 1) / 2 + w * (rank * N + i), "scatter[%d] = %d", i, ir[i]);
  ASSERT_OK(symm_broadcast(comm, rank == 2 ? is : NULL, ir, N, SYMM_DTYPE_I32, 2, NULL));
  for (int i = 0; i < N; i++) ASSERT_MSG(ir[i] == 2000 + i, "bcast[%d] = %d", i, ir[i]);
  ASSERT_OK(symm_all_to_all(comm, is, ir, N, SYMM_DTYPE_I32, NULL));
  for (int r = 0; r < w; r++)
    for (int i = 0; i < N; i++)
      ASSERT_MSG(ir[r * N + i] == r * 1000 + rank * N + i, "alltoall[%d][%d]", r, i);
  ASSERT_OK(symm_comm_barrier(comm));
  free(fs), free(fr), free(is), free(ir), free(hs), free(hr);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nvshmem_fake_unreachable_collectives) {
  setenv("FAKENVSHMEM_UNREACHABLE", "1", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, unreachable_coll_rank, NULL), 0);
  return 0;
}

/* A library without the reduction: SYMM_ERR_UNSUPPORTED naming the
 * unreachable peer and what is missing; the others still run. */
static int no_coll_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  float x[4] = {1, 2, 3, (float)rank};
  ASSERT_RES(symm_all_reduce(comm, x, x, 4, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), rank == 1 ? "ranks 0, 2" : "rank 1");
  ASSERT_STR_CONTAINS(symm_last_error(), "nvshmemx_float_sum_reduce_on_stream");
  ASSERT_OK(symm_all_reduce(comm, x, x, 4, SYMM_DTYPE_F32, SYMM_REDUCE_MAX, NULL));
  ASSERT_MSG(x[3] == 2.0f, "max %g", x[3]);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(nvshmem_fake_unreachable_no_provider_coll) {
  setenv("FAKENVSHMEM_UNREACHABLE", "1", 1);
  setenv("FAKENVSHMEM_MISSING", "nvshmemx_float_sum_reduce_on_stream", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, no_coll_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------- all-to-all-v */

/* symm_all_to_all_v and symm_all_to_all_vdev launch the GPU engine's
 * all-to-all-v kernel with the call's parameters (fake_a2av.h). */
static int a2av_launch_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  symm_tensor_t *buf = alloc_u64(comm, 8192), *board = alloc_u64(comm, 8);
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

TEST_IMPL(nvshmem_fake_a2av_launch) {
  ASSERT_EQ(run_job(2, a2av_launch_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------ registered memory */

static uint64_t reg_value(int writer, size_t i) { return (uint64_t)writer << 40 | i; }

/* Refused on every rank alike before NVSHMEM is called (nothing
 * registered, no PE left waiting): cuMemAlloc memory, and a pointer that
 * is not its mapping's start. */
static int register_refusals(symm_comm_t *comm, void *good, void *plain) {
  fake_user_refused(comm, 0, plain, good, 512, "is not VMM memory");
  fake_user_refused(comm, 1, (char *)good + 4096, good, 512, "registers whole mappings");
  ASSERT_MSG(fakenvshmem_stats_of().registrations == 0, "registered %ld",
             fakenvshmem_stats_of().registrations);
  return 0;
}

/* A ring of stores through remote views (nvshmem_ptr of NVSHMEM's
 * symmetric address for the buffer) into every rank's own memory. */
static int register_ring(symm_comm_t *comm, symm_tensor_t *t, const uint64_t *mine, size_t n) {
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
  for (size_t i = 0; i < n; i++) ((uint64_t *)v.data)[i] = reg_value(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(mine[i], reg_value((rank + size - 1) % size, i));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_MSG(ptrs[rank] == mine, "own pointer %p, the user's %p", ptrs[rank], (void *)mine);
  ASSERT_OK(symm_comm_barrier(comm));
  return 0;
}

static int register_user_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  const size_t gran = fake_user_granularity(comm), n = gran / 8 / 2;
  fake_user_vmm_t um;
  uint64_t *mine = fake_user_vmm(comm, gran, &um);
  void *plain = fake_user_plain(comm, gran);
  ASSERT_MSG(mine && plain, "the user's memory");
  if (register_refusals(comm, mine, plain)) return 1;
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = mine;
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_register(comm, &m, sizes, 1, SYMM_DTYPE_U64, &t));
  fakenvshmem_stats_t s = fakenvshmem_stats_of();
  ASSERT_MSG(s.registrations == 1 && s.live_registered == 1, "registered %ld, live %ld",
             s.registrations, s.live_registered);
  if (register_ring(comm, t, mine, n)) return 1;
  ASSERT_OK(symm_tensor_free(t)); /* collective: unregisters on every PE */
  s = fakenvshmem_stats_of();
  ASSERT_MSG(s.unregistrations == 1 && s.live_registered == 0, "unregistered %ld, live %ld",
             s.unregistrations, s.live_registered);
  for (size_t i = 0; i < n; i += 101) ASSERT_EQ(mine[i], reg_value((rank + size - 1) % size, i));
  fake_user_vmm_free(comm, &um);
  fake_user_plain_free(comm, plain);
  symm_comm_destroy(comm);
  s = fakenvshmem_stats_of();
  ASSERT_MSG(s.live == 0 && s.live_registered == 0 && s.unregistrations == 1,
             "left: %ld allocations, %ld registrations", s.live, s.live_registered);
  return 0;
}

TEST_IMPL(nvshmem_fake_register_user) {
  setenv("NVSHMEM_CUMEM_GRANULARITY", "2M", 1); /* the fake driver's, the mappings' size */
  ASSERT_EQ(run_job(2, register_user_rank, NULL), 0);
  return 0;
}

/* A registration refused with `code` on every rank, the message naming
 * each of `why` (NULL-terminated), before anything reached NVSHMEM; the
 * communicator stays usable. */
typedef struct {
  symm_result_t code;
  const char *why[4];
} refusal_t;

static int register_refused_rank(int rank, int size, void *arg) {
  (void)rank, (void)size;
  const refusal_t *want = arg;
  const char *const *why = want->why;
  symm_comm_t *comm = comm_or_null();
  ASSERT_MSG(comm, "%s", symm_last_error());
  fake_user_vmm_t um;
  void *mine = fake_user_vmm(comm, fake_user_granularity(comm), &um);
  ASSERT_MSG(mine, "the user's memory");
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = mine;
  int64_t n = 64;
  symm_tensor_t *t = NULL;
  ASSERT_RES(symm_tensor_register(comm, &m, &n, 1, SYMM_DTYPE_U64, &t), want->code);
  for (; *why; why++) ASSERT_STR_CONTAINS(symm_last_error(), *why);
  ASSERT_EQ(fakenvshmem_stats_of().registrations, 0);
  t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc after the refusal: %s", symm_last_error());
  ASSERT_OK(symm_tensor_free(t));
  fake_user_vmm_free(comm, &um);
  symm_comm_destroy(comm);
  return 0;
}

/* SYMM_NVSHMEM_REGISTER=off: refused naming the setting. */
TEST_IMPL(nvshmem_fake_register_off) {
  setenv("SYMM_NVSHMEM_REGISTER", "off", 1);
  setenv("NVSHMEM_CUMEM_GRANULARITY", "2M", 1);
  static const refusal_t want = {SYMM_ERR_UNSUPPORTED, {"SYMM_NVSHMEM_REGISTER=off", NULL}};
  ASSERT_EQ(run_job(2, register_refused_rank, (void *)&want), 0);
  return 0;
}

/* A mapping that is not a multiple of NVSHMEM's granularity (its default
 * 512 MiB where NVSHMEM_CUMEM_GRANULARITY is unset, or the value set),
 * which real NVSHMEM 3.4.5 faults the context on: refused before NVSHMEM
 * sees it, naming the sizes and the variable. */
TEST_IMPL(nvshmem_fake_register_granularity) {
  unsetenv("SYMM_NVSHMEM_REGISTER"); /* on by default */
  unsetenv("NVSHMEM_CUMEM_GRANULARITY");
  static const refusal_t unset = {SYMM_ERR_INVALID_ARG,
                                  {"2097152 bytes", "536870912 bytes", "NVSHMEM_CUMEM_GRANULARITY, unset", NULL}};
  ASSERT_EQ(run_job(2, register_refused_rank, (void *)&unset), 0);
  setenv("NVSHMEM_CUMEM_GRANULARITY", "4M", 1);
  static const refusal_t set = {SYMM_ERR_INVALID_ARG, {"4194304 bytes", "NVSHMEM_CUMEM_GRANULARITY)", NULL}};
  ASSERT_EQ(run_job(2, register_refused_rank, (void *)&set), 0);
  setenv("NVSHMEM_CUMEM_GRANULARITY", "two megs", 1);
  static const refusal_t bad = {SYMM_ERR_INVALID_ARG, {"NVSHMEM_CUMEM_GRANULARITY=two megs", NULL}};
  ASSERT_EQ(run_job(2, register_refused_rank, (void *)&bad), 0);
  return 0;
}

/* An NVSHMEM without nvshmemx_buffer_register_symmetric: refused naming
 * the loaded version. */
TEST_IMPL(nvshmem_fake_register_missing) {
  setenv("FAKENVSHMEM_MISSING", "nvshmemx_buffer_register_symmetric", 1);
  setenv("FAKENVSHMEM_VERSION", "3.1.4", 1);
  static const refusal_t want = {SYMM_ERR_UNSUPPORTED,
                                 {"NVSHMEM 3.1.4", "nvshmemx_buffer_register_symmetric", NULL}};
  ASSERT_EQ(run_job(2, register_refused_rank, (void *)&want), 0);
  return 0;
}

/* ------------------------------------------------------- the real one */

/* The real libnvshmem_host.so.3 (SYMM_TEST_NVSHMEM_REAL_LIB, else where
 * the backend looks for it): every entry point the backend uses resolves,
 * the provider's collectives included, and the version parses.  Nothing
 * is started. */
TEST_IMPL(nvshmem_real_library_entry_points) {
  const char *name = getenv("SYMM_TEST_NVSHMEM_REAL_LIB");
  char found[4096] = "";
  if (!name || !*name) {
    void *h = dlopen(NVSH_LIB_DEFAULT, RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h), name = NVSH_LIB_DEFAULT;
    else if (nvsh_find_in_python("nvshmem", NVSH_LIB_DEFAULT, found, sizeof found)) name = found;
  }
  if (!name || !*name) {
    printf("SKIP: no %s (not on the loader's path nor in a Python environment's "
           "nvidia/nvshmem/lib; pip install nvidia-nvshmem-cu13, or set "
           "SYMM_TEST_NVSHMEM_REAL_LIB)\n", NVSH_LIB_DEFAULT);
    return TEST_SKIP;
  }
  nvsh_lib_t lib;
  char why[1024] = "";
  if (!nvsh_lib_load(&lib, name, why, sizeof why)) {
    printf("loading %s: %s\n", name, why);
    ASSERT(0);
  }
  printf("%s: NVSHMEM %d.%d.%d, %d optional entry point(s) missing%s%s\n", lib.path, lib.major,
         lib.minor, lib.patch, lib.coll_missing, lib.coll_missing ? ", first " : "",
         lib.first_missing);
  ASSERT_EQ(lib.major, 3);
  ASSERT(lib.minor >= 0 && lib.minor < 100 && lib.patch >= 0 && lib.patch < 100);
  ASSERT_EQ(lib.coll_missing, 0);
  return 0;
}

static const fake_test_t nvshmem_fake_tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name},
#include "list-nvshmem-fake.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  /* Every test uses both fakes unless it says otherwise. */
  setenv("SYMM_CUDA_LIB", FAKECUDA_PATH, 1);
  setenv("SYMM_NVSHMEM_LIB", FAKENVSHMEM_PATH, 1);
  /* The test programs link libsymmem statically: the plugin is not beside
   * them. */
  setenv("SYMM_NVSHMEM_BOOTSTRAP_PLUGIN", SYMMEM_NVSHMEM_BOOTSTRAP_PATH, 1);
  return fake_tests_main(argc, argv, nvshmem_fake_tests,
                         sizeof nvshmem_fake_tests / sizeof nvshmem_fake_tests[0]);
}
