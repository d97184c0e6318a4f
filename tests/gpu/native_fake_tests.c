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
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/builtin.h"
#include "backends/native/native.h"
#include "symm_test_access.h"
#include "kernels/coll_abi.h"
#include "backends/native/native_ext.h"
#include "fake_a2av.h"
#include "fake_ce.h"
#include "fake_user_mem.h"
#include "fake_util.h"
#include "harness.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "list-native-fake.h"
#undef TEST_ENTRY

/* ------------------------------------------------------------- helpers */

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

/* A job of n native ranks with SYMM_TIMEOUT_MS = symm_timeout_ms: the
 * number of ranks that failed. */
static int run_job_tmo(int n, test_rank_fn fn, void *arg, int symm_timeout_ms) {
  test_job_opts_t o = {.timeout_ms = 60000, .backend = "native",
                       .store_timeout_ms = symm_timeout_ms, .kill_rank = -1};
  return test_run_ranks_opts(n, fn, arg, &o);
}

static int run_job(int n, test_rank_fn fn, void *arg) { return run_job_tmo(n, fn, arg, 15000); }

static native_state_t *state_of(symm_comm_t *comm) { return symm_backend_state(comm); }

/* Driver handles the pad heap holds by design until symm_comm_destroy: our
 * heap chunks and the peers' chunks we imported. */
static long heap_handles(symm_comm_t *comm) {
  native_state_t *st = state_of(comm);
  pthread_mutex_lock(&st->heap_lock);
  long n = st->heap_chunks + st->peer_heap_count;
  pthread_mutex_unlock(&st->heap_lock);
  return n;
}

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

TEST_IMPL(native_fake_probe_no_library) {
  setenv("SYMM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  return fake_probe_refused(SYMM_BACKEND_NATIVE, "libcuda.so.1 not found (no NVIDIA driver)");
}

TEST_IMPL(native_fake_probe_no_device) {
  setenv("FAKECUDA_NO_DEVICE", "1", 1);
  return fake_probe_refused(SYMM_BACKEND_NATIVE, "cuInit failed: CUDA_ERROR_NO_DEVICE");
}

TEST_IMPL(native_fake_probe_no_vmm) {
  setenv("FAKECUDA_NO_VMM", "1", 1);
  return fake_probe_refused(SYMM_BACKEND_NATIVE, "virtual memory management");
}

/* The backend asked for is unusable on some ranks only (no driver there):
 * every rank fails with the same message, naming those ranks and quoting
 * the first one's reason, not only the ranks that cannot use it. */
static int unusable_somewhere_rank(int rank, int size, void *arg) {
  (void)size;
  const int bad = *(const int *)arg; /* bit r: rank r has no driver */
  if (bad & (1 << rank)) setenv("SYMM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), "libcuda.so.1 not found");
  ASSERT_STR_CONTAINS(symm_last_error(), bad == 1 ? "backend native is not usable on rank 0"
                                                  : "not usable on ranks 0, 2");
  if (bad != 1) ASSERT_STR_CONTAINS(symm_last_error(), "; on rank 0: ");
  if (bad & (1 << rank)) ASSERT_STR_CONTAINS(symm_last_error(), "this rank");
  return 0;
}

TEST_IMPL(native_fake_unusable_on_one_rank) {
  int bad = 1;
  ASSERT_EQ(run_job(3, unusable_somewhere_rank, &bad), 0);
  bad = 5;
  ASSERT_EQ(run_job(3, unusable_somewhere_rank, &bad), 0);
  return 0;
}

/* Stream-ordered 32-bit writes on GPU memory (the fake driver runs them at
 * once): rank 0 fills rank 1's buffer through its mapping and raises a
 * flag word in rank 1's pad; rank 1 sees the fill once the flag is up.
 * The device array of pad pointers holds what symm_tensor_signal_pad
 * gives; memory that is no device memory is refused by the driver. */
static int write32_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 512);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL, *const *pads_dev = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_OK(symm_tensor_signal_pad_ptrs_device(t, &pads_dev));
  void *const *again = NULL;
  ASSERT_OK(symm_tensor_signal_pad_ptrs_device(t, &again));
  ASSERT_MSG(again == pads_dev, "a second array");
  for (int r = 0; r < size; r++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, r, &pad));
    ASSERT_MSG(pads_dev[r] == pad, "pad %d: %p in the device array, %p", r, pads_dev[r], pad);
  }
  void *flag_pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, 1, &flag_pad));
  uint32_t *flag = (uint32_t *)flag_pad + SYMM_SIGNAL_PAD_MIN_BYTES / 4 - 1;
  if (rank == 0) {
    ASSERT_OK(symm_memset32(comm, ptrs[1], 0xfeedu, 1024, NULL));
    ASSERT_OK(symm_write_value32(comm, flag, 1, NULL));
  } else {
    const uint64_t end = test_now_ms() + 20000;
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != 1) ASSERT_MSG(test_now_ms() < end, "no flag");
    const uint32_t *mine = ptrs[1];
    for (int k = 0; k < 1024; k++) ASSERT_MSG(mine[k] == 0xfeedu, "word %d: %x", k, mine[k]);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 1) *flag = 0;
  uint32_t host_word = 0;
  ASSERT_MSG(symm_write_value32(comm, &host_word, 1, NULL) != SYMM_SUCCESS, "host memory taken");
  ASSERT_STR_CONTAINS(symm_last_error(), "cuStreamWriteValue32");
  ASSERT_MSG(symm_memset32(comm, &host_word, 1, 2, NULL) != SYMM_SUCCESS, "host memory taken");
  ASSERT_STR_CONTAINS(symm_last_error(), "cuMemsetD32Async");
  ASSERT_RES(symm_write_value32(comm, (char *)ptrs[rank] + 2, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_write_value32) {
  ASSERT_EQ(run_job(2, write32_rank, NULL), 0);
  return 0;
}

/* ---------------------------------------------------------- full path */

/* Validation: our memory passes, other memory is named precisely. */
static int check_validate(int rank, symm_comm_t *comm, symm_tensor_t *t, void *const *ptrs) {
  size_t bytes = symm_tensor_nbytes(t);
  int size = symm_comm_size(comm);
  ASSERT_OK(symm_validate(comm, symm_tensor_data(t), bytes));
  ASSERT_OK(symm_validate(comm, ptrs[(rank + 1) % size], bytes));
  ASSERT_RES(symm_native_ops.validate(comm, symm_tensor_data(t), bytes + ((size_t)64 << 20)),
             SYMM_ERR_MISMATCH);
  ASSERT_MSG(strstr(symm_last_error(), "smaller"), "%s", symm_last_error());
  char host[256];
  ASSERT_RES(symm_native_ops.validate(comm, host, sizeof host), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(strstr(symm_last_error(), "not CUDA memory"), "%s", symm_last_error());
  void *plain = NULL;
  uint64_t one = 1;
  ASSERT_OK(symm_gpu_device_copy(comm, &one, sizeof one, &plain));
  ASSERT_RES(symm_validate(comm, plain, 8), SYMM_ERR_NOT_FOUND);
  ASSERT_RES(symm_native_ops.validate(comm, plain, 8), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(strstr(symm_last_error(), "not VMM"), "%s", symm_last_error());
  symm_gpu_device_free(comm, plain);
  return 0;
}

/* The contiguous view: dense (4 MiB per rank is a multiple of 2 MiB), and
 * row r is rank r's buffer, which holds what r's left neighbour wrote. */
static int check_contiguous(int rank, symm_comm_t *comm, symm_tensor_t *t, size_t n) {
  int size = symm_comm_size(comm);
  symm_view_t v;
  ASSERT_OK(symm_tensor_contiguous_view(t, &v));
  ASSERT_MSG(v.ndim == 2 && v.sizes[0] == size && v.sizes[1] == (int64_t)n && v.rank == -1,
             "ndim %d sizes %lld %lld rank %d", v.ndim, (long long)v.sizes[0],
             (long long)v.sizes[1], v.rank);
  ASSERT_MSG(v.strides[0] == (int64_t)n, "strides[0] %lld, numel %zu", (long long)v.strides[0], n);
  const uint64_t *all = v.data;
  for (int r = 0; r < size; r++) {
    int writer = (r + size - 1) % size;
    for (size_t i = 0; i < n; i += 4099)
      ASSERT_MSG(all[(size_t)r * n + i] == pattern(writer, i), "view row %d element %zu", r, i);
  }
  symm_tensor_t *found = NULL;
  int frank = 0;
  ASSERT_OK(symm_tensor_lookup(&all[(size_t)(size - 1) * n + n - 1], &found, &frank, NULL));
  ASSERT_MSG(found == t && frank == -1, "lookup %p rank %d", (void *)found, frank);
  ASSERT_OK(symm_validate(comm, v.data, (size_t)size * n * 8));
  return 0;
}

static int full_path_rank(int rank, int size, void *arg) {
  int fds0 = test_count_fds();
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(symm_comm_backend(comm) == SYMM_BACKEND_NATIVE, "backend");
  ASSERT_MSG(symm_comm_device(comm) == symm_comm_local_rank(comm) % 2, "device %d",
             symm_comm_device(comm));
  ASSERT_MSG(state_of(comm)->kind == NATIVE_HANDLE_FD, "kind %d", state_of(comm)->kind);

  const size_t n = (size_t)1 << 19; /* 4 MiB of u64 */
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc");
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_MIN_BYTES; i++)
    ASSERT_MSG(((unsigned char *)pad)[i] == 0, "pad byte %zu not zero", i);
  ASSERT_OK(symm_tensor_rendezvous(t));

  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  symm_view_t dst;
  ASSERT_OK(symm_tensor_remote_view(t, right, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const uint64_t *in = symm_tensor_data(t);
  for (size_t i = 0; i < n; i++) ASSERT_MSG(in[i] == pattern(left, i), "element %zu", i);

  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  void *dev = NULL;
  ASSERT_OK(symm_gpu_device_copy(comm, ptrs, sizeof(void *) * (size_t)size, &dev));
  ASSERT_MSG(memcmp(dev, ptrs, sizeof(void *) * (size_t)size) == 0, "device copy of peer ptrs");
  symm_gpu_device_free(comm, dev);

  if (check_validate(rank, comm, t, ptrs)) return 1;
  if (check_contiguous(rank, comm, t, n)) return 1;
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);

  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.handles == 0 && s.mappings == 0 && s.reservations == 0 && s.devallocs == 0 &&
                 s.streams == 0 && s.contexts == 0,
             "left behind: %ld handles %ld mappings %ld reservations %ld allocs %ld streams %ld "
             "contexts", s.handles, s.mappings, s.reservations, s.devallocs, s.streams, s.contexts);
  ASSERT_MSG(test_count_fds() == fds0, "fds %d, were %d", test_count_fds(), fds0);
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
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(strstr(symm_last_error(), "SYMM_ALLOW_SHARED_DEVICE"), "%s", symm_last_error());
  return 0;
}

/* A launcher that shows each process only its own GPU (CUDA_VISIBLE_DEVICES
 * per rank): one device per process, different GPUs.  Local rank 1 takes
 * ordinal 0, not an error; an explicit SYMM_DEVICE=1 still is. */
static int own_gpu_rank(int rank, int size, void *arg) {
  (void)size;
  char first[16];
  snprintf(first, sizeof first, "%d", rank);
  setenv("FAKECUDA_FIRST_DEVICE", first, 1);
  symm_comm_t *comm = NULL;
  if (arg) {
    ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
    ASSERT_MSG(strstr(symm_last_error(), "asks for GPU 1"), "%s", symm_last_error());
    return 0;
  }
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(symm_comm_device(comm) == 0, "device %d", symm_comm_device(comm));
  symm_comm_destroy(comm);
  return 0;
}

/* Two ranks on two GPUs start (arg NULL); with arg, two ranks on one GPU are
 * refused with arg in the message. */
static int two_gpus_rank(int rank, int size, void *arg) {
  (void)rank, (void)size;
  symm_comm_t *comm = NULL;
  if (arg) {
    ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
    ASSERT_MSG(strstr(symm_last_error(), (const char *)arg), "%s", symm_last_error());
    return 0;
  }
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_comm_destroy(comm);
  return 0;
}

/* Both jobs of two_gpus_rank: ranks on GPUs 0 and 1, then both on GPU 0. */
static int two_gpus_then_shared(const char *refusal) {
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  unsetenv("SYMM_DEVICE");
  if (run_job(2, two_gpus_rank, NULL) != 0) return 1;
  setenv("SYMM_DEVICE", "0", 1);
  return run_job(2, two_gpus_rank, (void *)refusal);
}

/* A driver whose UUID query fails: the GPUs are told apart by their bus
 * ids (2 ranks on 2 GPUs start; all-zero UUIDs would look like one shared
 * GPU), and 2 ranks on one GPU are still refused. */
TEST_IMPL(native_fake_no_uuid) {
  setenv("FAKECUDA_NO_UUID", "1", 1);
  ASSERT_EQ(two_gpus_then_shared("both use GPU"), 0);
  return 0;
}

/* A driver whose bus id fills the buffer without a NUL (and no UUID, so
 * the bus id names the GPU): two GPUs still start, and two ranks on one
 * GPU are refused with the id cut to 31 of its 32 bytes, not read past it. */
/* Whether file `path` holds "(" + 31 times the letter c + ")". */
static bool file_has_cut_id(const char *path, char c) {
  char want[40], text[8192];
  want[0] = '(';
  memset(want + 1, c, 31);
  want[32] = ')';
  want[33] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  return strstr(text, want) != NULL;
}

TEST_IMPL(native_fake_busid_unterminated) {
  setenv("FAKECUDA_BUSID_FULL", "1", 1);
  setenv("FAKECUDA_NO_UUID", "1", 1);
  /* Init's log line names this rank's own id: cut too (ranks 0 and 1 on
   * GPUs 0 and 1, ids of 'a's and 'b's). */
  char dir[] = "/tmp/symm-busid.XXXXXX", pattern[64], path[128];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(pattern, sizeof pattern, "%s/%%p.log", dir);
  setenv("SYMM_DEBUG", "INFO", 1);
  setenv("SYMM_DEBUG_FILE", pattern, 1);
  char want[64];
  snprintf(want, sizeof want, "both use GPU %.31s; give", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  ASSERT_EQ(two_gpus_then_shared(want), 0);
  unsetenv("SYMM_DEBUG_FILE");
  int cut[2] = {0, 0};
  DIR *d = opendir(dir);
  ASSERT(d != NULL);
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    for (int g = 0; g < 2; g++) cut[g] += file_has_cut_id(path, (char)('a' + g));
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
  ASSERT_GE(cut[0], 1);
  ASSERT_GE(cut[1], 1);
  return 0;
}

TEST_IMPL(native_fake_one_visible_gpu_each) {
  setenv("FAKECUDA_DEVICES", "1", 1);
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  unsetenv("SYMM_DEVICE");
  ASSERT_EQ(run_job(2, own_gpu_rank, NULL), 0);
  setenv("SYMM_DEVICE", "1", 1);
  ASSERT_EQ(run_job(2, own_gpu_rank, (void *)1), 0);
  return 0;
}

/* This process on a host of its own name (user + UTS namespace).  false
 * (errno set) where that cannot be done unprivileged. */
static bool rename_host(const char *name) {
  return test_enter_user_namespace(CLONE_NEWUTS) && sethostname(name, strlen(name)) == 0;
}

/* Ranks on two hosts with only POSIX-fd handles (the fake's fabric export
 * fails): refused at init on every rank, naming fabric handles, instead of
 * failing every rendezvous later. */
static int two_hosts_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  ASSERT_MSG(rank == 0 || rename_host("symm-other-host"), "namespace: %s", strerror(errno));
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "the ranks run on several hosts");
  ASSERT_STR_CONTAINS(symm_last_error(), "symm-other-host (rank 1)");
  ASSERT_STR_CONTAINS(symm_last_error(), "fabric handles");
  return 0;
}

TEST_IMPL(native_fake_fd_handles_one_host) {
  pid_t pid = test_fork();
  if (pid == 0) _exit(rename_host("symm-probe") ? 0 : 100 + errno % 100);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("SKIP: cannot make a user + UTS namespace unprivileged here (%s)\n",
           WIFEXITED(st) && WEXITSTATUS(st) >= 100 ? strerror(WEXITSTATUS(st) - 100) : "?");
    return TEST_SKIP;
  }
  ASSERT_EQ(run_job(2, two_hosts_rank, NULL), 0);
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, rank == 0 ? 1000 : 1001);
  ASSERT_MSG(t, "alloc");
  ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);
  t = alloc_u64(comm, 1000);
  ASSERT_OK(symm_tensor_rendezvous(t));
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 4096);
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *pad = NULL, *data = symm_tensor_data(t);
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  memset(pad, 0xab, SYMM_SIGNAL_PAD_MIN_BYTES);
  symm_tensor_free(t);
  t = alloc_u64(comm, 4096);
  ASSERT_MSG(symm_tensor_data(t) == data, "no pool hit");
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_MIN_BYTES; i++)
    ASSERT_MSG(((unsigned char *)pad)[i] == 0, "pad byte %zu not reset on reuse", i);
  ASSERT_OK(symm_tensor_rendezvous(t));
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  const uint64_t *peer0 = ptrs[0];
  if (rank == 0)
    for (size_t i = 0; i < n; i++) ((uint64_t *)symm_tensor_data(t))[i] = pattern(0, i);
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 0) {
    symm_tensor_free(t);
    t = NULL;
    ASSERT_OK(symm_comm_pool_trim(comm, NULL));
    /* What is left is the pad heap, until symm_comm_destroy: one chunk of
     * ours and one imported from each peer, and nothing else. */
    native_state_t *st = state_of(comm);
    ASSERT_MSG(st->heap_chunks == 1 && st->peer_heap_count == size - 1,
               "heap: %ld chunks, %ld imported", st->heap_chunks, st->peer_heap_count);
    fakecuda_stats_t s = fake_stats();
    ASSERT_MSG(s.handles == heap_handles(comm) && s.mappings == 0 && s.reservations == 0,
               "rank 0 kept %ld handles (heap %ld) %ld mappings %ld reservations", s.handles,
               heap_handles(comm), s.mappings, s.reservations);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank != 0)
    for (size_t i = 0; i < n; i++) ASSERT_MSG(peer0[i] == pattern(0, i), "element %zu", i);
  ASSERT_OK(symm_comm_barrier(comm));
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  /* Warm up: the fd exchange keeps one connection per peer once used, and
   * the pad heap (one chunk here, one imported per peer) stays until
   * symm_comm_destroy; both are in the baseline, and checked below not to
   * grow. */
  symm_tensor_t *w = alloc_u64(comm, 1);
  ASSERT_OK(symm_tensor_rendezvous(w));
  symm_tensor_free(w);
  ASSERT_OK(symm_comm_pool_trim(comm, NULL));
  ASSERT_OK(symm_comm_barrier(comm));
  fakecuda_stats_t s0 = fake_stats();
  int fds0 = count_memory_fds();
  long heap0 = heap_handles(comm);
  ASSERT_MSG(heap0 == size, "heap handles %ld after the warm-up, want %d", heap0, size);
  for (int i = 0; i < 300; i++) {
    size_t n = 1 + (size_t)((i * 7919) % 97) * 8192; /* up to ~6 MiB */
    symm_tensor_t *t = alloc_u64(comm, n);
    ASSERT_MSG(t, "alloc %d", i);
    ASSERT_OK(symm_tensor_rendezvous(t));
    if (i % 7 == 0) {
      symm_view_t v;
      ASSERT_OK(symm_tensor_contiguous_view(t, &v));
    }
    symm_tensor_free(t);
  }
  size_t released = 0;
  ASSERT_OK(symm_comm_pool_trim(comm, &released));
  ASSERT_OK(symm_comm_barrier(comm));
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.handles == s0.handles && s.mappings == s0.mappings &&
                 s.reservations == s0.reservations && s.devallocs == s0.devallocs,
             "after trim: %ld handles %ld mappings %ld reservations (were %ld %ld %ld)", s.handles,
             s.mappings, s.reservations, s0.handles, s0.mappings, s0.reservations);
  ASSERT_MSG(count_memory_fds() == fds0, "memory fds %d, were %d", count_memory_fds(), fds0);
  ASSERT_MSG(heap_handles(comm) == heap0, "heap handles %ld, were %ld", heap_handles(comm), heap0);
  symm_comm_destroy(comm);
  ASSERT_MSG(count_memory_fds() == 0, "memory fds %d after destroy", count_memory_fds());
  s = fake_stats();
  ASSERT_MSG(s.handles == 0 && s.mappings == 0 && s.reservations == 0, "after destroy: %ld handles "
             "%ld mappings %ld reservations", s.handles, s.mappings, s.reservations);
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *a = alloc_u64(comm, 1 << 18), *b = alloc_u64(comm, 1000);
  ASSERT_OK(symm_tensor_rendezvous(a));
  ASSERT_OK(symm_tensor_rendezvous(b));
  symm_view_t v;
  ASSERT_OK(symm_tensor_contiguous_view(a, &v));
  symm_tensor_free(b); /* into the pool */
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.handles == 0 && s.mappings == 0 && s.reservations == 0 && s.streams == 0 &&
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
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(state_of(comm)->kind == k->kind, "kind %d, want %d", state_of(comm)->kind, k->kind);
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc");
  if (k->kind == NATIVE_HANDLE_FABRIC)
    ASSERT_MSG(symm_fdx_published(state_of(comm)->fdx) == 0, "fabric kind published fds");
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t dst;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  int left = (rank + size - 1) % size;
  for (size_t i = 0; i < n; i++)
    ASSERT_MSG(((uint64_t *)symm_tensor_data(t))[i] == pattern(left, i), "element %zu", i);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_fabric_falls_back) {
  /* The device reports fabric support but exports fail (no IMEX): auto
   * must quietly use fds. */
  setenv("FAKECUDA_FABRIC", "fails", 1);
  setenv("SYMM_NATIVE_HANDLE", "auto", 1);
  kind_arg_t k = {.kind = NATIVE_HANDLE_FD};
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  /* Forcing fds where fabric would work. */
  setenv("FAKECUDA_FABRIC", "works", 1);
  setenv("SYMM_NATIVE_HANDLE", "fd", 1);
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  return 0;
}

static int fabric_forced_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_UNSUPPORTED);
  ASSERT_MSG(strstr(symm_last_error(), "fabric"), "%s", symm_last_error());
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
  kind_arg_t k = {.kind = NATIVE_HANDLE_FABRIC};
  ASSERT_EQ(run_job(2, kind_rank, &k), 0);
  return 0;
}

static int bad_setting_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(strstr(symm_last_error(), "SYMM_NATIVE_HANDLE"), "%s", symm_last_error());
  return 0;
}

TEST_IMPL(native_fake_bad_handle_setting) {
  setenv("SYMM_NATIVE_HANDLE", "carrier-pigeon", 1);
  ASSERT_EQ(run_job(2, bad_setting_rank, NULL), 0);
  return 0;
}

/* -------------------------------------------------------------- pad heap */

static native_alloc_t *alloc_of(symm_tensor_t *t) { return symm_tensor_mem(t)->priv; }

/* Checks of the signal pads of live tensors ts[0..n): each in its own slot
 * of a heap-chunk window right in front of the data; slots of the window
 * that no live tensor owns read zero. */
static int check_pad_slots(int rank, symm_comm_t *comm, symm_tensor_t **ts, int n) {
  native_state_t *st = state_of(comm);
  for (int i = 0; i < n; i++) {
    native_alloc_t *a = alloc_of(ts[i]);
    const symm_mem_t *m = symm_tensor_mem(ts[i]);
    ASSERT_MSG(a->nchunks == 2 && a->heap && a->slot >= 0, "tensor %d: not in the pad heap", i);
    ASSERT_MSG(m->pad_offset == (size_t)a->slot * SYMM_SIGNAL_PAD_MIN_BYTES,
               "tensor %d: pad_offset %zu, slot %d", i, m->pad_offset, a->slot);
    ASSERT_MSG(m->data_offset == st->heap_chunk_bytes &&
                   m->pad_offset + SYMM_SIGNAL_PAD_MIN_BYTES <= m->data_offset,
               "tensor %d: pad at %zu, data at %zu", i, m->pad_offset, m->data_offset);
    for (int j = 0; j < i; j++)
      ASSERT_MSG(alloc_of(ts[j])->heap != a->heap || alloc_of(ts[j])->slot != a->slot,
                 "tensors %d and %d share slot %d", j, i, a->slot);
  }
  /* Through tensor 0's window: every slot owned by none of ts is zero. */
  const unsigned char *win = symm_tensor_mem(ts[0])->base;
  for (size_t off = 0; off < st->heap_chunk_bytes; off += SYMM_SIGNAL_PAD_MIN_BYTES) {
    bool owned = false;
    for (int i = 0; i < n; i++)
      owned |= alloc_of(ts[i])->heap == alloc_of(ts[0])->heap &&
               symm_tensor_mem(ts[i])->pad_offset == off;
    if (owned) continue;
    for (size_t b = 0; b < SYMM_SIGNAL_PAD_MIN_BYTES; b++)
      ASSERT_MSG(win[off + b] == 0, "free slot at %zu byte %zu is %u", off, b, win[off + b]);
  }
  return 0;
}

/* The pad heap: the first tensor creates and exports one heap chunk, every
 * later fresh tensor costs one export and one import per peer (its data
 * chunk only); pads are separate slots, zeroed, reached by the peers, and
 * the same memory whichever tensor's window one looks through. */
static int heap_rank(int rank, int size, void *arg) {
  const kind_arg_t *k = arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  native_state_t *st = state_of(comm);
  ASSERT_MSG(st->kind == k->kind, "kind %d, want %d", st->kind, k->kind);
  ASSERT_MSG(st->heap_chunk_bytes == st->gran && st->heap_chunks == 0,
             "heap of %zu bytes, %ld chunks", st->heap_chunk_bytes, st->heap_chunks);
  enum { N = 5 };
  const size_t n = 1 << 16;
  symm_tensor_t *ts[N] = {NULL};
  int right = (rank + 1) % size, left = (rank + size - 1) % size;

  fakecuda_stats_t s0 = fake_stats();
  ASSERT_MSG((ts[0] = alloc_u64(comm, n)) != NULL, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(ts[0]));
  fakecuda_stats_t s1 = fake_stats();
  ASSERT_MSG(s1.exports - s0.exports == 2 && s1.imports - s0.imports == 2 * (size - 1),
             "first tensor: %ld exports %ld imports, want 2 and %d", s1.exports - s0.exports,
             s1.imports - s0.imports, 2 * (size - 1));
  for (int i = 1; i < N; i++) {
    ASSERT_MSG((ts[i] = alloc_u64(comm, n * (size_t)(i + 1))) != NULL, "alloc %d", i);
    ASSERT_OK(symm_tensor_rendezvous(ts[i]));
  }
  fakecuda_stats_t s2 = fake_stats();
  ASSERT_MSG(s2.exports - s1.exports == N - 1 && s2.imports - s1.imports == (N - 1) * (size - 1),
             "%d more tensors: %ld exports %ld imports, want %d and %d", N - 1,
             s2.exports - s1.exports, s2.imports - s1.imports, N - 1, (N - 1) * (size - 1));
  if (k->kind == NATIVE_HANDLE_FD)
    ASSERT_MSG(symm_fdx_published(st->fdx) == (size_t)N + 1, "%zu fds published, want %d",
               symm_fdx_published(st->fdx), N + 1);
  else
    ASSERT_MSG(symm_fdx_published(st->fdx) == 0, "fabric kind published fds");
  ASSERT_MSG(st->heap_chunks == 1 && st->peer_heap_count == size - 1, "heap %ld, imported %ld",
             st->heap_chunks, st->peer_heap_count);
  if (check_pad_slots(rank, comm, ts, N)) return 1;
  for (int i = 0; i < N; i++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(ts[i], rank, &pad));
    for (size_t b = 0; b < SYMM_SIGNAL_PAD_MIN_BYTES; b++)
      ASSERT_MSG(((unsigned char *)pad)[b] == 0, "tensor %d: pad byte %zu not zero", i, b);
  }
  ASSERT_OK(symm_comm_barrier(comm));

  /* Signal the right neighbour's pad of every tensor. */
  for (int i = 0; i < N; i++) {
    uint64_t *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(ts[i], right, (void **)&pad));
    for (size_t w = 0; w < SYMM_SIGNAL_PAD_MIN_BYTES / 8; w++) pad[w] = pattern(rank, w + 1000 * i);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  for (int i = 0; i < N; i++) {
    const uint64_t *pad = NULL, *data = symm_tensor_data(ts[i]);
    ASSERT_OK(symm_tensor_signal_pad(ts[i], rank, (void **)&pad));
    for (size_t w = 0; w < SYMM_SIGNAL_PAD_MIN_BYTES / 8; w++)
      ASSERT_MSG(pad[w] == pattern(left, w + 1000 * i), "tensor %d: pad word %zu", i, w);
    for (size_t e = 0; e < symm_tensor_numel(ts[i]); e++)
      ASSERT_MSG(data[e] == 0, "tensor %d: data element %zu written by a signal", i, e);
    /* Every window maps the same heap chunk: tensor i's pad read through
     * tensor 0's window, here and in the right neighbour's mapping. */
    const size_t pad_at = symm_tensor_mem(ts[i])->pad_offset;
    const uint64_t *alias = (const uint64_t *)((char *)symm_tensor_mem(ts[0])->base + pad_at);
    ASSERT_MSG(alias == pad || memcmp(alias, pad, SYMM_SIGNAL_PAD_MIN_BYTES) == 0,
               "tensor %d's pad differs through tensor 0's window", i);
    const uint64_t *rpad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(ts[i], right, (void **)&rpad));
    const uint64_t *ralias =
        (const uint64_t *)((char *)symm_test_tensor_peer_map(ts[0], right)->base +
                           symm_test_tensor_peer_info(ts[i], right)->pad_offset);
    ASSERT_MSG(memcmp(ralias, rpad, SYMM_SIGNAL_PAD_MIN_BYTES) == 0 &&
                   rpad[0] == pattern(rank, 1000 * i),
               "tensor %d: rank %d's pad differs through tensor 0's peer window", i, right);
  }
  ASSERT_OK(symm_comm_barrier(comm));

  /* A pooled tensor keeps its slot; reset_pad zeroes only that slot. */
  size_t off2 = symm_tensor_mem(ts[2])->pad_offset;
  symm_tensor_free(ts[2]);
  ts[2] = alloc_u64(comm, n * 3);
  ASSERT_MSG(ts[2] && symm_tensor_mem(ts[2])->pad_offset == off2, "pool hit lost its slot");
  const uint64_t *pad2 = NULL;
  ASSERT_OK(symm_tensor_signal_pad(ts[2], rank, (void **)&pad2));
  for (size_t w = 0; w < SYMM_SIGNAL_PAD_MIN_BYTES / 8; w++)
    ASSERT_MSG(pad2[w] == 0, "reused pad word %zu not reset", w);
  for (int i = 0; i < N; i++) {
    if (i == 2) continue;
    const uint64_t *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(ts[i], rank, (void **)&pad));
    ASSERT_MSG(pad[0] == pattern(left, 1000 * i), "reset_pad of tensor 2 touched tensor %d's pad",
               i);
  }
  ASSERT_OK(symm_tensor_rendezvous(ts[2]));
  ASSERT_OK(symm_comm_barrier(comm));
  for (int i = 0; i < N; i++) symm_tensor_free(ts[i]);
  ASSERT_OK(symm_comm_pool_trim(comm, NULL));
  fakecuda_stats_t s3 = fake_stats();
  ASSERT_MSG(s3.handles == heap_handles(comm) && s3.mappings == 0 && s3.reservations == 0,
             "after trim: %ld handles (heap %ld) %ld mappings %ld reservations", s3.handles,
             heap_handles(comm), s3.mappings, s3.reservations);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.handles == 0 && s.mappings == 0 && s.reservations == 0 && s.streams == 0 &&
                 s.contexts == 0,
             "left behind: %ld handles %ld mappings %ld reservations", s.handles, s.mappings,
             s.reservations);
  ASSERT_MSG(count_memory_fds() == 0, "memory fds %d after destroy", count_memory_fds());
  return 0;
}

TEST_IMPL(native_fake_heap_fd) {
  kind_arg_t k = {.kind = NATIVE_HANDLE_FD};
  ASSERT_EQ(run_job(2, heap_rank, &k), 0);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(3, heap_rank, &k), 0);
  return 0;
}

TEST_IMPL(native_fake_heap_fabric) {
  setenv("FAKECUDA_FABRIC", "works", 1);
  setenv("SYMM_NATIVE_HANDLE", "fabric", 1);
  kind_arg_t k = {.kind = NATIVE_HANDLE_FABRIC};
  ASSERT_EQ(run_job(2, heap_rank, &k), 0);
  return 0;
}

/* A small granularity (16 slots per heap chunk) and no pool: the heap
 * grows by a chunk when one is full, peers import the new chunk once, a
 * freed slot is handed out again (next-fit, so only after the others) and
 * comes back zeroed. */
static int heap_grow_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  native_state_t *st = state_of(comm);
  const int slots = (int)(st->heap_chunk_bytes / SYMM_SIGNAL_PAD_MIN_BYTES);
  ASSERT_MSG(slots == 16, "%d slots per chunk", slots);
  enum { MAXT = 40 };
  symm_tensor_t *ts[MAXT] = {NULL};
  const int n = slots + 3;
  for (int i = 0; i < n; i++) {
    ASSERT_MSG((ts[i] = alloc_u64(comm, 100)) != NULL, "alloc %d", i);
    ASSERT_OK(symm_tensor_rendezvous(ts[i]));
  }
  ASSERT_MSG(st->heap_chunks == 2 && st->peer_heap_count == 2 * (size - 1),
             "heap %ld chunks, %ld imported", st->heap_chunks, st->peer_heap_count);
  ASSERT_MSG(alloc_of(ts[slots])->heap != alloc_of(ts[0])->heap, "tensor %d not in the new chunk",
             slots);
  if (check_pad_slots(rank, comm, ts, slots) || check_pad_slots(rank, comm, ts + slots, 3))
    return 1;
  /* Peers reach the pads in the second chunk too. */
  uint64_t *rpad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(ts[n - 1], (rank + 1) % size, (void **)&rpad));
  rpad[7] = pattern(rank, 7);
  ASSERT_OK(symm_comm_barrier(comm));
  uint64_t *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(ts[n - 1], rank, (void **)&pad));
  ASSERT_MSG(pad[7] == pattern((rank + size - 1) % size, 7), "signal in the second chunk");

  /* Dirty a pad in the second chunk (slots 0-2 used, the cursor at 3),
   * free its tensor (no pool: the slot goes back), then allocate and free
   * until the slot comes round again: next-fit hands out slots 3..15 first. */
  const int victim = slots; /* slot 0 of the second chunk */
  native_heap_chunk_t *chunk = alloc_of(ts[victim])->heap;
  int slot = alloc_of(ts[victim])->slot;
  ASSERT_MSG(slot == 0, "slot %d", slot);
  ASSERT_OK(symm_tensor_signal_pad(ts[victim], rank, (void **)&pad));
  memset(pad, 0xcd, SYMM_SIGNAL_PAD_MIN_BYTES);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(ts[victim]);
  ts[victim] = NULL;
  symm_tensor_t *again = NULL;
  int tries = 0;
  for (; tries < 3 * slots; tries++) {
    ASSERT_MSG((again = alloc_u64(comm, 100)) != NULL, "alloc");
    if (alloc_of(again)->heap == chunk && alloc_of(again)->slot == slot) break;
    symm_tensor_free(again);
    again = NULL;
  }
  ASSERT_MSG(again, "slot %d never handed out again", slot);
  ASSERT_MSG(tries == slots - 3, "freed slot reused after %d allocations, want %d (next-fit)",
             tries, slots - 3);
  ASSERT_OK(symm_tensor_signal_pad(again, rank, (void **)&pad));
  for (size_t b = 0; b < SYMM_SIGNAL_PAD_MIN_BYTES; b++)
    ASSERT_MSG(((unsigned char *)pad)[b] == 0, "reused slot: byte %zu not zeroed", b);
  symm_tensor_free(again);
  ASSERT_OK(symm_comm_barrier(comm));
  for (int i = 0; i < n; i++) symm_tensor_free(ts[i]);
  fakecuda_stats_t s1 = fake_stats();
  ASSERT_MSG(s1.handles == heap_handles(comm) && s1.mappings == 0 && s1.reservations == 0,
             "after freeing all: %ld handles (heap %ld) %ld mappings %ld reservations", s1.handles,
             heap_handles(comm), s1.mappings, s1.reservations);
  for (native_heap_chunk_t *c = st->heap; c; c = c->next)
    ASSERT_MSG(c->used == 0, "chunk %llu has %d slots in use", (unsigned long long)c->heap_id,
               c->used);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.handles == 0 && s.mappings == 0 && s.reservations == 0, "left behind: %ld handles",
             s.handles);
  ASSERT_MSG(count_memory_fds() == 0, "memory fds %d after destroy", count_memory_fds());
  return 0;
}

TEST_IMPL(native_fake_heap_grows) {
  setenv("FAKECUDA_GRANULARITY", "65536", 1);
  setenv("SYMM_POOL_BYTES", "0", 1);
  ASSERT_EQ(run_job(2, heap_grow_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------------- contexts */

/* A context the application made current (another GPU's) is put back
 * after every backend call. */
static int context_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const symm_gpu_t *gpu = symm_gpu_of(comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_context cur = NULL, other = NULL;
  ASSERT_MSG(drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == symm_gpu_context(gpu),
             "init did not leave its context current");
  ncu_device od = symm_gpu_ordinal(gpu) == 0 ? 1 : 0;
  ASSERT_MSG(drv->cuDevicePrimaryCtxRetain(&other, od) == NCU_SUCCESS, "retain");
  ASSERT_MSG(drv->cuCtxSetCurrent(other) == NCU_SUCCESS, "set");
  symm_tensor_t *t = alloc_u64(comm, 1 << 16);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_contiguous_view(t, &v));
  ASSERT_OK(symm_validate(comm, symm_tensor_data(t), 8));
  symm_tensor_free(t);
  ASSERT_OK(symm_comm_pool_trim(comm, NULL));
  ASSERT_MSG(drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == other,
             "the application's context was not restored");
  drv->cuCtxSetCurrent(NULL);
  drv->cuDevicePrimaryCtxRelease(od);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_context_restored) {
  ASSERT_EQ(run_job(2, context_rank, NULL), 0);
  return 0;
}

/* An init that fails after this rank made its GPU's context current (the
 * ranks share one GPU without SYMM_ALLOW_SHARED_DEVICE) leaves the
 * thread's context as it was: the application's, here another GPU's. */
static int failed_init_context_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  char why[256];
  const symm_cu_driver_t *drv = symm_cu_driver_init(why, sizeof why);
  ASSERT_MSG(drv, "%s", why);
  ncu_context mine = NULL, cur = NULL;
  ASSERT_MSG(drv->cuDevicePrimaryCtxRetain(&mine, 1) == NCU_SUCCESS &&
                 drv->cuCtxSetCurrent(mine) == NCU_SUCCESS, "the application's context");
  setenv("SYMM_DEVICE", "0", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == mine,
             "a failed init left another context current");
  drv->cuCtxSetCurrent(NULL);
  drv->cuDevicePrimaryCtxRelease(1);
  return 0;
}

TEST_IMPL(native_fake_failed_init_context) {
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  ASSERT_EQ(run_job(2, failed_init_context_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------- collectives: what is launched
 * The fake driver runs no kernel but records each launch (name, grid,
 * parameter block): these tests check the host side of the native
 * collectives, the choices every rank must make alike. */

/* The last launch of this process; false (name empty) when there is none. */
static bool last_launch(fakecuda_launch_t *l) {
  memset(l, 0, sizeof *l);
  long (*count)(void) = NULL;
  bool (*get)(long, fakecuda_launch_t *) = NULL;
  *(void **)&count = fake_sym("fakecuda_launch_count");
  *(void **)&get = fake_sym("fakecuda_launch_get");
  return count && get && get(count() - 1, l);
}

/* Every rank's value of x, through a symmetric tensor (fake device memory
 * is host memory), equal on all ranks? */
static bool same_on_all_ranks(symm_comm_t *comm, symm_tensor_t *board, uint64_t x) {
  void *const *ptrs = NULL;
  int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (symm_tensor_peer_ptrs(board, &ptrs) != SYMM_SUCCESS) return false;
  ((volatile uint64_t *)ptrs[rank])[0] = x;
  symm_comm_barrier(comm);
  bool same = true;
  for (int r = 0; r < size; r++) same &= ((volatile uint64_t *)ptrs[r])[0] == x;
  symm_comm_barrier(comm);
  return same;
}

/* A communicator with a rendezvoused tensor of `words` u64 and a board
 * for same_on_all_ranks; done_with_comm frees them. */
static int comm_with_board(int rank, size_t words, symm_comm_t **comm, symm_tensor_t **buf,
                           symm_tensor_t **board) {
  ASSERT_OK(symm_comm_init(NULL, comm));
  *buf = alloc_u64(*comm, words);
  *board = alloc_u64(*comm, 8);
  ASSERT_MSG(*buf && *board, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(*buf));
  ASSERT_OK(symm_tensor_rendezvous(*board));
  return 0;
}
static void done_with_comm(symm_comm_t *comm, symm_tensor_t *buf, symm_tensor_t *board) {
  symm_tensor_free(board);
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
}

typedef struct { size_t bytes; const char *kernel; } expect_t;

/* A bf16 sum all-reduce of want->bytes in place on buf launches kernel
 * want->kernel (its launch in *l), and symm_all_reduce_algo names the
 * algorithm of that kernel. */
static int expect_kernel(int rank, symm_comm_t *comm, void *buf, const expect_t *want,
                         fakecuda_launch_t *l) {
  const size_t count = want->bytes / 2;
  ASSERT_OK(symm_all_reduce(comm, buf, buf, count, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
  ASSERT_MSG(last_launch(l), "no launch recorded");
  ASSERT_MSG(strcmp(l->name, want->kernel) == 0, "%zu bytes: %s, want %s", want->bytes, l->name,
             want->kernel);
  symm_algo_t algo = SYMM_ALGO_AUTO;
  ASSERT_OK(symm_all_reduce_algo(comm, count, SYMM_DTYPE_BF16, &algo));
  char name[64];
  snprintf(name, sizeof name, "_ar_%s_", symm_algo_name(algo));
  ASSERT_MSG(strstr(l->name, name), "%zu bytes: symm_all_reduce_algo says %s, %s ran", want->bytes,
             symm_algo_name(algo), l->name);
  return 0;
}

#define ASSERT_JOB(n, fn, arg) ASSERT_EQ(run_job(n, fn, arg), 0)

static int coll_launch_rank(int rank, int size, void *arg) {
  bool no_atomics = arg != NULL;
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  const size_t big = (size_t)16 << 20;
  if (comm_with_board(rank, big / 8, &comm, &buf, &board)) return 1;
  char *data = symm_tensor_data(buf);
  symm_result_t r = symm_all_reduce(comm, data, data, 2048, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL);
  ASSERT_OK(r);
  /* auto: LL to 64 KiB, LL128 to 4 MiB (NVLink-class peers only), then
   * two-shot; LL128 without native peer atomics is LL to 256 KiB, one-shot
   * to 1 MiB and two-shot above.  Count 0 still meets the peers, one-shot
   * (LL would look at no peer without packets). */
  const expect_t cases[] = {
      {0, "symm_coll_ar_one_shot_bf16_sum"},
      {4096, "symm_coll_ar_ll_bf16_sum"},
      {64 << 10, "symm_coll_ar_ll_bf16_sum"},
      {(64 << 10) + 16,
       no_atomics ? "symm_coll_ar_ll_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {256 << 10, no_atomics ? "symm_coll_ar_ll_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {(256 << 10) + 16,
       no_atomics ? "symm_coll_ar_one_shot_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {1 << 20, no_atomics ? "symm_coll_ar_one_shot_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {(1 << 20) + 16,
       no_atomics ? "symm_coll_ar_two_shot_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {4 << 20, no_atomics ? "symm_coll_ar_two_shot_bf16_sum" : "symm_coll_ar_ll128_bf16_sum"},
      {(4 << 20) + 16, "symm_coll_ar_two_shot_bf16_sum"},
      {8 << 20, "symm_coll_ar_two_shot_bf16_sum"}};
  fakecuda_launch_t l;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const size_t count = cases[k].bytes / 2;
    if (expect_kernel(rank, comm, data, &cases[k], &l)) return 1;
    ASSERT_MSG(count || l.grid == 1, "count 0: %u blocks", l.grid);
    symm_coll_params_t p;
    memcpy(&p, l.params, sizeof p);
    ASSERT_MSG(p.count == count && p.rank == rank && p.world == size && p.esize == 2,
               "params: count %llu rank %d world %d esize %d", (unsigned long long)p.count, p.rank,
               p.world, p.esize);
    /* LL kernels: blocks of 256 threads, up to 1024 (gpu_coll_ll_launch). */
    const bool ll = strstr(l.name, "_ar_ll") != NULL;
    ASSERT_MSG(l.block == (ll ? 256u : SYMM_COLL_THREADS) && l.grid >= 1 &&
                   l.grid <= (ll ? 1024u : SYMM_COLL_MAX_CHANNELS),
               "%s: grid %u block %u", l.name, l.grid, l.block);
    if (strstr(l.name, "two_shot") || strstr(l.name, "one_shot"))
      ASSERT_MSG(l.grid <= (unsigned)p.channels, "grid %u over %d channels", l.grid, p.channels);
    /* Every rank launched the same collective (same signature, grid). */
    ASSERT_MSG(same_on_all_ranks(comm, board, (uint64_t)p.sig << 32 | l.grid), "sig/grid differ");
    /* Two-shot in place on a symmetric tensor: zero copy offered, with every
     * rank's mapping of recv. */
    if (strstr(l.name, "two_shot")) {
      void *const *ptrs = NULL;
      ASSERT_OK(symm_tensor_peer_ptrs(buf, &ptrs));
      ASSERT_MSG(p.zc != 0, "two-shot on a symmetric tensor without a zero-copy key");
      for (int q = 0; q < size; q++)
        ASSERT_MSG(p.peer_recv[q] == (uint64_t)(uintptr_t)ptrs[q], "peer_recv[%d]", q);
      ASSERT_MSG(same_on_all_ranks(comm, board, p.zc), "announced zero-copy keys differ");
      ASSERT_MSG(p.zc_key != 0 && same_on_all_ranks(comm, board, p.zc_key),
                 "64-bit zero-copy key %llx differs", (unsigned long long)p.zc_key);
    }
  }
  /* Ordinary device memory: staged, no key. */
  void *plain = fake_user_plain(comm, big);
  ASSERT_MSG(plain, "cuMemAlloc");
  ASSERT_OK(
      symm_all_reduce(comm, plain, plain, (8 << 20) / 2, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
  ASSERT_MSG(last_launch(&l) && strstr(l.name, "two_shot"), "%s", l.name);
  symm_coll_params_t p;
  memcpy(&p, l.params, sizeof p);
  ASSERT_MSG(p.zc == 0 && p.zc_key == 0, "zero copy offered for ordinary memory");
  /* A forced algorithm, another dtype and op. */
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_ONE_SHOT));
  ASSERT_OK(symm_all_reduce(comm, plain, plain, 1000, SYMM_DTYPE_F32, SYMM_REDUCE_MAX, NULL));
  ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_coll_ar_one_shot_f32_max") == 0, "%s", l.name);
  /* LL and LL128 forced on more than their areas hold: LL128, then two-shot
   * (one-shot up to 1 MiB where LL128 is off). */
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_LL));
  ASSERT_OK(
      symm_all_reduce(comm, plain, plain, (1 << 20) / 2, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
  ASSERT_MSG(last_launch(&l) && strstr(l.name, no_atomics ? "one_shot" : "ll128"), "LL, 1 MiB: %s",
             l.name);
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_LL128));
  /* A rank's region of one parity half: its 128-byte lines hold less. */
  const size_t ll128_region = SYMM_COLL_LL128_BYTES / 2 / (size_t)size;
  ASSERT_MSG(ll128_region <= big, "the test buffer is smaller than an LL128 region");
  ASSERT_OK(symm_all_reduce(comm, plain, plain, ll128_region / 2, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM,
                            NULL));
  ASSERT_MSG(last_launch(&l) && strstr(l.name, "two_shot"), "LL128, %zu bytes: %s", ll128_region,
             l.name);
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_AUTO));
  /* All-gather offers zero copy from 1 MiB of output, on a symmetric recv. */
  const size_t ag_elems[2] = {((1 << 20) - 16) / 8 / size, (1 << 20) / 8 / size};
  for (int k = 0; k < 2; k++) {
    ASSERT_OK(symm_all_gather(comm, data, data + 16 * 1024 * 1024 / 2, ag_elems[k], SYMM_DTYPE_U64,
                              NULL));
    ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_coll_all_gather") == 0, "%s", l.name);
    memcpy(&p, l.params, sizeof p);
    ASSERT_MSG((p.zc != 0) == (k == 1), "all-gather of %zu bytes: zc %u",
               ag_elems[k] * 8 * (size_t)size, p.zc);
  }
  fake_user_plain_free(comm, plain);
  done_with_comm(comm, buf, board);
  return 0;
}

TEST_IMPL(native_fake_coll_choices) {
  ASSERT_JOB(2, coll_launch_rank, NULL);
  return 0;
}

/* auto at 4 ranks: LL up to 64 KiB / 3, LL128 up to 8 MiB / 12 (the
 * pushed bytes per rank grow with the peers), two-shot above; a refused
 * call and count 0 launch one block. */
static int coll_choices_4_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(size == 4, "%d ranks", size);
  const expect_t cases[] = {{21844, "symm_coll_ar_ll_bf16_sum"},
                            {21848, "symm_coll_ar_ll128_bf16_sum"},
                            {699048, "symm_coll_ar_ll128_bf16_sum"},
                            {699052, "symm_coll_ar_two_shot_bf16_sum"}};
  void *buf = fake_user_plain(comm, 1 << 20);
  ASSERT_MSG(buf, "cuMemAlloc");
  fakecuda_launch_t l;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    if (expect_kernel(rank, comm, buf, &cases[k], &l)) return 1;
  /* A call refused by the argument checks (a dtype that does not exist):
   * the rank still meets its peers, with one block whose signature no
   * valid call has. */
  ASSERT_RES(symm_all_reduce(comm, buf, buf, 16, (symm_dtype_t)99, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_coll_all_gather") == 0 && l.grid == 1,
             "refused call: %s, %u blocks", l.name, l.grid);
  symm_coll_params_t rp;
  memcpy(&rp, l.params, sizeof rp);
  ASSERT_MSG(rp.sig == 0 && rp.count == 0, "refused call: sig %u count %llu", rp.sig,
             (unsigned long long)rp.count);
  /* Count 0 of every collective (and all-reduce forced two-shot): still
   * one block that meets the peers, with a valid call's signature (odd). */
  for (int k = 0; k < 5; k++) {
    static const char *const kernel[5] = {
        "symm_coll_ar_two_shot_bf16_sum", "symm_coll_all_gather",
        "symm_coll_reduce_scatter_bf16_sum", "symm_coll_broadcast", "symm_coll_all_to_all"};
    const symm_dtype_t bf = SYMM_DTYPE_BF16;
    if (k == 0) ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_TWO_SHOT));
    ASSERT_OK(k == 0   ? symm_all_reduce(comm, NULL, NULL, 0, bf, SYMM_REDUCE_SUM, NULL)
              : k == 1 ? symm_all_gather(comm, NULL, NULL, 0, bf, NULL)
              : k == 2 ? symm_reduce_scatter(comm, NULL, NULL, 0, bf, SYMM_REDUCE_SUM, NULL)
              : k == 3 ? symm_broadcast(comm, NULL, NULL, 0, bf, 0, NULL)
                       : symm_all_to_all(comm, NULL, NULL, 0, bf, NULL));
    ASSERT_MSG(last_launch(&l) && strcmp(l.name, kernel[k]) == 0 && l.grid == 1,
               "count 0: %s (want %s), %u blocks", l.name, kernel[k], l.grid);
    symm_coll_params_t zp;
    memcpy(&zp, l.params, sizeof zp);
    ASSERT_MSG(zp.sig & 1u, "count 0 of %s: signature %x is not a valid call's", kernel[k], zp.sig);
  }
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_AUTO));
  fake_user_plain_free(comm, buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_coll_choices_4) {
  setenv("FAKECUDA_DEVICES", "4", 1);
  ASSERT_JOB(4, coll_choices_4_rank, NULL);
  return 0;
}

/* The LL flags' nonce is the same on every rank although rank 0 makes its
 * first collective on the scratch before rendezvousing another tensor and
 * the others after (legal: the collective only enqueues). */
static int nonce_order_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *board = alloc_u64(comm, 8), *other = alloc_u64(comm, 8);
  ASSERT_MSG(board && other, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(board));
  ASSERT_OK(symm_comm_reserve_scratch(comm, (size_t)64 << 20));
  void *buf = fake_user_plain(comm, 4096);
  ASSERT_MSG(buf, "cuMemAlloc");
  if (rank != 0) ASSERT_OK(symm_tensor_rendezvous(other));
  ASSERT_OK(symm_all_reduce(comm, buf, buf, 1024, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  if (rank == 0) ASSERT_OK(symm_tensor_rendezvous(other));
  fakecuda_launch_t l;
  ASSERT_MSG(last_launch(&l) && strstr(l.name, "_ar_ll_"), "%s", l.name);
  symm_coll_params_t p;
  memcpy(&p, l.params, sizeof p);
  ASSERT_MSG(same_on_all_ranks(comm, board, p.nonce), "nonce %u differs between ranks", p.nonce);
  fake_user_plain_free(comm, buf);
  symm_tensor_free(other);
  symm_tensor_free(board);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_nonce_order) {
  ASSERT_JOB(2, nonce_order_rank, NULL);
  return 0;
}

TEST_IMPL(native_fake_coll_choices_pcie) {
  setenv("FAKECUDA_P2P_ATOMICS", "0", 1); /* inherited by the ranks */
  ASSERT_JOB(2, coll_launch_rank, (void *)1);
  return 0;
}

/* Signals: the signal kernel with the right operation, peer, channel and
 * every rank's pad; a device-side error reported by the kernels (written
 * into the pinned record, as a kernel would) comes back from
 * symm_comm_check_async_error with the kernel and the peer named. */
static int signal_launch_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 64);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  int peer = (rank + 1) % size;
  symm_result_t r = symm_signal_put(t, peer, 5, NULL);
  ASSERT_OK(r);
  fakecuda_launch_t l;
  ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_signal_op") == 0, "%s", l.name);
  symm_signal_params_t sp;
  memcpy(&sp, l.params, sizeof sp);
  ASSERT_MSG(sp.op == 1 && sp.peer == peer && sp.channel == 5 && sp.rank == rank &&
                 sp.world == size,
             "op %d peer %d channel %d", sp.op, sp.peer, sp.channel);
  for (int q = 0; q < size; q++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, q, &pad));
    ASSERT_MSG(sp.pads[q] == (uint64_t)(uintptr_t)pad, "pads[%d]", q);
  }
  ASSERT_OK(symm_signal_barrier(t, symm_signal_channels(t) - 1, NULL));
  ASSERT_MSG(last_launch(&l), "no launch");
  memcpy(&sp, l.params, sizeof sp);
  ASSERT_MSG(sp.op == 3 && sp.channel == symm_signal_channels(t) - 1, "barrier op %d ch %d", sp.op,
             sp.channel);
  ASSERT_RES(symm_signal_wait(t, rank, 0, NULL), SYMM_ERR_INVALID_ARG);

  /* Errors the kernels record: a timeout in the LL kernel, then one in a
   * signal wait (kind 0). */
  volatile symm_coll_error_t *err = (volatile symm_coll_error_t *)(uintptr_t)sp.err;
  ASSERT_OK(symm_comm_check_async_error(comm));
  err->peer = (uint32_t)peer;
  err->kind = SYMM_COLL_KERNEL_AR_LL;
  err->epoch = 7;
  err->code = SYMM_ERR_TIMEOUT;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_TIMEOUT);
  char want[64];
  snprintf(want, sizeof want, "rank %d did not arrive", peer);
  ASSERT_MSG(strstr(symm_last_error(), "ar_ll kernel") && strstr(symm_last_error(), want), "%s",
             symm_last_error());
  ASSERT_MSG(err->code == 0, "record not cleared");
  err->peer = (uint32_t)peer;
  err->kind = 0;
  err->code = SYMM_ERR_TIMEOUT;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_TIMEOUT);
  snprintf(want, sizeof want, "rank %d did not signal", peer);
  ASSERT_MSG(strstr(symm_last_error(), "a signal put, wait or barrier") &&
                 strstr(symm_last_error(), want), "%s", symm_last_error());
  err->code = SYMM_ERR_MISMATCH;
  err->kind = SYMM_COLL_KERNEL_AR_LL128;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_MISMATCH);
  ASSERT_MSG(strstr(symm_last_error(), "ar_ll128 kernel"), "%s", symm_last_error());
  /* A kernel that did not run because an earlier one timed out. */
  err->peer = 0xffffffffu;
  err->kind = SYMM_COLL_KERNEL_AR_ONE_SHOT;
  err->code = SYMM_ERR_TIMEOUT;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_TIMEOUT);
  ASSERT_MSG(strstr(symm_last_error(), "did not run: an earlier collective timed out"), "%s",
             symm_last_error());
  ASSERT_OK(symm_comm_check_async_error(comm));
  /* A kernel that fails while an error is unread leaves its code in
   * `more`: reported with the first, or alone once the first was read. */
  err->peer = (uint32_t)peer;
  err->kind = SYMM_COLL_KERNEL_AR_TWO_SHOT;
  err->code = SYMM_ERR_TIMEOUT;
  err->more = SYMM_ERR_MISMATCH;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_TIMEOUT);
  ASSERT_STR_CONTAINS(symm_last_error(), "ar_two_shot kernel");
  ASSERT_STR_CONTAINS(symm_last_error(), "a later collective failed too");
  ASSERT_MSG(err->code == 0 && err->more == 0, "record not cleared");
  err->more = SYMM_ERR_MISMATCH;
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_MISMATCH);
  ASSERT_MSG(strstr(symm_last_error(), "its details were not kept"), "%s", symm_last_error());
  ASSERT_OK(symm_comm_check_async_error(comm));
  symm_comm_barrier(comm);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_signal_launches) {
  ASSERT_JOB(2, signal_launch_rank, NULL);
  return 0;
}

/* One-sided puts: a copy-engine copy (cuMemcpyAsync, no kernel) into the
 * peer's mapping at the offset, on the caller's stream; put_signal's
 * signal kernel comes after its copy; a get copies the other way; a
 * refused copy is the backend error it is. */
static int put_launch_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 512);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  const int peer = 1 - rank;
  unsigned char src[100];
  memset(src, 0x5A + rank, sizeof src);
  void *stream = (void *)(uintptr_t)0x1234;
  long (*count)(void) = NULL;
  bool (*get)(long, fakecuda_launch_t *) = NULL;
  *(void **)&count = fake_sym("fakecuda_launch_count");
  *(void **)&get = fake_sym("fakecuda_launch_get");
  ASSERT_MSG(count && get, "the fake driver's launch log");
  const long before = count();
  ASSERT_OK(symm_put_signal(t, peer, 24, src, sizeof src, 0, stream));
  ASSERT_EQ(count(), before + 2);
  fakecuda_launch_t copy, sig;
  ASSERT_MSG(get(before, &copy) && get(before + 1, &sig), "log");
  uint64_t args[3];
  memcpy(args, copy.params, sizeof args);
  ASSERT_MSG(strcmp(copy.name, "cuMemcpyAsync") == 0 && strcmp(sig.name, "symm_signal_op") == 0,
             "%s then %s", copy.name, sig.name);
  ASSERT_MSG(args[0] == (uint64_t)(uintptr_t)ptrs[peer] + 24 &&
                 args[1] == (uint64_t)(uintptr_t)src && args[2] == sizeof src,
             "copy %#llx <- %#llx, %llu bytes", (unsigned long long)args[0],
             (unsigned long long)args[1], (unsigned long long)args[2]);
  ASSERT_OK(symm_comm_barrier(comm));
  unsigned char back[100];
  ASSERT_OK(symm_get(t, rank, 24, back, sizeof back, stream));
  for (size_t i = 0; i < sizeof back; i++) ASSERT_EQ(back[i], 0x5A + peer);
  setenv("FAKECUDA_COPY_FAILS", "1", 1);
  ASSERT_RES(symm_put(t, peer, 0, src, 8, stream), SYMM_ERR_BACKEND);
  ASSERT_STR_CONTAINS(symm_last_error(), "cuMemcpyAsync");
  unsetenv("FAKECUDA_COPY_FAILS");
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_put_copies) {
  ASSERT_JOB(2, put_launch_rank, NULL);
  return 0;
}

/* Copy-engine collectives (fake_ce.h): 2 ranks on their own GPUs, 4 ranks
 * sharing GPUs. */
TEST_IMPL(native_fake_ce_collectives) {
  ASSERT_EQ(run_job(2, fake_ce_rank, NULL), 0);
  return 0;
}

TEST_IMPL(native_fake_ce_collectives_4_shared) {
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_EQ(run_job(4, fake_ce_rank, NULL), 0);
  return 0;
}

/* One rank: an all-reduce out of place is one copy and no kernel, in place
 * nothing at all. */
static int alone_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 1024);
  ASSERT_MSG(t, "alloc");
  uint64_t *d = symm_tensor_data(t);
  long (*count)(void) = NULL;
  bool (*get)(long, fakecuda_launch_t *) = NULL;
  *(void **)&count = fake_sym("fakecuda_launch_count");
  *(void **)&get = fake_sym("fakecuda_launch_get");
  ASSERT_MSG(count && get, "the fake driver's launch log");
  long before = count();
  ASSERT_OK(symm_all_reduce(comm, d, d + 512, 512, SYMM_DTYPE_U64, SYMM_REDUCE_SUM, NULL));
  fakecuda_launch_t l;
  ASSERT_EQ(count(), before + 1);
  ASSERT_MSG(get(before, &l) && strcmp(l.name, "cuMemcpyAsync") == 0, "%s", l.name);
  before = count();
  ASSERT_OK(symm_all_reduce(comm, d, d, 512, SYMM_DTYPE_U64, SYMM_REDUCE_AVG, NULL));
  ASSERT_EQ(count(), before);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

/* Ranks sharing one GPU: every grid fits beside the other ranks' (132 SMs
 * over 4 x 3 ranks: 11 blocks), unless SYMM_COLL_MAX_BLOCKS (arg) says more. */
static int shared_grid_rank(int rank, int size, void *arg) {
  (void)rank;
  const unsigned cap = arg ? 100u : 132u / (4u * (unsigned)size);
  if (arg) setenv("SYMM_COLL_MAX_BLOCKS", "100", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *buf = alloc_u64(comm, (8 << 20) / 8);
  ASSERT_MSG(buf, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(buf));
  char *data = symm_tensor_data(buf);
  fakecuda_launch_t l;
  const size_t bytes[3] = {4096, 1 << 20, 8 << 20};
  unsigned most = 0;
  for (int k = 0; k < 3; k++) {
    ASSERT_OK(symm_all_reduce(comm, data, data, bytes[k] / 2, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM,
                              NULL));
    ASSERT_MSG(last_launch(&l), "no launch");
    ASSERT_MSG(l.grid <= cap, "%zu bytes: grid %u over the cap %u", bytes[k], l.grid, cap);
    if (l.grid > most) most = l.grid;
  }
  ASSERT_MSG(most == cap, "the largest grid is %u, not the cap %u", most, cap);
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_shared_gpu_grids) {
  setenv("FAKECUDA_DEVICES", "1", 1);
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_JOB(3, shared_grid_rank, NULL);
  ASSERT_JOB(3, shared_grid_rank, (void *)1);
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  return 0;
}

TEST_IMPL(native_fake_one_rank) {
  ASSERT_JOB(1, alone_rank, NULL);
  return 0;
}

/* How kernels are launched: with programmatic dependent launch by default
 * (through cuLaunchKernelEx), plainly with SYMM_GPU_PDL=0 or a driver
 * without cuLaunchKernelEx; SYMM_COLL_MAX_BLOCKS caps every grid,
 * SYMM_COLL_LL_THREADS sets the LL kernels' blocks. */
typedef struct {
  int pdl;             /* expected for every launch */
  unsigned blocks;     /* expected cap of the grids, 0: the defaults */
  unsigned ll_threads; /* expected block of LL and LL128, 0: the default (256) */
} launch_expect_t;

static int launch_settings_rank(int rank, int size, void *arg) {
  (void)rank, (void)size;
  const launch_expect_t *want = arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  /* Fake device memory is host memory that the kernels never touch. */
  symm_tensor_t *buf = alloc_u64(comm, (68 << 20) / 8);
  ASSERT_MSG(buf, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(buf));
  char *data = symm_tensor_data(buf);
  /* LL, LL128, two-shot with segments of 4 MiB and 34 MiB. */
  const size_t bytes[4] = {4096, 1 << 20, 8 << 20, 68 << 20};
  /* Their grids at 2 ranks: LL's 512 packets and LL128's 8739 lines of 8
   * threads in blocks of ll_threads, and two-shot's 88 blocks up to 32 MiB
   * segments, 96 above (gpu_coll_bw_blocks). */
  const unsigned t = want->ll_threads ? want->ll_threads : 256;
  const unsigned full[4] = {(512 + t - 1) / t, (8739 * 8 + t - 1) / t, 88, 96};
  const unsigned block[4] = {t, t, SYMM_COLL_THREADS, SYMM_COLL_THREADS};
  fakecuda_launch_t l;
  for (int k = 0; k < 4; k++) {
    symm_result_t r =
        symm_all_reduce(comm, data, data, bytes[k] / 2, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL);
    ASSERT_OK(r);
    ASSERT_MSG(last_launch(&l), "no launch");
    unsigned grid = want->blocks && want->blocks < full[k] ? want->blocks : full[k];
    ASSERT_MSG(l.pdl == want->pdl && l.grid == grid && l.block == block[k],
               "%s: pdl %d grid %u block %u, want %d, %u and %u", l.name, l.pdl, l.grid, l.block,
               want->pdl, grid, block[k]);
  }
  ASSERT_OK(symm_signal_barrier(buf, 0, NULL));
  ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_signal_op") == 0 && l.pdl == want->pdl,
             "%s: pdl %d", l.name, l.pdl);
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

/* Ranks whose LL blocks differ while their grids agree (one block each):
 * the signatures differ, so the kernels report a mismatch instead of
 * waiting on peer blocks of other indices. */
static int ll_threads_differ_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  setenv("SYMM_COLL_LL_THREADS", rank == 0 ? "256" : "512", 1);
  setenv("SYMM_COLL_MAX_BLOCKS", "1", 1);
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  if (comm_with_board(rank, 512, &comm, &buf, &board)) return 1;
  char *data = symm_tensor_data(buf);
  ASSERT_OK(symm_all_reduce(comm, data, data, 2048, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
  fakecuda_launch_t l;
  ASSERT_MSG(last_launch(&l) && strstr(l.name, "_ar_ll_") && l.grid == 1, "%s grid %u", l.name,
             l.grid);
  symm_coll_params_t p;
  memcpy(&p, l.params, sizeof p);
  ASSERT_MSG(!same_on_all_ranks(comm, board, p.sig), "same signature for blocks of %u threads",
             l.block);
  done_with_comm(comm, buf, board);
  return 0;
}

/* Ranks that ask for different all-reduce algorithms that run the same
 * kernel make the same call: LL too large for the LL area runs LL128, so
 * LL on one rank and LL128 on the other agree (same signature); at 4 KiB
 * they run different kernels, and the signatures differ. */
static int algo_resolved_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  const size_t count = (1 << 20) / 2; /* 1 MiB of bf16: more than the LL area holds */
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  if (comm_with_board(rank, count / 4, &comm, &buf, &board)) return 1;
  char *data = symm_tensor_data(buf);
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, rank == 0 ? SYMM_ALGO_LL : SYMM_ALGO_LL128));
  const size_t counts[2] = {count, 2048};
  for (int k = 0; k < 2; k++) {
    symm_algo_t runs;
    ASSERT_OK(symm_all_reduce_algo(comm, counts[k], SYMM_DTYPE_BF16, &runs));
    ASSERT_OK(symm_all_reduce(comm, data, data, counts[k], SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
    fakecuda_launch_t l;
    ASSERT_MSG(last_launch(&l), "no launch");
    symm_coll_params_t p;
    memcpy(&p, l.params, sizeof p);
    const bool same = same_on_all_ranks(comm, board, p.sig);
    if (k == 0) {
      ASSERT_MSG(runs == SYMM_ALGO_LL128 && strstr(l.name, "_ar_ll128_"), "%s runs %s",
                 symm_algo_name(runs), l.name);
      ASSERT_MSG(same, "LL run as LL128 and LL128 signed differently");
    } else {
      ASSERT_MSG(runs == (rank == 0 ? SYMM_ALGO_LL : SYMM_ALGO_LL128), "4 KiB runs %s",
                 symm_algo_name(runs));
      ASSERT_MSG(!same, "LL and LL128 at 4 KiB signed alike");
    }
  }
  done_with_comm(comm, buf, board);
  return 0;
}

TEST_IMPL(native_fake_algo_resolved) {
  ASSERT_JOB(2, algo_resolved_rank, NULL);
  return 0;
}

TEST_IMPL(native_fake_ll_threads_differ) {
  ASSERT_JOB(2, ll_threads_differ_rank, NULL);
  return 0;
}

TEST_IMPL(native_fake_launch_settings) {
  /* The settings are inherited by the ranks of each job. */
  launch_expect_t def = {.pdl = 1};
  ASSERT_JOB(2, launch_settings_rank, &def);
  setenv("SYMM_COLL_MAX_BLOCKS", "3", 1);
  launch_expect_t capped = {.pdl = 1, .blocks = 3};
  ASSERT_JOB(2, launch_settings_rank, &capped);
  /* Over the channels: only the LL kernels' grids can reach it. */
  setenv("SYMM_COLL_MAX_BLOCKS", "200", 1);
  launch_expect_t over = {.pdl = 1, .blocks = 200};
  ASSERT_JOB(2, launch_settings_rank, &over);
  setenv("SYMM_COLL_MAX_BLOCKS", "1", 1);
  setenv("SYMM_COLL_LL_THREADS", "512", 1);
  launch_expect_t one = {.pdl = 1, .blocks = 1, .ll_threads = 512};
  ASSERT_JOB(2, launch_settings_rank, &one);
  unsetenv("SYMM_COLL_MAX_BLOCKS");
  launch_expect_t wide = {.pdl = 1, .ll_threads = 512};
  ASSERT_JOB(2, launch_settings_rank, &wide);
  unsetenv("SYMM_COLL_LL_THREADS");
  /* A cap at the largest grid changes nothing (values out of range fail
   * init: test-settings). */
  static const char *const no_cap[] = {"1024", "0"};
  for (int k = 0; k < 2; k++) {
    setenv("SYMM_COLL_MAX_BLOCKS", no_cap[k], 1);
    ASSERT_JOB(2, launch_settings_rank, &def);
  }
  unsetenv("SYMM_COLL_MAX_BLOCKS");
  setenv("SYMM_GPU_PDL", "0", 1);
  launch_expect_t off = {.pdl = 0};
  ASSERT_JOB(2, launch_settings_rank, &off);
  unsetenv("SYMM_GPU_PDL");
  setenv("FAKECUDA_NO_LAUNCH_EX", "1", 1);
  ASSERT_JOB(2, launch_settings_rank, &off);
  unsetenv("FAKECUDA_NO_LAUNCH_EX");
  /* Kernels built without sm_90 code do not wait for the kernel before
   * them: no PDL, whatever the GPU. */
  setenv("FAKECUDA_PTX_VERSION", "80", 1);
  ASSERT_JOB(2, launch_settings_rank, &off);
  unsetenv("FAKECUDA_PTX_VERSION");
  /* A driver that refuses the attribute: every launch still goes, plainly. */
  setenv("FAKECUDA_LAUNCH_EX_REFUSES", "1", 1);
  ASSERT_JOB(2, launch_settings_rank, &off);
  unsetenv("FAKECUDA_LAUNCH_EX_REFUSES");
  return 0;
}

/* A driver that refuses the PDL attribute and then fails the plain launch
 * too: the call fails with the launch's error, and PDL stays on, since
 * nothing showed that plain launches work.  Once a plain launch works
 * after a refusal, PDL is off for good. */
static int launch_refused_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *buf = alloc_u64(comm, 512);
  ASSERT_MSG(buf, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(buf));
  char *data = symm_tensor_data(buf);
  fakecuda_launch_t l, first;
  last_launch(&first);
  /* 1: attribute refused, plain launch fails. */
  setenv("FAKECUDA_LAUNCH_EX_REFUSES", "1", 1);
  setenv("FAKECUDA_LAUNCH_FAILS", "1", 1);
  symm_result_t r =
      symm_all_reduce(comm, data, data, 1024, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL);
  ASSERT_MSG(r == SYMM_ERR_BACKEND && strstr(symm_last_error(), "cuLaunchKernel(ar_ll collective"),
             "%s: %s", symm_strerror(r), symm_last_error());
  ASSERT_MSG(!last_launch(&l) || memcmp(&l, &first, sizeof l) == 0, "%s was recorded", l.name);
  /* 2: a driver that takes the attribute again: still launched with PDL. */
  unsetenv("FAKECUDA_LAUNCH_EX_REFUSES");
  unsetenv("FAKECUDA_LAUNCH_FAILS");
  const int pdl_want[3] = {1, 0, 0};
  for (int step = 0; step < 3; step++) {
    /* 3: refused, plain works: plain from now on (4: even when not refused). */
    if (step == 1) setenv("FAKECUDA_LAUNCH_EX_REFUSES", "1", 1);
    if (step == 2) unsetenv("FAKECUDA_LAUNCH_EX_REFUSES");
    ASSERT_OK(symm_all_reduce(comm, data, data, 1024, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL));
    ASSERT_MSG(last_launch(&l) && l.pdl == pdl_want[step], "step %d: pdl %d, want %d", step + 2,
               l.pdl, pdl_want[step]);
  }
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_launch_refused) {
  ASSERT_JOB(2, launch_refused_rank, NULL);
  return 0;
}

/* SYMM_COLL_KERNELS: a kernel file replaces the embedded kernels (also in
 * a build without them), and a file that cannot serve fails communicator
 * creation on every rank with the reason.  The fake driver refuses an image
 * starting "BAD!", gives "SKEW"/"SKWS"/"SKWV" parameter blocks or an ABI
 * version of another size and "OLD!" no ABI markers. */
typedef struct {
  const char *content[2]; /* rank r's file; NULL: missing; "-": setting unset */
  const char *why[2];     /* expected in rank r's init error; NULL: it works */
} kernels_file_t;

static int kernels_file_pid; /* the test's pid, set before the ranks fork */
static void kernels_file_path(char *path, size_t n, int rank) {
  snprintf(path, n, "/tmp/symm-kernels-%d-%d.fatbin", kernels_file_pid, rank);
}

static int kernels_file_rank(int rank, int size, void *arg) {
  (void)size;
  const kernels_file_t *k = arg;
  char path[64];
  kernels_file_path(path, sizeof path, rank);
  if (k->content[rank] && strcmp(k->content[rank], "-") == 0) unsetenv("SYMM_COLL_KERNELS");
  else setenv("SYMM_COLL_KERNELS", path, 1);
  symm_comm_t *comm = NULL;
  symm_result_t r = symm_comm_init(NULL, &comm);
  if (k->why[rank]) {
    ASSERT_MSG(r != SYMM_SUCCESS && strstr(symm_last_error(), k->why[rank]), "init: %s (%s)",
               symm_strerror(r), symm_last_error());
    return 0;
  }
  ASSERT_OK(r);
  symm_tensor_t *buf = alloc_u64(comm, 512);
  ASSERT_MSG(buf, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(buf));
  r = symm_all_reduce(comm, symm_tensor_data(buf), symm_tensor_data(buf), 1024,
                      SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, NULL);
#ifndef SYMM_HAVE_KERNELS
  /* Without the setting, a build without kernels has no collectives. */
  if (strcmp(k->content[rank], "-") == 0) {
    ASSERT_MSG(r == SYMM_ERR_UNSUPPORTED && strstr(symm_last_error(), "without CUDA kernels"),
               "%s (%s)", symm_strerror(r), symm_last_error());
  } else
#endif
  {
    ASSERT_OK(r);
    fakecuda_launch_t l;
    ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_coll_ar_ll_bf16_sum") == 0, "launched %s",
               l.name);
    /* The kernels came from this rank's file. */
    void (*image)(char out[8]) = NULL;
    *(void **)&image = fake_sym("fakecuda_module_image");
    char got[8] = {0};
    if (image) image(got);
    if (strcmp(k->content[rank], "-") != 0)
      ASSERT_MSG(memcmp(got, k->content[rank], 4) == 0, "loaded an image starting '%.4s'", got);
  }
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_kernels_file) {
  kernels_file_pid = (int)getpid();
  const char *other = "rank 0 runs other collective kernels than rank 1";
  const kernels_file_t cases[] = {
      {{"GOOD kernel image", "GOOD kernel image"}, {NULL, NULL}},
      {{"-", "-"}, {NULL, NULL}}, /* the embedded kernels */
      {{NULL, NULL}, {"cannot read it", "cannot read it"}},
      {{"", ""}, {"0 bytes", "0 bytes"}},
      {{"BAD! kernel image", "BAD! kernel image"},
       {"the driver cannot load it", "the driver cannot load it"}},
      {{"SKEW kernel image", "SKEW kernel image"},
       {"built from another version", "built from another version"}},
      {{"SKWS kernel image", "SKWS kernel image"},
       {"built from another version", "built from another version"}},
      {{"SKWV kernel image", "SKWV kernel image"},
       {"built from another version", "built from another version"}},
      {{"OLD! kernel image", "OLD! kernel image"}, {"no ABI markers", "no ABI markers"}},
      /* Ranks that would run different kernels all fail. */
      {{"GOOD one", "GOOD two"}, {"rank 1 runs other collective kernels", other}},
      {{"GOOD one", "-"}, {"(the embedded ones)", other}},
      {{NULL, "GOOD one"}, {"cannot read it", "rank 0 could not read the file"}},
  };
  int rc = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !rc; i++) {
    for (int r = 0; r < 2; r++) {
      char path[64];
      kernels_file_path(path, sizeof path, r);
      unlink(path);
      const char *c = cases[i].content[r];
      if (c && strcmp(c, "-") != 0) {
        FILE *f = fopen(path, "wb");
        ASSERT(f != NULL);
        fputs(c, f);
        fclose(f);
      }
    }
    rc = run_job(2, kernels_file_rank, (void *)&cases[i]);
    if (rc) fprintf(stderr, "case %zu failed\n", i);
  }
  for (int r = 0; r < 2; r++) {
    char path[64];
    kernels_file_path(path, sizeof path, r);
    unlink(path);
  }
  ASSERT_EQ(rc, 0);
  return 0;
}

/* Ranks whose counts differ so that only rank 0 must grow the scratch: rank
 * 0 waits in the growth's rendezvous, which rank 1 never joins, and gets a
 * timeout that says why; rank 1's call only enqueues. */
static int scratch_growth_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const size_t big = (size_t)16 << 20;
  void *buf = fake_user_plain(comm, big);
  ASSERT_MSG(buf, "cuMemAlloc");
  /* Both ranks: a small call that reserves the default scratch. */
  symm_result_t r = symm_all_reduce(comm, buf, buf, 1024, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  ASSERT_OK(r);
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_ONE_SHOT));
  /* One-shot stages world x the buffer per half: 16 MiB grows the scratch,
   * 1 KiB does not. */
  size_t count = rank == 0 ? big / 4 : 256;
  r = symm_all_reduce(comm, buf, buf, count, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  if (rank == 0) {
    /* A timeout; lost, if rank 1 (which sleeps past it) went first. */
    ASSERT_MSG(r == SYMM_ERR_TIMEOUT || r == SYMM_ERR_PEER_LOST, "%s", symm_strerror(r));
    ASSERT_MSG(strstr(symm_last_error(), "ranks whose calls differ grow the scratch") &&
                   strstr(symm_last_error(), "collective scratch"),
               "%s", symm_last_error());
  } else {
    ASSERT_OK(r);
  }
  fake_user_plain_free(comm, buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_scratch_growth_differs) {
  ASSERT_EQ(run_job_tmo(2, scratch_growth_rank, NULL, 1000), 0);
  return 0;
}

/* symm_comm_scratch_bytes: reserving what it says for buffers of up to B
 * bytes, every collective and every all-reduce algorithm on such buffers
 * runs without growing the scratch (which a graph capture could not do). */
static int scratch_query_rank(int rank, int size, void *arg) {
  (void)rank, (void)arg;
  unsetenv("SYMM_SCRATCH_BYTES");
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  /* Per-rank bytes of the largest buffer: enough that its need exceeds the
   * default scratch (SYMM_SCRATCH_BYTES), which reserving never goes below. */
  const size_t B = ((size_t)24 << 20) + 48;
  size_t need = 0;
  symm_result_t q = symm_comm_scratch_bytes(comm, B, &need);
  ASSERT_OK(q);
  /* One-shot is the largest need at 3 ranks: two halves of world x the
   * buffer (regions rounded to 64 elements of at most 8 bytes, halves to
   * 256 bytes) after the LL areas. */
  const size_t lo = SYMM_COLL_STAGE_OFF + 2 * (size_t)size * B;
  ASSERT_MSG(need >= lo && need <= lo + 2 * ((size_t)size * 512 + 256),
             "%zu bytes for %zu-byte buffers at %d ranks", need, B, size);
  void *send = fake_user_plain(comm, B), *recv = fake_user_plain(comm, B);
  ASSERT_MSG(send && recv, "cuMemAlloc");
  /* The first scratch: the default SYMM_SCRATCH_BYTES (32 MiB) of staging
   * after the LL areas. */
  ASSERT_OK(symm_all_reduce(comm, send, recv, 64, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  const symm_tensor_t *first = symm_comm_scratch_current(comm);
  ASSERT_MSG(first && symm_tensor_nbytes(first) == SYMM_COLL_STAGE_OFF + ((size_t)32 << 20),
             "first scratch of %zu bytes", first ? symm_tensor_nbytes(first) : 0);
  ASSERT_OK(symm_comm_reserve_scratch(comm, need));
  const symm_tensor_t *scratch = symm_comm_scratch_current(comm);
  ASSERT_MSG(scratch != NULL, "no scratch after reserving");
  const size_t n = B / 4, per = B / 4 / (size_t)size; /* f32 elements */
  const symm_algo_t algos[] = {SYMM_ALGO_AUTO, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT,
                               SYMM_ALGO_LL, SYMM_ALGO_LL128};
  symm_result_t res = SYMM_SUCCESS;
  for (size_t k = 0; k < sizeof algos / sizeof algos[0] && res == SYMM_SUCCESS; k++) {
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, algos[k]));
    res = symm_all_reduce(comm, send, recv, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  }
  ASSERT_OK(res);
  ASSERT_OK(symm_reduce_scatter(comm, send, recv, per, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_all_gather(comm, send, recv, per, SYMM_DTYPE_F32, NULL));
  ASSERT_OK(symm_broadcast(comm, send, recv, n, SYMM_DTYPE_F32, 0, NULL));
  ASSERT_OK(symm_all_to_all(comm, send, recv, per, SYMM_DTYPE_F32, NULL));
  ASSERT_MSG(symm_comm_scratch_current(comm) == scratch,
             "a collective grew the scratch reserved for %zu bytes", B);
  /* A larger buffer needs more. */
  size_t more = 0;
  ASSERT_OK(symm_comm_scratch_bytes(comm, 2 * B, &more));
  ASSERT_MSG(more > need, "%zu bytes for twice the buffer, %zu for once", more, need);
  ASSERT_RES(symm_comm_scratch_bytes(comm, SIZE_MAX / 2, &more), SYMM_ERR_INVALID_ARG);
  fake_user_plain_free(comm, send);
  fake_user_plain_free(comm, recv);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_scratch_query) {
  /* 3 ranks (and GPUs): there one-shot needs more than two-shot. */
  setenv("FAKECUDA_DEVICES", "3", 1);
  int r = run_job(3, scratch_query_rank, NULL);
  unsetenv("FAKECUDA_DEVICES");
  ASSERT_EQ(r, 0);
  return 0;
}

/* ------------------------------------------------------- all-to-all-v */

/* The signature of the last launch, which must be all-to-all-v's. */
static uint32_t a2av_sig(void) { return fake_a2av_params().sig; }

/* A refused call still meets the peers: one block of the all-gather
 * kernel with the refused signature (gpu_abstain). */
static void expect_abstain(const char *what) {
  fakecuda_launch_t l;
  symm_coll_params_t p;
  ASSERT_MSG(last_launch(&l) && strcmp(l.name, "symm_coll_all_gather") == 0 && l.grid == 1,
             "%s: launched %s, %u blocks", what, l.name, l.grid);
  memcpy(&p, l.params, sizeof p);
  ASSERT_MSG(p.sig == SYMM_COLL_SIG_REFUSED, "%s: signature %x", what, p.sig);
}

/* The launches of every form: parameters as given, signatures that differ
 * by mode, n_experts and major_align (0 and 1 alike) but not by rank,
 * rank-independent grids, the vector and ordered flags. */
static int a2av_launch_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  if (comm_with_board(rank, (1 << 20) / 8, &comm, &buf, &board)) return 1;
  if (fake_a2av_launches(comm, buf, board)) return 1;
  char *base = symm_tensor_data(buf);
  int64_t *in = (int64_t *)base, *out = in + 512;
  char *send = base + 65536, *recv = base + 524288;
  const size_t sr = 64 + (size_t)rank, rr = 128;
  const symm_dtype_t f32 = SYMM_DTYPE_F32;
  /* 2-D, major_align 0 and 1 are the same call; 16 and 3 experts are not. */
  uint32_t sig[6];
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, sr, recv, rr, 4, f32, in, out, 2, 0, NULL));
  symm_coll_params_t p = fake_a2av_params();
  fake_a2av_expect_dev(&p, SYMM_V_DEV_2D, send, sr, recv, rr, 16, in, out, 2, 1);
  sig[0] = p.sig;
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, sr, recv, rr, 4, f32, in, out, 2, 1, NULL));
  sig[1] = a2av_sig();
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, sr, recv, rr, 4, f32, in, out, 2, 16, NULL));
  p = fake_a2av_params();
  fake_a2av_expect_dev(&p, SYMM_V_DEV_2D, send, sr, recv, rr, 16, in, out, 2, 16);
  sig[2] = p.sig;
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, sr, recv, rr, 4, f32, in, out, 3, 16, NULL));
  sig[3] = a2av_sig();
  ASSERT_OK(symm_all_to_all_vdev_2d_combine(comm, send, sr, recv, rr, 4, f32, in, out, 2, NULL));
  p = fake_a2av_params();
  fake_a2av_expect_dev(&p, SYMM_V_DEV_2D_COMBINE, send, sr, recv, rr, 16, in, out, 2, 1);
  sig[4] = p.sig;
  ASSERT_OK(symm_all_to_all_vdev(comm, send, sr, recv, rr, 4, f32, in, out, NULL));
  sig[5] = a2av_sig();
  ASSERT_MSG(sig[0] == sig[1], "major_align 0 and 1 differ");
  for (int i = 1; i < 6; i++)
    for (int j = i + 1; j < 6; j++)
      ASSERT_MSG(sig[i] != sig[j], "calls %d and %d have the same signature %x", i, j, sig[i]);
  for (int i = 0; i < 6; i++)
    ASSERT_MSG(same_on_all_ranks(comm, board, sig[i]), "signature %d differs by rank", i);
  /* Rows of 6 bytes: no vectors; in place and splits in recv: ordered. */
  ASSERT_OK(symm_all_to_all_vdev(comm, send, sr, recv, rr, 3, SYMM_DTYPE_BF16, in, out, NULL));
  p = fake_a2av_params();
  ASSERT_MSG(p.vec == 0 && p.v.row_bytes == 6 && p.v.ordered == 0, "vec %d ordered %d", p.vec,
             p.v.ordered);
  ASSERT_OK(symm_all_to_all_vdev(comm, send, sr, send, rr, 4, f32, in, out, NULL));
  p = fake_a2av_params();
  ASSERT_MSG(p.vec == 1 && p.v.ordered == 1, "in place: vec %d ordered %d", p.vec, p.v.ordered);
  ASSERT_OK(symm_all_to_all_vdev(comm, send, sr, recv, rr, 4, f32, (int64_t *)recv, out, NULL));
  ASSERT_MSG(fake_a2av_params().v.ordered == 1, "in_splits inside recv: not ordered");
  /* The grid: one block per channel up to 96 (gpu_coll_bw_blocks); with
   * 2048 experts a rank (4096 chunks) the tables and plans of 4 MiB hold
   * 15 blocks. */
  fakecuda_launch_t l;
  ASSERT_OK(symm_all_to_all_vdev(comm, send, sr, recv, rr, 4, f32, in, out, NULL));
  ASSERT_MSG(last_launch(&l) && l.grid == 96u && (unsigned)fake_a2av_params().channels >= 96u,
             "vdev at 2 ranks: %u blocks", l.grid);
  int64_t *big_in = (int64_t *)(base + 131072), *big_out = (int64_t *)(base + 196608);
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, 0, recv, 0, 1, SYMM_DTYPE_U8, big_in, big_out,
                                    2048, 1, NULL));
  p = fake_a2av_params();
  ASSERT_MSG(last_launch(&l) && l.grid == 15u && p.v.data_off <= SYMM_COLL_V_BLOCK_AREA,
             "4096 chunks: %u blocks, data at %llu", l.grid, (unsigned long long)p.v.data_off);
  done_with_comm(comm, buf, board);
  return 0;
}

TEST_IMPL(native_fake_a2av_launch) {
  ASSERT_JOB(2, a2av_launch_rank, NULL);
  return 0;
}

/* What the engine refuses before launching (each rank still meets its
 * peers), and a send buffer that the scratch cannot stage: refused on that
 * rank and, through the kernel, on every rank; symm_comm_scratch_bytes
 * covers it. */
static int a2av_refused_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  setenv("SYMM_SCRATCH_BYTES", "1048576", 1); /* 1 MiB of staging by default */
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  if (comm_with_board(rank, (8 << 20) / 8, &comm, &buf, &board)) return 1;
  char *base = symm_tensor_data(buf);
  int64_t *in = (int64_t *)base, *out = in + 512;
  char *send = base + 65536, *recv = base + (4 << 20);
  const symm_dtype_t u8 = SYMM_DTYPE_U8;
  ASSERT_RES(symm_all_to_all_vdev_2d(comm, send, 16, recv, 16, 1, u8, in, out, 2049, 1, NULL),
             SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "4098 chunks");
  expect_abstain("4098 chunks");
  ASSERT_RES(symm_all_to_all_vdev_2d(comm, send, 16, recv, 16, 1, u8, in, out, 2,
                                     (size_t)1 << 33, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "major_align");
  expect_abstain("major_align");
  ASSERT_RES(symm_all_to_all_vdev(comm, send, 16, recv, 16, 1, u8, in, (int64_t *)(recv + 8),
                                  NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "out_splits_offsets overlaps recvbuf");
  expect_abstain("splits in recv");
  /* Rank 1 sends 2 MiB, more than the 1 MiB of staging: it fails at once,
   * and its kernel (launched all the same) tells the peers. */
  const size_t rows = rank == 1 ? (size_t)2 << 20 : 1024;
  symm_result_t r = symm_all_to_all_vdev(comm, send, rows, recv, 4096, 1, u8, in, out, NULL);
  ASSERT_MSG(r == (rank == 1 ? SYMM_ERR_STATE : SYMM_SUCCESS), "rank %d: %s", rank,
             symm_strerror(r));
  if (rank == 1) ASSERT_STR_CONTAINS(symm_last_error(), "symm_comm_reserve_scratch");
  symm_coll_params_t p = fake_a2av_params();
  ASSERT_MSG(p.v.refused == (rank == 1 ? SYMM_COLL_WHY_SCRATCH : 0), "refused %d", p.v.refused);
  ASSERT_MSG(same_on_all_ranks(comm, board, p.sig), "signature differs");
  /* Reserved as symm_comm_scratch_bytes says for 2 MiB buffers: runs. */
  size_t need = 0;
  ASSERT_OK(symm_comm_scratch_bytes(comm, (size_t)2 << 20, &need));
  ASSERT_OK(symm_comm_reserve_scratch(comm, need));
  ASSERT_OK(symm_all_to_all_vdev(comm, send, rows, recv, 4096, 1, u8, in, out, NULL));
  ASSERT_MSG(fake_a2av_params().v.refused == 0, "refused after reserving %zu bytes", need);
  done_with_comm(comm, buf, board);
  return 0;
}

TEST_IMPL(native_fake_a2av_refused) {
  ASSERT_JOB(2, a2av_refused_rank, NULL);
  return 0;
}

/* Records an all-to-all-v error as the kernel would and expects `code`
 * and `want` in the message of symm_comm_check_async_error. */
static void a2av_expect_message(symm_comm_t *comm, volatile symm_coll_error_t *err,
                                const symm_coll_error_t *e, const char *want) {
  err->peer = e->peer;
  err->kind = SYMM_COLL_KERNEL_ALL_TO_ALL_V;
  err->epoch = 3;
  err->why = e->why;
  err->other = e->other;
  err->mode = e->mode;
  err->got = e->got;
  err->limit = e->limit;
  err->code = e->code;
  ASSERT_RES(symm_comm_check_async_error(comm), (symm_result_t)e->code);
  ASSERT_STR_CONTAINS(symm_last_error(), "all_to_all_v kernel");
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  ASSERT_STR_CONTAINS(symm_last_error(), "no rank wrote anything");
  ASSERT_MSG(err->code == 0 && err->why == 0 && err->got == 0, "record not cleared");
}

/* The kernel's refusals as symm_comm_check_async_error words them. */
static int a2av_messages_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  symm_tensor_t *buf = NULL, *board = NULL;
  if (comm_with_board(rank, 8192, &comm, &buf, &board)) return 1;
  int64_t *in = symm_tensor_data(buf);
  ASSERT_OK(symm_all_to_all_vdev(comm, in + 1024, 8, in + 4096, 8, 1, SYMM_DTYPE_I64, in, in + 64,
                                 NULL));
  volatile symm_coll_error_t *err = (volatile symm_coll_error_t *)(uintptr_t)fake_a2av_params().err;
  const uint32_t inval = SYMM_ERR_INVALID_ARG;
  const struct { symm_coll_error_t e; const char *want; } cases[] = {
      {{inval, 2, 0, 0, 0, SYMM_COLL_WHY_RECV_ROWS, 1, SYMM_V_DEV, 70, 64},
       "rank 2 got 70 rows, 64 fit recv_rows (from rank 1 on"},
      {{inval, 1, 0, 0, 0, SYMM_COLL_WHY_SEND_ROWS, 0, SYMM_V_DEV_2D, 70, 64},
       "rank 1's splits exceed its send_rows: they need 70 rows, 64 fit"},
      {{SYMM_ERR_MISMATCH, 1, 0, 0, 0, SYMM_COLL_WHY_COUNT, 0, SYMM_V_HOST, 5, 4},
       "rank 1 sent 5 elements to rank 0, rank 0's recv_counts says 4"},
      {{inval, 0, 0, 0, 0, SYMM_COLL_WHY_NEG_COUNT, 0, SYMM_V_DEV, 3, (uint64_t)-2},
       "rank 0's in_splits[3] is -2, negative"},
      {{inval, 1, 0, 0, 0, SYMM_COLL_WHY_NEG_OFFSET, 0, SYMM_V_DEV_2D_COMBINE, 5, (uint64_t)-1},
       "rank 1's in_splits_offsets[1][5] is -1"},
      {{inval, 1, 0, 0, 0, SYMM_COLL_WHY_SCRATCH, 0, SYMM_V_DEV, 5000, 4096},
       "rank 1 stages 5000 bytes, its collective scratch holds 4096"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    a2av_expect_message(comm, err, &cases[k].e, cases[k].want);
  ASSERT_OK(symm_comm_check_async_error(comm));
  done_with_comm(comm, buf, board);
  return 0;
}

TEST_IMPL(native_fake_a2av_messages) {
  ASSERT_JOB(2, a2av_messages_rank, NULL);
  return 0;
}

/* GPU collectives run at most SYMM_COLL_MAX_WORLD ranks: all-to-all-v on
 * 33 refuses on every rank, naming the limit. */
static int a2av_world_rank(int rank, int size, void *arg) {
  (void)rank, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *buf = alloc_u64(comm, 4096);
  ASSERT_MSG(buf, "alloc");
  int64_t *in = symm_tensor_data(buf);
  ASSERT_MSG(size > SYMM_COLL_MAX_WORLD, "%d ranks", size);
  ASSERT_RES(symm_all_to_all_vdev(comm, in + 1024, 8, in + 2048, 8, 1, SYMM_DTYPE_I64, in,
                                  in + 128, NULL),
             SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "32");
  symm_tensor_free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_a2av_world_33) {
  setenv("SYMM_ALLOW_SHARED_DEVICE", "1", 1);
  ASSERT_JOB(33, a2av_world_rank, NULL);
  return 0;
}

/* ---------------------------------------------- registered memory */

/* A VMM allocation of the user's: created with the communicator's handle
 * types, mapped read-write here.  *va, *h for the release. */
static void *user_vmm(symm_comm_t *comm, size_t bytes, ncu_mem_handle *h, ncu_deviceptr *va) {
  native_state_t *st = state_of(comm);
  ncu_alloc_prop prop = native_alloc_prop(st->ordinal, st->handle_types);
  ncu_context saved;
  if (symm_gpu_enter(st->gpu, &saved) != SYMM_SUCCESS) return NULL;
  bool ok = st->drv->cuMemCreate(h, bytes, &prop, 0) == NCU_SUCCESS &&
            st->drv->cuMemAddressReserve(va, bytes, st->gran, 0, 0) == NCU_SUCCESS &&
            st->drv->cuMemMap(*va, bytes, 0, *h, 0) == NCU_SUCCESS &&
            native_grant_access(st, *va, bytes, NULL, 1, bytes) == SYMM_SUCCESS;
  symm_gpu_leave(st->gpu, saved);
  return ok ? (void *)(uintptr_t)*va : NULL;
}

static void user_vmm_free(symm_comm_t *comm, size_t bytes, ncu_mem_handle h, ncu_deviceptr va) {
  native_state_t *st = state_of(comm);
  ncu_context saved;
  if (symm_gpu_enter(st->gpu, &saved) != SYMM_SUCCESS) return;
  st->drv->cuMemUnmap(va, bytes);
  st->drv->cuMemAddressFree(va, bytes);
  st->drv->cuMemRelease(h);
  symm_gpu_leave(st->gpu, saved);
}

/* The refusals symm_validate gives, on every rank alike: cuMemAlloc
 * memory (not VMM) and a pointer off the granularity. */
static void register_refusals(symm_comm_t *comm, void *good, void *plain) {
  fake_user_refused(comm, 0, plain, good, 1024, "is not VMM memory");
  fake_user_refused(comm, 1, (char *)good + 256, good, 1024, "misaligned to the granularity");
}

static int register_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const size_t bytes = state_of(comm)->gran, n = bytes / 8 / 2;
  ncu_mem_handle h;
  ncu_deviceptr va;
  uint64_t *mine = user_vmm(comm, bytes, &h, &va);
  void *plain = fake_user_plain(comm, bytes);
  ASSERT_MSG(mine && plain, "the user's memory");
  register_refusals(comm, mine, plain);
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = mine;
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_register(comm, &m, sizes, 1, SYMM_DTYPE_U64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_validate(comm, mine, n * 8));
  symm_view_t dst;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const int writer = (rank + size - 1) % size;
  for (size_t i = 0; i < n; i += 97) ASSERT_EQ(mine[i], pattern(writer, i));
  symm_view_t cv;
  ASSERT_RES(symm_tensor_contiguous_view(t, &cv), SYMM_ERR_UNSUPPORTED);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  for (size_t i = 0; i < n; i += 97) ASSERT_EQ(mine[i], pattern(writer, i));
  /* The pad tensor went with it (pooled at most): no pad-heap slot is
   * left in use once the pool is trimmed. */
  ASSERT_OK(symm_comm_pool_trim(comm, NULL));
  native_heap_info_t heap;
  ASSERT_OK(native_heap_info(comm, &heap));
  ASSERT_MSG(heap.slots_used == 0, "pad heap after the free: %ld slots used", heap.slots_used);
  user_vmm_free(comm, bytes, h, va);
  fake_user_plain_free(comm, plain);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(native_fake_register_user) {
  ASSERT_EQ(run_job(2, register_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------------------ main */

static const fake_test_t native_fake_tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name},
#include "list-native-fake.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  /* Every test uses the fake driver unless it says otherwise. */
  setenv("SYMM_CUDA_LIB", FAKECUDA_PATH, 1);
  return fake_tests_main(argc, argv, native_fake_tests, sizeof native_fake_tests / sizeof native_fake_tests[0]);
}
