/* Resource limits answered with an error, never a signal or the OOM
 * killer: RLIMIT_FSIZE (ulimit -f) at allocation and at the bootstrap
 * segment, memory cgroups (v2 and v1, parsed from a tree made here and
 * enforced in a cgroup made for the test), and a rank that cannot grow the
 * collective scratch or export its memory failing every rank at once. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena_backend.h"
#include "backends/host/host.h" /* host_cgroup_room */
#include "harness.h"

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

static void set_fsize_limit(rlim_t bytes) {
  struct rlimit rl;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
  rl.rlim_cur = bytes;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

/* Back to the hard limit (a soft limit may always rise that far). */
static void lift_fsize_limit(void) {
  struct rlimit rl;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

/* ------------------------------------------------------------ ulimit -f */

/* ulimit -f 1024 (1 MiB): a tensor beyond it is NO_MEMORY naming the
 * limit, one within it works, and the rank is still alive to say so. */
static int fsize_alloc_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  set_fsize_limit(1 << 20);
  symm_comm_t *comm = init_comm();
  int64_t big = 4 << 20, small = 64 << 10;
  symm_tensor_t *t = NULL;
  ASSERT_RES(symm_tensor_alloc(comm, &big, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_NO_MEMORY);
  ASSERT_STR_CONTAINS(symm_last_error(), "RLIMIT_FSIZE");
  ASSERT_STR_CONTAINS(symm_last_error(), "ulimit -f");
  ASSERT_PTR_EQ(t, NULL);
  ASSERT_OK(symm_tensor_alloc(comm, &small, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  memset(symm_tensor_data(t), 7, (size_t)small);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(limits_fsize_alloc) {
  int status[2] = {0, 0};
  test_job_opts_t o = {.kill_rank = -1, .exit_status = status};
  int bad = test_run_ranks_opts(2, fsize_alloc_rank, NULL, &o);
  for (int r = 0; r < 2; r++)
    if (WIFSIGNALED(status[r]))
      printf("rank %d: killed by signal %d (SIGXFSZ is %d)\n", r, WTERMSIG(status[r]), SIGXFSZ);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* ulimit -f below the bootstrap's shared-memory segment (8 KiB; the
 * segment of 2 ranks is about 66 KiB): init stays with the store instead of
 * rank 0 dying as it sizes the segment. */
static int fsize_bootstrap_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  setenv("SYMM_BOOTSTRAP_SHM", "1", 1);
  set_fsize_limit(8 << 10);
  symm_comm_t *comm = init_comm();
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(limits_fsize_bootstrap) {
  int status[2] = {0, 0};
  test_job_opts_t o = {.kill_rank = -1, .exit_status = status};
  int bad = test_run_ranks_opts(2, fsize_bootstrap_rank, NULL, &o);
  for (int r = 0; r < 2; r++)
    if (WIFSIGNALED(status[r]))
      printf("rank %d: killed by signal %d (SIGXFSZ is %d)\n", r, WTERMSIG(status[r]), SIGXFSZ);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* ------------------------------------------- one rank fails, all return */

#define AGREED_TIMEOUT_MS 20000
#define AGREED_RANKS 3
#define AGREED_FAILING 1

/* The failing rank makes no further call until every peer has returned
 * from the failed one (a pipe made before the ranks fork), so that a peer
 * left waiting for it waits the timeout out instead of meeting its next
 * call. */
static int returned_pipe[2] = {-1, -1};

static void peers_returned(int rank) {
  if (rank != AGREED_FAILING) {
    ASSERT_EQ(write(returned_pipe[1], "r", 1), 1);
    return;
  }
  for (int n = 0; n < AGREED_RANKS - 1; n++) {
    char c;
    ASSERT_EQ(read(returned_pipe[0], &c, 1), 1);
  }
}

/* Every rank must be back well inside the timeout (a quarter of it: what
 * a rank waiting for a peer that skipped the round would never be). */
static void assert_prompt(uint64_t took_ms, int rank) {
  printf("rank %d: returned after %llu ms (timeout %d ms)\n", rank, (unsigned long long)took_ms,
         AGREED_TIMEOUT_MS);
  fflush(stdout);
  ASSERT_LT(took_ms, AGREED_TIMEOUT_MS / 4);
}

/* The first all-reduce on ordinary buffers grows the scratch (tens of
 * MiB); rank AGREED_FAILING cannot (ulimit -f 1 MiB).  It gets NO_MEMORY
 * naming the limit, its peers the same code naming it, all at once; the
 * communicator stays in step: a barrier, then with the limit lifted the
 * same all-reduce succeeds with the right sums. */
static int scratch_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  enum { COUNT = 1024 };
  float *send = malloc(COUNT * sizeof *send), *recv = malloc(COUNT * sizeof *recv);
  ASSERT(send && recv);
  for (int i = 0; i < COUNT; i++) send[i] = (float)(rank + 1);
  if (rank == AGREED_FAILING) set_fsize_limit(1 << 20);
  ASSERT_OK(symm_comm_barrier(comm));
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_all_reduce(comm, send, recv, COUNT, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  uint64_t took = test_now_ms() - t0;
  printf("rank %d: %s: %s\n", rank, symm_strerror(res), symm_last_error());
  peers_returned(rank);
  ASSERT_EQ(res, SYMM_ERR_NO_MEMORY);
  if (rank == AGREED_FAILING) {
    ASSERT_STR_CONTAINS(symm_last_error(), "RLIMIT_FSIZE");
  } else {
    char who[32];
    snprintf(who, sizeof who, "rank %d", AGREED_FAILING);
    ASSERT_STR_CONTAINS(symm_last_error(), who);
    ASSERT_STR_CONTAINS(symm_last_error(), "RLIMIT_FSIZE");
  }
  assert_prompt(took, rank);
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == AGREED_FAILING) lift_fsize_limit();
  ASSERT_OK(symm_all_reduce(comm, send, recv, COUNT, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  const float want = (float)(size * (size + 1) / 2);
  for (int i = 0; i < COUNT; i++)
    if (recv[i] != want) TEST_FAIL_("recv[%d] = %g, want %g", i, (double)recv[i], (double)want);
  free(send);
  free(recv);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(limits_scratch_growth_fails_on_one_rank) {
  ASSERT_EQ(pipe(returned_pipe), 0);
  test_job_opts_t o = {.kill_rank = -1, .store_timeout_ms = AGREED_TIMEOUT_MS};
  ASSERT_EQ(test_run_ranks_opts(AGREED_RANKS, scratch_rank, NULL, &o), 0);
  return 0;
}

/* The arena backend's export fails on rank AGREED_FAILING
 * (ARENA_EXPORT_FAIL): every rank's rendezvous returns at once, that rank
 * with the backend's error, its peers with its code naming it; the tensor
 * is not rendezvoused anywhere and the communicator stays in step. */
static int export_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  int64_t n = 4096;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_comm_barrier(comm));
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_tensor_rendezvous(t);
  uint64_t took = test_now_ms() - t0;
  printf("rank %d: %s: %s\n", rank, symm_strerror(res), symm_last_error());
  peers_returned(rank);
  ASSERT_EQ(res, SYMM_ERR_NO_MEMORY);
  if (rank == AGREED_FAILING) {
    ASSERT_STR_CONTAINS(symm_last_error(), "arena: export refused");
  } else {
    char who[32];
    snprintf(who, sizeof who, "rank %d", AGREED_FAILING);
    ASSERT_STR_CONTAINS(symm_last_error(), who);
  }
  ASSERT_EQ(symm_tensor_is_rendezvoused(t), 0);
  assert_prompt(took, rank);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(limits_export_fails_on_one_rank) {
  arena_backends_register();
  test_setenv_int("ARENA_EXPORT_FAIL", AGREED_FAILING);
  ASSERT_EQ(pipe(returned_pipe), 0);
  test_job_opts_t o = {.kill_rank = -1, .store_timeout_ms = AGREED_TIMEOUT_MS, .backend = "arena"};
  ASSERT_EQ(test_run_ranks_opts(AGREED_RANKS, export_rank, NULL, &o), 0);
  return 0;
}

/* -------------------------------------------------------- memory cgroups */

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) TEST_FAIL_("fopen %s: %s", path, strerror(errno));
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);
}

static void make_dirs(const char *base, const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", base, rel);
  for (char *p = path + strlen(base) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0700);
      *p = '/';
    }
  mkdir(path, 0700);
}

/* host_cgroup_room on trees made here: v2 with the tightest limit on a
 * parent and reclaimable cache counted, v1 under a mount of a sub-tree,
 * usage above the limit, and no limit at all. */
TEST_IMPL(limits_cgroup_room_parser) {
  char base[] = "/tmp/symm-cgroup-XXXXXX";
  ASSERT(mkdtemp(base));
  char mountinfo[600], cgroup[600], where[600], want[600];
  snprintf(mountinfo, sizeof mountinfo, "%s/mountinfo", base);
  snprintf(cgroup, sizeof cgroup, "%s/cgroup", base);

  /* v2 alone: /job/step limits 1 GiB, /job 1000 with 300 used and 50 of
   * inactive file cache: 750 left. */
  write_file(base, "mountinfo",
             "22 1 0:20 / /proc rw,nosuid - proc proc rw\n"
             "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  write_file(base, "cgroup", "0::/job/step\n");
  make_dirs(base, "sys/fs/cgroup/job/step");
  char dir[600];
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/job/step", base);
  write_file(dir, "memory.max", "1073741824\n");
  write_file(dir, "memory.current", "4096\n");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/job", base);
  write_file(dir, "memory.max", "1000\n");
  write_file(dir, "memory.current", "300\n");
  write_file(dir, "memory.stat", "anon 250\nfile 50\nactive_file 0\ninactive_file 50\n");
  where[0] = '\0';
  ASSERT_EQ(host_cgroup_room(mountinfo, cgroup, base, where, sizeof where), 750);
  snprintf(want, sizeof want, "%s/sys/fs/cgroup/job", base);
  ASSERT(strcmp(where, want) == 0);
  /* "max" on the parent: the child's limit rules. */
  write_file(dir, "memory.max", "max\n");
  ASSERT_EQ(host_cgroup_room(mountinfo, cgroup, base, where, sizeof where), 1073741824 - 4096);
  /* Usage above the limit (a limit lowered under it): nothing left but the
   * cache the kernel would reclaim. */
  write_file(dir, "memory.max", "200\n");
  ASSERT_EQ(host_cgroup_room(mountinfo, cgroup, base, where, sizeof where), 50);

  /* v1: the memory controller shares a hierarchy with cpu, mounted from
   * its /ctr sub-tree (the path in /proc/self/cgroup starts there); v2
   * mounted too, without a limit. */
  write_file(base, "mountinfo",
             "30 22 0:26 / /sys/fs/cgroup/unified rw shared:9 - cgroup2 cgroup2 rw\n"
             "31 22 0:27 /ctr /sys/fs/cgroup/memory rw shared:10 - cgroup cgroup rw,cpu,memory\n"
             "32 22 0:28 / /sys/fs/cgroup/pids rw shared:11 - cgroup cgroup rw,pids\n");
  write_file(base, "cgroup", "5:pids:/other\n4:cpu,memory:/ctr/pod/app\n0::/\n");
  make_dirs(base, "sys/fs/cgroup/memory/pod/app");
  make_dirs(base, "sys/fs/cgroup/pids/other");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/pids/other", base);
  write_file(dir, "memory.limit_in_bytes", "1\n"); /* not the memory hierarchy: ignored */
  write_file(dir, "memory.usage_in_bytes", "0\n");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory/pod/app", base);
  write_file(dir, "memory.limit_in_bytes", "9223372036854771712\n");
  write_file(dir, "memory.usage_in_bytes", "12345\n");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory/pod", base);
  write_file(dir, "memory.limit_in_bytes", "536870912\n");
  write_file(dir, "memory.usage_in_bytes", "1048576\n");
  write_file(dir, "memory.stat", "cache 0\ninactive_file 7\ntotal_inactive_file 4096\n");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory", base);
  write_file(dir, "memory.limit_in_bytes", "9223372036854771712\n");
  write_file(dir, "memory.usage_in_bytes", "99999999\n");
  ASSERT_EQ(host_cgroup_room(mountinfo, cgroup, base, where, sizeof where),
            536870912 - 1048576 + 4096);
  snprintf(want, sizeof want, "%s/sys/fs/cgroup/memory/pod", base);
  ASSERT(strcmp(where, want) == 0);

  /* No limit anywhere, and nothing readable. */
  write_file(dir, "memory.limit_in_bytes", "max\n");
  snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory/pod", base);
  write_file(dir, "memory.limit_in_bytes", "max\n");
  ASSERT_GT(host_cgroup_room(mountinfo, cgroup, base, NULL, 0), (uint64_t)1 << 62);
  snprintf(cgroup, sizeof cgroup, "%s/missing", base);
  ASSERT_EQ(host_cgroup_room(mountinfo, cgroup, base, NULL, 0), UINT64_MAX);

  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* A memory cgroup of this test's own, limited to `limit` bytes, in dir:
 * under the v2 hierarchy's root where that has the memory controller, else
 * under this process's cgroup in the v1 memory hierarchy.  false with why
 * where none can be made. */
static bool make_memory_cgroup(uint64_t limit, char *dir, size_t cap, char *why, size_t why_len) {
  if (geteuid() != 0) {
    snprintf(why, why_len, "making a cgroup needs root");
    return false;
  }
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char line[1024], v2[256] = "", v1[256] = "";
  while (f && fgets(line, sizeof line, f)) {
    char root[256], mount[256], type[32], source[64], super[256];
    const char *sep = strstr(line, " - ");
    if (!sep || sscanf(line, "%*s %*s %*s %255s %255s", root, mount) != 2 ||
        sscanf(sep + 3, "%31s %63s %255s", type, source, super) != 3 || strcmp(root, "/"))
      continue;
    if (strcmp(type, "cgroup2") == 0) snprintf(v2, sizeof v2, "%s", mount);
    if (strcmp(type, "cgroup") == 0 && strstr(super, "memory")) snprintf(v1, sizeof v1, "%s", mount);
  }
  if (f) fclose(f);
  char num[32], path[512];
  snprintf(num, sizeof num, "%llu\n", (unsigned long long)limit);
  if (v2[0]) {
    snprintf(path, sizeof path, "%s/cgroup.controllers", v2);
    f = fopen(path, "re");
    bool has = f && fgets(line, sizeof line, f) && strstr(line, "memory");
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/cgroup.subtree_control", v2);
    int fd = has ? open(path, O_WRONLY | O_CLOEXEC) : -1;
    bool on = fd >= 0 && write(fd, "+memory", 7) == 7;
    if (fd >= 0) close(fd);
    snprintf(dir, cap, "%s/symm-limits-%d", v2, (int)getpid());
    if (on && mkdir(dir, 0755) == 0) {
      snprintf(path, sizeof path, "%s/memory.max", dir);
      fd = open(path, O_WRONLY | O_CLOEXEC);
      bool set = fd >= 0 && write(fd, num, strlen(num)) == (ssize_t)strlen(num);
      if (fd >= 0) close(fd);
      snprintf(path, sizeof path, "%s/memory.swap.max", dir);
      if ((fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0) {
        if (write(fd, "0", 1) != 1) set = false;
        close(fd);
      }
      if (set) return true;
      rmdir(dir);
    }
  }
  if (v1[0]) {
    char own[256] = "";
    f = fopen("/proc/self/cgroup", "re");
    while (f && fgets(line, sizeof line, f)) {
      char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (!c2) continue;
      *c2 = '\0';
      if (!strstr(c1 + 1, "memory")) continue;
      c2[1 + strcspn(c2 + 1, "\n")] = '\0';
      snprintf(own, sizeof own, "%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
    }
    if (f) fclose(f);
    snprintf(dir, cap, "%s%s/symm-limits-%d", v1, own, (int)getpid());
    if (mkdir(dir, 0755) == 0) {
      snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
      int fd = open(path, O_WRONLY | O_CLOEXEC);
      bool set = fd >= 0 && write(fd, num, strlen(num)) == (ssize_t)strlen(num);
      if (fd >= 0) close(fd);
      if (set) return true;
      rmdir(dir);
    }
    snprintf(why, why_len, "cannot make a v1 memory cgroup %s: %s", dir, strerror(errno));
    return false;
  }
  snprintf(why, why_len, "no cgroup hierarchy with a usable memory controller (v2: %s, v1: %s)",
           v2[0] ? v2 : "none", v1[0] ? v1 : "none");
  return false;
}

#define CGROUP_LIMIT ((uint64_t)64 << 20)

/* In a 64 MiB memory cgroup (the machine has far more): a 128 MiB tensor
 * is NO_MEMORY naming the cgroup, not an OOM kill; 8 MiB fit and are
 * backed. */
static int cgroup_rank(int rank, int size, void *arg) {
  (void)size;
  const char *dir = arg;
  char path[600], pid[32];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, pid, strlen(pid)) != (ssize_t)strlen(pid))
    TEST_FAIL_("rank %d: joining %s: %s", rank, dir, strerror(errno));
  close(fd);
  symm_comm_t *comm = init_comm();
  int64_t big = (int64_t)(2 * CGROUP_LIMIT), small = 8 << 20;
  symm_tensor_t *t = NULL;
  symm_result_t res = symm_tensor_alloc(comm, &big, 1, SYMM_DTYPE_U8, &t);
  printf("rank %d: %lld bytes in a %llu-byte cgroup: %s: %s\n", rank, (long long)big,
         (unsigned long long)CGROUP_LIMIT, symm_strerror(res), symm_last_error());
  fflush(stdout);
  ASSERT_EQ(res, SYMM_ERR_NO_MEMORY);
  ASSERT_STR_CONTAINS(symm_last_error(), "cgroup");
  ASSERT_PTR_EQ(t, NULL);
  ASSERT_OK(symm_tensor_alloc(comm, &small, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  memset(symm_tensor_data(t), 1, (size_t)small);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(limits_cgroup_alloc) {
  char dir[512], why[600];
  if (!make_memory_cgroup(CGROUP_LIMIT, dir, sizeof dir, why, sizeof why)) {
    printf("SKIP: %s\n", why);
    return TEST_SKIP;
  }
  int status[2] = {0, 0};
  test_job_opts_t o = {.kill_rank = -1, .exit_status = status};
  int bad = test_run_ranks_opts(2, cgroup_rank, dir, &o);
  for (int r = 0; r < 2; r++)
    if (WIFSIGNALED(status[r])) printf("rank %d: killed by signal %d\n", r, WTERMSIG(status[r]));
  /* The ranks are reaped: the cgroup is empty and can go. */
  if (rmdir(dir) != 0) printf("rmdir %s: %s\n", dir, strerror(errno));
  ASSERT_EQ(bad, 0);
  return 0;
}
