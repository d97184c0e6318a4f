/*
 * The cuda backend on machines without a GPU: every test loads the fake
 * driver of fake_cuda.c (SYMM_CUDA_LIB), whose cuMemAlloc memory is a file
 * of /dev/shm that a CUDA IPC handle names, so the backend's real protocol
 * (handle made at alloc, carried in the exchange blob, opened and closed by
 * every peer) runs across processes, with no fd passed, and the CPU checks
 * the data.  `cuda-fake-tests NAME` runs one test; ctest runs each
 * (list-cuda-fake.h) in its own process.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cuda/cuda.h"
#include "symm_test_access.h"
#include "fake_a2av.h"
#include "fake_ce.h"
#include "fake_util.h"
#include "harness.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "list-cuda-fake.h"
#undef TEST_ENTRY

/* ------------------------------------------------------------- helpers */

static int run_cuda_job(int n, test_rank_fn fn, void *arg) {
  test_job_opts_t o = {.timeout_ms = 60000, .backend = "cuda", .store_timeout_ms = 15000,
                       .kill_rank = -1};
  return test_run_ranks_opts(n, fn, arg, &o);
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

/* The /dev/shm path the fake's IPC handle of t names (the fake's handle
 * layout: fake_cuda.c's fk_ipc_wire_t, the name 16 bytes in). */
static void ipc_path(const symm_tensor_t *t, char *out, size_t cap) {
  const cuda_alloc_t *a = symm_tensor_mem(t)->priv;
  snprintf(out, cap, "/dev/shm/%.47s", (const char *)a->ipc.reserved + 16);
}

/* Unix sockets of this job: the fd exchange's listeners are named
 * "symmem-<job>-<comm>-<rank>"; the cuda backend must make none. */
static int fd_exchange_sockets(const symm_comm_t *comm) {
  char name[160], line[512];
  snprintf(name, sizeof name, "symmem-%s-", symm_comm_job_id(comm));
  FILE *f = fopen("/proc/net/unix", "r");
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, name)) n++;
  if (f) fclose(f);
  return f ? n : -1;
}

/* Writes into the right neighbour through the remote view, then checks
 * what the left one wrote into this rank's data and, through the peer
 * pointers, every rank's data. */
static int exchange_ring(int rank, symm_comm_t *comm, symm_tensor_t *t, size_t n) {
  int size = symm_comm_size(comm);
  symm_view_t dst;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &dst));
  for (size_t i = 0; i < n; i++) ((uint64_t *)dst.data)[i] = pattern(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++) {
    int writer = (r + size - 1) % size;
    for (size_t i = 0; i < n; i += 997)
      ASSERT_MSG(((uint64_t *)ptrs[r])[i] == pattern(writer, i), "rank %d's element %zu", r, i);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  return 0;
}

/* ------------------------------------------------------------- probes */

TEST_IMPL(cuda_fake_probe_no_library) {
  setenv("SYMM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  return fake_probe_refused(SYMM_BACKEND_CUDA, "libcuda.so.1 not found (no NVIDIA driver)");
}

TEST_IMPL(cuda_fake_probe_no_device) {
  setenv("FAKECUDA_NO_DEVICE", "1", 1);
  return fake_probe_refused(SYMM_BACKEND_CUDA, "cuInit failed: CUDA_ERROR_NO_DEVICE");
}

TEST_IMPL(cuda_fake_probe_no_unified_addressing) {
  setenv("FAKECUDA_NO_UNIFIED", "1", 1);
  return fake_probe_refused(SYMM_BACKEND_CUDA, "supports CUDA IPC (it needs unified addressing");
}

/* A device that reports IPC support but cannot export (the fake's
 * cuIpcGetMemHandle refuses): init fails on every rank naming the call. */
static int no_ipc_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  symm_result_t r = symm_comm_init(NULL, &comm);
  ASSERT_MSG(r == SYMM_ERR_UNSUPPORTED, "%s (%s)", symm_strerror(r), symm_last_error());
  ASSERT_MSG(strstr(symm_last_error(), "cuIpcGetMemHandle failed: CUDA_ERROR_NOT_SUPPORTED"), "%s",
             symm_last_error());
  ASSERT_MSG(comm == NULL, "a communicator came back");
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.devallocs == 0 && s.contexts == 0 && s.streams == 0,
             "left behind: %ld blocks %ld contexts %ld streams", s.devallocs, s.contexts,
             s.streams);
  return 0;
}

TEST_IMPL(cuda_fake_init_no_ipc) {
  setenv("FAKECUDA_NO_IPC", "1", 1);
  ASSERT_EQ(run_cuda_job(2, no_ipc_rank, NULL), 0);
  return 0;
}

/* auto: native where VMM works, else cuda; never cuda where IPC cannot
 * be used at all. */
static int auto_rank(int rank, int size, void *arg) {
  (void)size;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const char *want = arg, *got = symm_backend_name(symm_comm_backend(comm));
  ASSERT_MSG(strcmp(got, want) == 0, "auto chose %s, want %s", got, want);
  symm_comm_destroy(comm);
  return 0;
}

static int run_auto(const char *want) {
  test_job_opts_t o = {.timeout_ms = 60000, .backend = "auto", .kill_rank = -1};
  return test_run_ranks_opts(2, auto_rank, (void *)want, &o);
}

TEST_IMPL(cuda_fake_auto_order) {
  ASSERT_EQ(run_auto("native"), 0);
  setenv("FAKECUDA_NO_VMM", "1", 1);
  ASSERT_EQ(run_auto("cuda"), 0);
  setenv("FAKECUDA_NO_UNIFIED", "1", 1);
  ASSERT_EQ(run_auto("host"), 0);
  return 0;
}

/* ---------------------------------------------------------- full path */

/* One cuMemAlloc per tensor, pad at 0 and data one page in, the driver's
 * size rounded to 2 MiB; no VMM object and no fd exchange; each peer opened
 * once, then kept by the pool. */
static int full_path_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_MSG(symm_comm_caps(comm)->takes_stream && symm_comm_caps(comm)->device_peer_array &&
                 !symm_comm_caps(comm)->contiguous_view,
             "caps");
  fakecuda_stats_t s0 = fake_stats();
  const size_t n = 3 * 1001;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc");
  const symm_mem_t *mem = symm_tensor_mem(t);
  const cuda_alloc_t *a = mem->priv;
  ASSERT_MSG(mem->pad_offset == 0 && mem->data_offset == 4096, "pad at %zu, data at %zu",
             mem->pad_offset, mem->data_offset);
  ASSERT_MSG(mem->alloc_bytes == symm_round_up(4096 + n * 8, 4096), "alloc_bytes %zu",
             mem->alloc_bytes);
  ASSERT_MSG(a->driver_bytes == (size_t)2 << 20, "driver bytes %zu", a->driver_bytes);
  const uint8_t *pad = (const uint8_t *)mem->base;
  for (size_t i = 0; i < SYMM_SIGNAL_PAD_MIN_BYTES; i++) ASSERT_MSG(pad[i] == 0, "pad byte %zu", i);
  char path[96];
  ipc_path(t, path, sizeof path);
  ASSERT_MSG(access(path, F_OK) == 0, "%s missing while the tensor lives", path);

  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_MSG(exchange_ring(rank, comm, t, n) == 0, "ring");
  /* Interior pointers of a peer's memory find the tensor, offset and all. */
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  int peer = (rank + 1) % size;
  symm_tensor_t *found;
  int frank;
  size_t off;
  ASSERT_OK(symm_tensor_lookup((char *)ptrs[peer] + 808, &found, &frank, &off));
  ASSERT_MSG(found == t && frank == peer && off == 808, "lookup: rank %d offset %zu", frank, off);
  void *const *dev = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs_device(t, &dev));
  ASSERT_MSG(memcmp(dev, ptrs, sizeof(void *) * (size_t)size) == 0, "device peer array differs");

  fakecuda_stats_t s1 = fake_stats();
  ASSERT_MSG(s1.ipc_opens - s0.ipc_opens == size - 1, "%ld opens, want %d",
             s1.ipc_opens - s0.ipc_opens, size - 1);
  ASSERT_MSG(s1.handles == 0 && s1.mappings == 0 && s1.reservations == 0, "VMM objects in use");
  ASSERT_MSG(fd_exchange_sockets(comm) == 0, "%d fd-exchange sockets", fd_exchange_sockets(comm));

  /* Freed into the pool and reused: no new handle, no new open. */
  symm_tensor_free(t);
  t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc again");
  ASSERT_OK(symm_tensor_rendezvous(t));
  fakecuda_stats_t s2 = fake_stats();
  ASSERT_MSG(s2.imports == s1.imports && s2.exports == s1.exports, "reuse opened or exported anew");
  ASSERT_MSG(exchange_ring(rank, comm, t, n) == 0, "ring after reuse");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  fakecuda_stats_t s3 = fake_stats();
  ASSERT_MSG(s3.ipc_opens == 0 && s3.devallocs == 0 && s3.ipc_names == 0 && s3.contexts == 0,
             "left behind: %ld opens %ld blocks %ld names %ld contexts", s3.ipc_opens, s3.devallocs,
             s3.ipc_names, s3.contexts);
  ASSERT_MSG(access(path, F_OK) != 0, "%s left in /dev/shm", path);
  return 0;
}

TEST_IMPL(cuda_fake_full_path_3) {
  ASSERT_EQ(run_cuda_job(3, full_path_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------- a peer in a PID namespace */

static int pidns_body(void *arg) {
  int rank = *(const int *)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  if (rank == 1) ASSERT_MSG(getpid() == 1, "pid %d, not 1 of a new namespace", (int)getpid());
  ASSERT_MSG(symm_comm_peer_pid(comm, 1 - rank) == 0, "the peer's pid looks watchable");
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_u64(comm, n);
  ASSERT_MSG(t, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_MSG(exchange_ring(rank, comm, t, n) == 0, "ring");
  ASSERT_MSG(fd_exchange_sockets(comm) == 0, "fd-exchange sockets");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.ipc_opens == 0 && s.devallocs == 0, "%ld opens %ld blocks left", s.ipc_opens,
             s.devallocs);
  return 0;
}

static int pidns_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  return rank == 1 ? test_run_in_pid_namespace(pidns_body, &rank) : pidns_body(&rank);
}

TEST_IMPL(cuda_fake_pid_namespace_peer) {
  if (test_pid_namespace_skip()) return TEST_SKIP;
  ASSERT_EQ(run_cuda_job(2, pidns_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------ failing opens */

/* Rank 1's driver refuses to open handles: its rendezvous names rank 0
 * and the driver's error, every rank fails together, and the communicator
 * works once the driver opens again; the opens that succeeded are kept for
 * the retry (never opened twice) and closed with the tensor. */
static int open_fails_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = alloc_u64(comm, 4096);
  ASSERT_MSG(t, "alloc");
  if (rank == 1) setenv("FAKECUDA_IPC_OPEN_FAILS", "1", 1);
  symm_result_t r = symm_tensor_rendezvous(t);
  ASSERT_MSG(r == SYMM_ERR_BACKEND, "%s (%s)", symm_strerror(r), symm_last_error());
  if (rank == 1) {
    ASSERT_MSG(strstr(symm_last_error(), "cuIpcOpenMemHandle of rank 0's allocation"), "%s",
               symm_last_error());
    ASSERT_MSG(strstr(symm_last_error(), "CUDA_ERROR_INVALID_HANDLE"), "%s", symm_last_error());
  } else {
    ASSERT_MSG(strstr(symm_last_error(), "rank 1"), "%s", symm_last_error());
  }
  ASSERT_MSG(!symm_tensor_is_rendezvoused(t), "rendezvoused after a failed open");
  if (rank == 1) ASSERT_MSG(fake_stats().ipc_opens == 0, "%ld opens", fake_stats().ipc_opens);
  unsetenv("FAKECUDA_IPC_OPEN_FAILS");
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_MSG(exchange_ring(rank, comm, t, 4096) == 0, "ring");
  ASSERT_MSG(fake_stats().ipc_opens == size - 1, "%ld opens", fake_stats().ipc_opens);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  ASSERT_MSG(fake_stats().ipc_opens == 0, "%ld opens after destroy", fake_stats().ipc_opens);
  return 0;
}

TEST_IMPL(cuda_fake_open_fails) {
  ASSERT_EQ(run_cuda_job(3, open_fails_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------ handles closed */

/* Without the pool, a free closes the peers' opens of the tensor at once
 * and takes its name out of /dev/shm; destroy closes the rest. */
static int closed_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  fakecuda_stats_t s0 = fake_stats();
  symm_tensor_t *a = alloc_u64(comm, 1000), *b = alloc_u64(comm, 1 << 20);
  ASSERT_MSG(a && b, "alloc");
  ASSERT_OK(symm_tensor_rendezvous(a));
  ASSERT_OK(symm_tensor_rendezvous(b));
  ASSERT_MSG(fake_stats().ipc_opens - s0.ipc_opens == 2 * (size - 1), "opens after rendezvous");
  char path[96];
  ipc_path(a, path, sizeof path);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(a);
  fakecuda_stats_t s1 = fake_stats();
  ASSERT_MSG(s1.ipc_opens - s0.ipc_opens == size - 1, "%ld opens after one free, want %d",
             s1.ipc_opens - s0.ipc_opens, size - 1);
  ASSERT_MSG(access(path, F_OK) != 0, "%s still in /dev/shm after free", path);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm); /* b still live */
  fakecuda_stats_t s2 = fake_stats();
  ASSERT_MSG(s2.ipc_opens == 0 && s2.devallocs == 0 && s2.ipc_names == 0,
             "left behind: %ld opens %ld blocks %ld names", s2.ipc_opens, s2.devallocs,
             s2.ipc_names);
  return 0;
}

TEST_IMPL(cuda_fake_handles_closed) {
  setenv("SYMM_POOL_BYTES", "0", 1);
  ASSERT_EQ(run_cuda_job(3, closed_rank, NULL), 0);
  return 0;
}

/* ---------------------------------------------- a killed owner's names */

static char swept_file[64];

/* Rank 1 makes a tensor, says where its IPC name is, and is killed. */
static int killed_owner_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  if (rank == 1) {
    symm_tensor_t *t = alloc_u64(comm, 512);
    ASSERT_MSG(t, "alloc");
    char path[96];
    ipc_path(t, path, sizeof path);
    FILE *f = fopen(swept_file, "w");
    ASSERT_MSG(f && fputs(path, f) >= 0 && fclose(f) == 0, "writing %s", swept_file);
    test_rank_ready();
    for (;;) pause();
  }
  symm_result_t r = symm_comm_barrier(comm);
  ASSERT_MSG(r == SYMM_ERR_PEER_LOST || r == SYMM_ERR_TIMEOUT, "%s", symm_strerror(r));
  symm_comm_destroy(comm);
  return 0;
}

/* The name of an owner that died without freeing goes when the next
 * process starts the fake driver. */
TEST_IMPL(cuda_fake_killed_owner_swept) {
  snprintf(swept_file, sizeof swept_file, "/tmp/symm-cuda-swept-%d", (int)getpid());
  int status[2];
  test_job_opts_t o = {.timeout_ms = 60000, .exit_status = status, .backend = "cuda",
                       .store_timeout_ms = 20000, .kill_rank = 1, .kill_after_ms = 100};
  ASSERT_EQ(test_run_ranks_opts(2, killed_owner_rank, NULL, &o), 1);
  ASSERT(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  char path[96] = "";
  FILE *f = fopen(swept_file, "r");
  ASSERT(f != NULL);
  ASSERT(fgets(path, sizeof path, f) != NULL);
  fclose(f);
  unlink(swept_file);
  ASSERT_STR_CONTAINS(path, "/dev/shm/fakecuda-ipc-");
  /* Another test's process may have swept it already (a live owner's name
   * never goes); if not, this process's first cuInit does. */
  char why[256] = "";
  ASSERT(symm_cu_driver_init(why, sizeof why) != NULL);
  ASSERT(access(path, F_OK) != 0);
  return 0;
}

/* ------------------------------------------------------------ describe */

static void describe_into(char *buf, size_t cap) {
  FILE *f = fmemopen(buf, cap, "w");
  ASSERT(f != NULL);
  ASSERT_OK(symm_backend_describe(SYMM_BACKEND_CUDA, f));
  fclose(f);
}

TEST_IMPL(cuda_fake_describe) {
  setenv("FAKECUDA_DEVICES", "2", 1);
  char out[4096] = "";
  describe_into(out, sizeof out);
  ASSERT_STR_CONTAINS(out, "CUDA driver API 12.8");
  ASSERT_STR_CONTAINS(out, "devices: 2");
  ASSERT_STR_CONTAINS(out, "device 1: Fake GPU 1, PCI 0000:11:00.0, cuda ipc supported");
  ASSERT_STR_CONTAINS(out, "device 1 ipc export: works");
  ASSERT_STR_CONTAINS(out, "rounded to 2048 KiB");
  setenv("FAKECUDA_NO_IPC", "1", 1);
  describe_into(out, sizeof out);
  ASSERT_STR_CONTAINS(out, "device 0 ipc export: fails: cuIpcGetMemHandle failed: "
                           "CUDA_ERROR_NOT_SUPPORTED");
  fakecuda_stats_t s = fake_stats();
  ASSERT_EQ(s.devallocs, 0);
  ASSERT_EQ(s.contexts, 0);
  return 0;
}


/* ---------------------------------------------- registered memory */

/* The user's own cuMemAlloc memory, registered at an offset inside the
 * allocation: peers open its IPC handle and reach the data; host memory
 * is refused on every rank; the free leaves the user's memory as it was. */
static int register_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_gpu_t *gpu = symm_gpu_of(comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  const size_t n = 4096, at = 512;
  ncu_context saved;
  ncu_deviceptr d = 0;
  ASSERT_OK(symm_gpu_enter(gpu, &saved));
  ASSERT_EQ(drv->cuMemAlloc(&d, (2u << 20)), NCU_SUCCESS);
  symm_gpu_leave(gpu, saved);
  uint64_t *mine = (uint64_t *)(uintptr_t)(d + at);
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  /* Host memory on rank 1: every rank refuses. */
  uint64_t *host = calloc(n, sizeof *host);
  m.ptr = rank == 1 ? (void *)host : (void *)mine;
  ASSERT_RES(symm_tensor_register(comm, &m, sizes, 1, SYMM_DTYPE_U64, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "is not device memory");
  m.ptr = mine;
  ASSERT_OK(symm_tensor_register(comm, &m, sizes, 1, SYMM_DTYPE_U64, &t));
  ASSERT_MSG(symm_tensor_mem(t)->data_offset == at, "data at +%zu",
             symm_tensor_mem(t)->data_offset);
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_MSG(exchange_ring(rank, comm, t, n) == 0, "ring over registered memory");
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, (rank + 1) % size, &pad));
  ASSERT_MSG((char *)pad < (char *)mine || (char *)pad >= (char *)(mine + n) + (2u << 20),
             "the pad lies in the user's allocation");
  ASSERT_OK(symm_tensor_free(t));
  const int writer = (rank + size - 1) % size;
  for (size_t i = 0; i < n; i += 61) ASSERT_EQ(mine[i], pattern(writer, i));
  ASSERT_OK(symm_gpu_enter(gpu, &saved));
  ASSERT_EQ(drv->cuMemFree(d), NCU_SUCCESS);
  symm_gpu_leave(gpu, saved);
  free(host);
  symm_comm_destroy(comm);
  fakecuda_stats_t s = fake_stats();
  ASSERT_MSG(s.ipc_opens == 0 && s.devallocs == 0, "%ld opens %ld blocks left", s.ipc_opens,
             s.devallocs);
  return 0;
}

TEST_IMPL(cuda_fake_register_user) {
  ASSERT_EQ(run_cuda_job(3, register_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------------- all-to-all-v */

/* symm_all_to_all_v and symm_all_to_all_vdev launch the GPU engine's
 * all-to-all-v kernel with the call's parameters (fake_a2av.h). */
static int a2av_launch_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
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

TEST_IMPL(cuda_fake_a2av_launch) {
  ASSERT_EQ(run_cuda_job(3, a2av_launch_rank, NULL), 0);
  return 0;
}

/* Copy-engine collectives (fake_ce.h) on cuMemAlloc memory and IPC. */
TEST_IMPL(cuda_fake_ce_collectives) {
  ASSERT_EQ(run_cuda_job(3, fake_ce_rank, NULL), 0);
  return 0;
}

/* --------------------------------------------------------------- main */

static const fake_test_t cuda_fake_tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name},
#include "list-cuda-fake.h"
#undef TEST_ENTRY
};

int main(int argc, char **argv) {
  /* Every test uses the fake driver unless it says otherwise. */
  setenv("SYMM_CUDA_LIB", FAKECUDA_PATH, 1);
  setenv("FAKECUDA_DEVICES", "4", 0); /* a GPU per rank */
  return fake_tests_main(argc, argv, cuda_fake_tests,
                         sizeof cuda_fake_tests / sizeof cuda_fake_tests[0]);
}
