/*
 * The native backend on machines without a GPU: every test loads the fake
 * driver of fake_cuda.c (SYMM_CUDA_LIB), whose "device memory" is shared
 * host memory, so the backend's real code paths (export, fd exchange,
 * import, mapping, contiguous views, validation, teardown) run across
 * processes and the CPU checks the data.  `native-fake-tests NAME` runs one
 * test; ctest runs each (list-native-fake.h) in its own process.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/native/native.h"
#include "harness.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "list-native-fake.h"
#undef TEST_ENTRY

/* ------------------------------------------------------------- helpers */

typedef struct fakecuda_stats {
  long handles, mappings, reservations, devallocs, streams, contexts;
} fakecuda_stats_t;

/* The fake's counters, from the copy of the library the backend loaded. */
static fakecuda_stats_t fake_stats(void) {
  fakecuda_stats_t s = {-1, -1, -1, -1, -1, -1};
  void *lib = dlopen(getenv("SYMM_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  void (*fn)(fakecuda_stats_t *) = NULL;
  if (lib) *(void **)&fn = dlsym(lib, "fakecuda_stats");
  if (fn) fn(&s);
  if (lib) dlclose(lib);
  return s;
}

/* Open fds that are fake device memory (memfds of the fake driver): the
 * exported and imported handles whose leaks matter.  The total fd count
 * also moves with the fd exchange's cached connections. */
static int count_memory_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len > 0 && strncmp(target, "/memfd:fakecuda", 15) == 0) n++;
  }
  if (d) closedir(d);
  return n;
}

#define RCHECK(cond, ...)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "rank %d: FAIL %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
      return 1;                                                                 \
    }                                                                           \
  } while (0)
#define ROK(call)                                                               \
  do {                                                                          \
    symm_result_t r_ = (call);                                                  \
    RCHECK(r_ == SYMM_SUCCESS, "%s (%s)", symm_strerror(r_), symm_last_error()); \
  } while (0)
#define RRES(call, want)                                                        \
  do {                                                                          \
    symm_result_t r_ = (call);                                                  \
    RCHECK(r_ == (want), "got %s, want %s (%s)", symm_strerror(r_),             \
           symm_strerror(want), symm_last_error());                             \
  } while (0)

static uint64_t pattern(int writer, size_t i) {
  return ((uint64_t)(writer + 1) << 40) ^ (uint64_t)i * 2654435761u;
}

static int run_job(int n, test_rank_fn fn, void *arg) {
  test_job_opts_t o;
  memset(&o, 0, sizeof o);
  o.timeout_ms = 60000;
  o.backend = "native";
  o.store_timeout_ms = 15000;
  o.kill_rank = -1;
  return test_run_ranks_opts(n, fn, arg, &o);
}

static native_state_t *state_of(symm_comm_t *comm) { return comm->backend_state; }

static symm_tensor_t *alloc_u64(symm_comm_t *comm, size_t n) {
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  if (symm_tensor_alloc(comm, sizes, 1, SYMM_DTYPE_U64, &t) != SYMM_SUCCESS) {
    fprintf(stderr, "alloc of %zu u64 failed: %s\n", n, symm_last_error());
    return NULL;
  }
  return t;
}

/* ------------------------------------------------------------- probes */

static int probe_reason_contains(const char *needle) {
  char why[512] = "";
  symm_result_t r = symm_backend_available(SYMM_BACKEND_NATIVE, why, sizeof why);
  ASSERT_EQ(r, SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(why, needle);
  return 0;
}

TEST_IMPL(native_fake_probe_no_library) {
  setenv("SYMM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  return probe_reason_contains("libcuda.so.1 not found (no NVIDIA driver)");
}

TEST_IMPL(native_fake_probe_no_device) {
  setenv("FAKECUDA_NO_DEVICE", "1", 1);
  return probe_reason_contains("cuInit failed: CUDA_ERROR_NO_DEVICE");
}

TEST_IMPL(native_fake_probe_no_vmm) {
  setenv("FAKECUDA_NO_VMM", "1", 1);
  return probe_reason_contains("virtual memory management");
}

/* ---------------------------------------------------------- full path */

/* Validation: our memory passes, other memory is named precisely. */
static int check_validate(int rank, symm_comm_t *comm, symm_tensor_t *t, void *const *ptrs) {
  size_t bytes = symm_tensor_nbytes(t);
  int size = symm_comm_size(comm);
  ROK(symm_validate(comm, symm_tensor_data(t), bytes));
  ROK(symm_validate(comm, ptrs[(rank + 1) % size], bytes));
  RRES(symm_native_ops.validate(comm, symm_tensor_data(t), bytes + ((size_t)64 << 20)),
       SYMM_ERR_MISMATCH);
  RCHECK(strstr(symm_last_error(), "smaller"), "%s", symm_last_error());
  char host[256];
  RRES(symm_native_ops.validate(comm, host, sizeof host), SYMM_ERR_INVALID_ARG);
  RCHECK(strstr(symm_last_error(), "not CUDA memory"), "%s", symm_last_error());
  void *plain = NULL;
  uint64_t one = 1;
  ROK(native_device_copy(comm, &one, sizeof one, &plain));
  RRES(symm_validate(comm, plain, 8), SYMM_ERR_NOT_FOUND);
  RRES(symm_native_ops.validate(comm, plain, 8), SYMM_ERR_INVALID_ARG);
  RCHECK(strstr(symm_last_error(), "not VMM"), "%s", symm_last_error());
  native_device_free(comm, plain);
  return 0;
}

/* The contiguous view: dense (4 MiB per rank is a multiple of 2 MiB), and
 * row r is rank r's buffer, which holds what r's left neighbour wrote. */
static int check_contiguous(int rank, symm_comm_t *comm, symm_tensor_t *t, size_t n) {
  int size = symm_comm_size(comm);
  symm_view_t v;
  ROK(symm_tensor_contiguous_view(t, &v));
  RCHECK(v.ndim == 2 && v.sizes[0] == size && v.sizes[1] == (int64_t)n && v.rank == -1,
         "ndim %d sizes %lld %lld rank %d", v.ndim, (long long)v.sizes[0], (long long)v.sizes[1],
         v.rank);
  RCHECK(v.strides[0] == (int64_t)n, "strides[0] %lld, numel %zu", (long long)v.strides[0], n);
  const uint64_t *all = v.data;
  for (int r = 0; r < size; r++) {
    int writer = (r + size - 1) % size;
    for (size_t i = 0; i < n; i += 4099)
      RCHECK(all[(size_t)r * n + i] == pattern(writer, i), "view row %d element %zu", r, i);
  }
  symm_tensor_t *found = NULL;
  int frank = 0;
  ROK(symm_tensor_lookup(&all[(size_t)(size - 1) * n + n - 1], &found, &frank, NULL));
  RCHECK(found == t && frank == -1, "lookup %p rank %d", (void *)found, frank);
  ROK(symm_validate(comm, v.data, (size_t)size * n * 8));
  return 0;
}

static int full_path_rank(int rank, int size, void *arg) {
  int fds0 = test_count_fds();
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  RCHECK(symm_comm_backend(comm) == SYMM_BACKEND_NATIVE, "backend");
  RCHECK(symm_comm_device(comm) == symm_comm_local_rank(comm) % 2, "device %d",
         symm_comm_device(comm));
  RCHECK(state_of(comm)->kind == NATIVE_HANDLE_FD, "kind %d", state_of(comm)->kind);

  const size_t n = (size_t)1 << 19; /* 4 MiB of u64 */
  symm_tensor_t *t = alloc_u64(comm, n);
  RCHECK(t, "alloc");
  void *pad = NULL;
  ROK(symm_tensor_signal_pad(t, rank, &pad));
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_BYTES; i++)
    RCHECK(((unsigned char *)pad)[i] == 0, "pad byte %zu not zero", i);
  ROK(symm_tensor_rendezvous(t));

  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  symm_view_t dst;
  ROK(symm_tensor_remote_view(t, right, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ROK(symm_comm_barrier(comm));
  const uint64_t *in = symm_tensor_data(t);
  for (size_t i = 0; i < n; i++) RCHECK(in[i] == pattern(left, i), "element %zu", i);

  void *const *ptrs = NULL;
  ROK(symm_tensor_peer_ptrs(t, &ptrs));
  void *dev = NULL;
  ROK(native_device_copy(comm, ptrs, sizeof(void *) * (size_t)size, &dev));
  RCHECK(memcmp(dev, ptrs, sizeof(void *) * (size_t)size) == 0, "device copy of peer ptrs");
  native_device_free(comm, dev);

  if (check_validate(rank, comm, t, ptrs)) return 1;
  if (check_contiguous(rank, comm, t, n)) return 1;
  ROK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);

  fakecuda_stats_t s = fake_stats();
  RCHECK(s.handles == 0 && s.mappings == 0 && s.reservations == 0 && s.devallocs == 0 &&
             s.streams == 0 && s.contexts == 0,
         "left behind: %ld handles %ld mappings %ld reservations %ld allocs %ld streams %ld "
         "contexts", s.handles, s.mappings, s.reservations, s.devallocs, s.streams, s.contexts);
  RCHECK(test_count_fds() == fds0, "fds %d, were %d", test_count_fds(), fds0);
  return 0;
}

TEST_IMPL(native_fake_full_path_2) {
  ASSERT_EQ(run_job(2, full_path_rank, NULL), 0);
  return 0;
}

TEST_IMPL(native_fake_full_path_4_shared) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(4, full_path_rank, NULL), 0);
  return 0;
}

/* A driver that grants access one mapping at a time still works. */
TEST_IMPL(native_fake_access_per_mapping) {
  setenv("FAKECUDA_ACCESS_PER_MAPPING", "1", 1);
  ASSERT_EQ(run_job(2, full_path_rank, NULL), 0);
  return 0;
}

static int shared_refused_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  RRES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  RCHECK(strstr(symm_last_error(), "SYMM_ALLOW_SHARED_DEVICE"), "%s", symm_last_error());
  return 0;
}

TEST_IMPL(native_fake_shared_refused) {
  setenv("FAKECUDA_DEVICES", "2", 1);
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  ASSERT_EQ(run_job(3, shared_refused_rank, NULL), 0);
  /* Same GPU chosen explicitly: caught by comparing the devices' UUIDs. */
  setenv("SYMM_DEVICE", "0", 1);
  ASSERT_EQ(run_job(2, shared_refused_rank, NULL), 0);
  return 0;
}

/* ---------------------------------------------------- collective errors */

static int mismatch_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, rank == 0 ? 1000 : 1001);
  RCHECK(t, "alloc");
  RRES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);
  t = alloc_u64(comm, 1000);
  ROK(symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_mismatch) {
  ASSERT_EQ(run_job(2, mismatch_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------- pool, teardown */

static int pool_reset_pad_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 4096);
  ROK(symm_tensor_rendezvous(t));
  void *pad = NULL, *data = symm_tensor_data(t);
  ROK(symm_tensor_signal_pad(t, rank, &pad));
  memset(pad, 0xab, SYMM_SIGNAL_PAD_BYTES);
  symm_tensor_free(t);
  t = alloc_u64(comm, 4096);
  RCHECK(symm_tensor_data(t) == data, "no pool hit");
  ROK(symm_tensor_signal_pad(t, rank, &pad));
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_BYTES; i++)
    RCHECK(((unsigned char *)pad)[i] == 0, "pad byte %zu not reset on reuse", i);
  ROK(symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_pool_reset_pad) {
  ASSERT_EQ(run_job(2, pool_reset_pad_rank, NULL), 0);
  return 0;
}

/* Rank 0 frees and trims while the others still map its buffer. */
static int free_while_mapped_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_u64(comm, n);
  ROK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ROK(symm_tensor_peer_ptrs(t, &ptrs));
  const uint64_t *peer0 = ptrs[0];
  if (rank == 0)
    for (size_t i = 0; i < n; i++) ((uint64_t *)symm_tensor_data(t))[i] = pattern(0, i);
  ROK(symm_comm_barrier(comm));
  if (rank == 0) {
    symm_tensor_free(t);
    t = NULL;
    ROK(symm_comm_pool_trim(comm, NULL));
    fakecuda_stats_t s = fake_stats();
    RCHECK(s.handles == 0 && s.mappings == 0 && s.reservations == 0, "rank 0 kept %ld handles",
           s.handles);
  }
  ROK(symm_comm_barrier(comm));
  if (rank != 0)
    for (size_t i = 0; i < n; i++) RCHECK(peer0[i] == pattern(0, i), "element %zu", i);
  ROK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_free_while_mapped) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1); /* 3 ranks, 2 fake GPUs */
  ASSERT_EQ(run_job(3, free_while_mapped_rank, NULL), 0);
  return 0;
}

static int cycles_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  /* Warm up: the fd exchange keeps one connection per peer once used. */
  symm_tensor_t *w = alloc_u64(comm, 1);
  ROK(symm_tensor_rendezvous(w));
  symm_tensor_free(w);
  ROK(symm_comm_pool_trim(comm, NULL));
  ROK(symm_comm_barrier(comm));
  fakecuda_stats_t s0 = fake_stats();
  int fds0 = count_memory_fds();
  for (int i = 0; i < 300; i++) {
    size_t n = 1 + (size_t)((i * 7919) % 97) * 8192; /* up to ~6 MiB */
    symm_tensor_t *t = alloc_u64(comm, n);
    RCHECK(t, "alloc %d", i);
    ROK(symm_tensor_rendezvous(t));
    if (i % 7 == 0) {
      symm_view_t v;
      ROK(symm_tensor_contiguous_view(t, &v));
    }
    symm_tensor_free(t);
  }
  size_t released = 0;
  ROK(symm_comm_pool_trim(comm, &released));
  ROK(symm_comm_barrier(comm));
  fakecuda_stats_t s = fake_stats();
  RCHECK(s.handles == s0.handles && s.mappings == s0.mappings &&
             s.reservations == s0.reservations && s.devallocs == s0.devallocs,
         "after trim: %ld handles %ld mappings %ld reservations (were %ld %ld %ld)", s.handles,
         s.mappings, s.reservations, s0.handles, s0.mappings, s0.reservations);
  RCHECK(count_memory_fds() == fds0, "memory fds %d, were %d", count_memory_fds(), fds0);
  symm_comm_destroy(comm);
  RCHECK(count_memory_fds() == 0, "memory fds %d after destroy", count_memory_fds());
  return 0;
}

TEST_IMPL(native_fake_cycles_pool) {
  ASSERT_EQ(run_job(2, cycles_rank, NULL), 0);
  return 0;
}

TEST_IMPL(native_fake_cycles_nopool) {
  setenv("SYMM_POOL_BYTES", "0", 1);
  ASSERT_EQ(run_job(2, cycles_rank, NULL), 0);
  return 0;
}

/* Destroy with live tensors and views releases everything. */
static int destroy_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  symm_tensor_t *a = alloc_u64(comm, 1 << 18), *b = alloc_u64(comm, 1000);
  ROK(symm_tensor_rendezvous(a));
  ROK(symm_tensor_rendezvous(b));
  symm_view_t v;
  ROK(symm_tensor_contiguous_view(a, &v));
  symm_tensor_free(b); /* into the pool */
  ROK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  RCHECK(s.handles == 0 && s.mappings == 0 && s.reservations == 0 && s.streams == 0 &&
             s.contexts == 0,
         "left behind: %ld handles %ld mappings %ld reservations %ld streams %ld contexts",
         s.handles, s.mappings, s.reservations, s.streams, s.contexts);
  return 0;
}

TEST_IMPL(native_fake_destroy_releases_all) {
  ASSERT_EQ(run_job(2, destroy_rank, NULL), 0);
  return 0;
}

/* --------------------------------------------------------------- handles */

typedef struct {
  native_handle_kind_t kind;
} kind_arg_t;

/* A full exchange with the expected handle kind. */
static int kind_rank(int rank, int size, void *arg) {
  const kind_arg_t *k = arg;
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  RCHECK(state_of(comm)->kind == k->kind, "kind %d, want %d", state_of(comm)->kind, k->kind);
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_u64(comm, n);
  RCHECK(t, "alloc");
  if (k->kind == NATIVE_HANDLE_FABRIC)
    RCHECK(symm_fdx_published(state_of(comm)->fdx) == 0, "fabric kind published fds");
  ROK(symm_tensor_rendezvous(t));
  symm_view_t dst;
  ROK(symm_tensor_remote_view(t, (rank + 1) % size, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ROK(symm_comm_barrier(comm));
  int left = (rank + size - 1) % size;
  for (size_t i = 0; i < n; i++)
    RCHECK(((uint64_t *)symm_tensor_data(t))[i] == pattern(left, i), "element %zu", i);
  ROK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_fabric_falls_back) {
  /* The device reports fabric support but exports fail (no IMEX): auto
   * must quietly use fds. */
  setenv("FAKECUDA_FABRIC", "fails", 1);
  setenv("SYMM_NATIVE_HANDLE", "auto", 1);
  kind_arg_t k = {NATIVE_HANDLE_FD};
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  /* Forcing fds where fabric would work. */
  setenv("FAKECUDA_FABRIC", "works", 1);
  setenv("SYMM_NATIVE_HANDLE", "fd", 1);
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  return 0;
}

static int fabric_forced_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  RRES(symm_comm_init(NULL, &comm), SYMM_ERR_UNSUPPORTED);
  RCHECK(strstr(symm_last_error(), "fabric"), "%s", symm_last_error());
  return 0;
}

TEST_IMPL(native_fake_fabric_forced_fails) {
  setenv("FAKECUDA_FABRIC", "fails", 1);
  setenv("SYMM_NATIVE_HANDLE", "fabric", 1);
  ASSERT_EQ(run_job(2, fabric_forced_rank, NULL), 0);
  return 0;
}

TEST_IMPL(native_fake_fabric_works) {
  setenv("FAKECUDA_FABRIC", "works", 1);
  setenv("SYMM_NATIVE_HANDLE", "auto", 1);
  kind_arg_t k = {NATIVE_HANDLE_FABRIC};
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  return 0;
}

static int bad_setting_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  RRES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  RCHECK(strstr(symm_last_error(), "SYMM_NATIVE_HANDLE"), "%s", symm_last_error());
  return 0;
}

TEST_IMPL(native_fake_bad_handle_setting) {
  setenv("SYMM_NATIVE_HANDLE", "carrier-pigeon", 1);
  ASSERT_EQ(run_job(2, bad_setting_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------------- multicast */

/* The fake aborts the process if any cuMulticast* entry point is even
 * resolved, so reaching the end proves the guard stopped the backend. */
static int multicast_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 1 << 18);
  ROK(symm_tensor_rendezvous(t));
  void *mc = NULL, *priv = NULL;
  unsetenv("SYMM_ENABLE_MULTICAST");
  RRES(native_multicast_map(comm, &t->mem, &mc, &priv), SYMM_ERR_UNSUPPORTED);
  RCHECK(strstr(symm_last_error(), "SYMM_ENABLE_MULTICAST"), "%s", symm_last_error());
  setenv("SYMM_ENABLE_MULTICAST", "1", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  RRES(native_multicast_map(comm, &t->mem, &mc, &priv), SYMM_ERR_UNSUPPORTED);
  RCHECK(strstr(symm_last_error(), "NCCL_NVLS_ENABLE"), "%s", symm_last_error());
  unsetenv("NCCL_NVLS_ENABLE");
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  RRES(native_multicast_map(comm, &t->mem, &mc, &priv), SYMM_ERR_UNSUPPORTED);
  unsetenv("TORCH_SYMM_MEM_DISABLE_MULTICAST");
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  RRES(native_multicast_map(comm, &t->mem, &mc, &priv), SYMM_ERR_UNSUPPORTED);
  unsetenv("SYMM_ENABLE_MULTICAST");
  RCHECK(mc == NULL && priv == NULL, "outputs touched");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_multicast_refused) {
  ASSERT_EQ(run_job(2, multicast_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------------- contexts */

/* A context the application made current (another GPU's) is put back
 * after every backend call. */
static int context_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ROK(symm_comm_init(NULL, &comm));
  native_state_t *st = state_of(comm);
  ncu_context cur = NULL, other = NULL;
  RCHECK(st->drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == st->ctx,
         "init did not leave its context current");
  ncu_device od = st->ordinal == 0 ? 1 : 0;
  RCHECK(st->drv->cuDevicePrimaryCtxRetain(&other, od) == NCU_SUCCESS, "retain");
  RCHECK(st->drv->cuCtxSetCurrent(other) == NCU_SUCCESS, "set");
  symm_tensor_t *t = alloc_u64(comm, 1 << 16);
  RCHECK(t, "alloc");
  ROK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ROK(symm_tensor_contiguous_view(t, &v));
  ROK(symm_validate(comm, symm_tensor_data(t), 8));
  symm_tensor_free(t);
  ROK(symm_comm_pool_trim(comm, NULL));
  RCHECK(st->drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == other,
         "the application's context was not restored");
  st->drv->cuCtxSetCurrent(NULL);
  st->drv->cuDevicePrimaryCtxRelease(od);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_context_restored) {
  ASSERT_EQ(run_job(2, context_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------------------ main */

static const struct {
  const char *name;
  int (*fn)(void);
} native_fake_tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name},
#include "list-native-fake.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  /* Every test uses the fake driver unless it says otherwise, and starts
   * from the multicast guard variables of a shared GPU host. */
  setenv("SYMM_CUDA_LIB", FAKECUDA_PATH, 1);
  unsetenv("SYMM_ENABLE_MULTICAST");
  size_t n = sizeof native_fake_tests / sizeof native_fake_tests[0];
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAME | --list\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(argv[1], "--list") == 0) printf("%s\n", native_fake_tests[i].name);
    else if (strcmp(argv[1], native_fake_tests[i].name) == 0) return native_fake_tests[i].fn();
  }
  if (strcmp(argv[1], "--list") == 0) return 0;
  fprintf(stderr, "no test named %s\n", argv[1]);
  return 2;
}
