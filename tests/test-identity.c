/* A communicator's identity: which communicator of a store the ranks meet
 * in (communicators made at once from threads, a process in two groups on
 * different stores), and the settings every rank must share, compared at
 * init.  Real processes, threads and stores. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "symm_peer_watch.h"

/* ---- communicators made at once from threads: each thread of each rank
 * ---- makes its own on its own store, under its own job id, all at the
 * ---- same time; they must meet their own peers, whatever order the
 * ---- threads of each process get there in. */
enum { THREADS = 4 };

typedef struct {
  char addr[THREADS][64];
  char token[THREADS][40];
} thread_stores_t;

typedef struct {
  const thread_stores_t *stores;
  int rank, size, t;
  pthread_barrier_t *start;
  symm_result_t res;
  char why[512];
} thread_arg_t;

static void *thread_comm(void *p) {
  thread_arg_t *a = p;
  char job[32];
  snprintf(job, sizeof job, "thread-job-%d", a->t);
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.rank = a->rank;
  cfg.world_size = a->size;
  cfg.store_addr = a->stores->addr[a->t];
  cfg.token = a->stores->token[a->t];
  cfg.job_id = job;
  cfg.store_server = 0;
  cfg.timeout_ms = 10000;
  symm_comm_t *comm = NULL;
  pthread_barrier_wait(a->start);
  a->res = symm_comm_init(&cfg, &comm);
  if (a->res == SYMM_SUCCESS) a->res = symm_comm_barrier(comm);
  if (a->res != SYMM_SUCCESS) snprintf(a->why, sizeof a->why, "%s", symm_last_error());
  symm_comm_destroy(comm);
  return NULL;
}

static int threads_rank(int rank, int size, void *arg) {
  pthread_t th[THREADS];
  thread_arg_t a[THREADS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  /* Started in reverse order on one rank, so that the threads reach init in
   * different orders on the two ranks. */
  for (int i = 0; i < THREADS; i++) {
    int t = rank % 2 ? THREADS - 1 - i : i;
    a[t] = (thread_arg_t){.stores = arg, .rank = rank, .size = size, .t = t, .start = &start};
    ASSERT_EQ(pthread_create(&th[t], NULL, thread_comm, &a[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);
  for (int t = 0; t < THREADS; t++)
    if (a[t].res != SYMM_SUCCESS)
      TEST_FAIL_("rank %d thread %d: %s (%s)", rank, t, symm_strerror(a[t].res), a[t].why);
  return 0;
}

TEST_IMPL(identity_threads_own_stores) {
  /* Several rounds, each on fresh stores (a store keeps a job's keys): the
   * threads' order at init varies from one to the next. */
  for (int round = 0; round < 3; round++) {
    thread_stores_t st;
    test_store_proc_t srv[THREADS];
    for (int t = 0; t < THREADS; t++) {
      snprintf(st.token[t], sizeof st.token[t], "thread-token-%d", t);
      test_store_proc_start(st.token[t], &srv[t]);
      snprintf(st.addr[t], sizeof st.addr[t], "127.0.0.1:%d", srv[t].port);
    }
    ASSERT_EQ(test_run_ranks(2, threads_rank, &st), 0);
    for (int t = 0; t < THREADS; t++) test_store_proc_stop(&srv[t]);
  }
  return 0;
}

/* ---- a process in two groups on different stores: process 0 makes a
 * ---- communicator with process 1 on store A, then, keeping it, one with
 * ---- process 2 on store B (its second communicator, process 2's first). */
typedef struct {
  char addr[2][64];
  char token[2][40];
} two_stores_t;

static symm_comm_t *group_comm(const two_stores_t *s, int g, int rank) {
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.rank = rank;
  cfg.world_size = 2;
  cfg.store_addr = s->addr[g];
  cfg.token = s->token[g];
  cfg.store_server = 0;
  cfg.timeout_ms = 10000;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &comm));
  return comm;
}

static int two_groups_rank(int rank, int size, void *arg) {
  (void)size;
  const two_stores_t *s = arg;
  if (rank == 0) {
    symm_comm_t *a = group_comm(s, 0, 0);
    ASSERT_OK(symm_comm_barrier(a));
    symm_comm_t *b = group_comm(s, 1, 0);
    ASSERT_OK(symm_comm_barrier(b));
    ASSERT_OK(symm_comm_barrier(a));
    symm_comm_destroy(b);
    symm_comm_destroy(a);
  } else {
    symm_comm_t *c = group_comm(s, rank - 1, 1);
    ASSERT_OK(symm_comm_barrier(c));
    if (rank == 1) ASSERT_OK(symm_comm_barrier(c));
    symm_comm_destroy(c);
  }
  return 0;
}

TEST_IMPL(identity_two_groups_two_stores) {
  two_stores_t st;
  test_store_proc_t srv[2];
  for (int g = 0; g < 2; g++) {
    snprintf(st.token[g], sizeof st.token[g], "group-token-%d", g);
    test_store_proc_start(st.token[g], &srv[g]);
    snprintf(st.addr[g], sizeof st.addr[g], "127.0.0.1:%d", srv[g].port);
  }
  ASSERT_EQ(test_run_ranks(3, two_groups_rank, &st), 0);
  for (int g = 0; g < 2; g++) test_store_proc_stop(&srv[g]);
  return 0;
}

/* ---- settings that must agree, differing between ranks: every rank
 * ---- returns SYMM_ERR_MISMATCH from init, naming the setting and both
 * ---- values, long before the timeout (20 s here). */
typedef struct {
  const char *name;      /* the variable rank `odd` sets otherwise */
  const char *value;
  int odd;
  const char *expect[3]; /* what every rank's message names */
} differ_arg_t;

static int differ_rank(int rank, int size, void *arg) {
  (void)size;
  const differ_arg_t *d = arg;
  if (rank == d->odd) setenv(d->name, d->value, 1);
  symm_comm_t *comm = NULL;
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &comm);
  uint64_t took = test_now_ms() - t0;
  printf("rank %d: %s after %llu ms: %s\n", rank, symm_strerror(res), (unsigned long long)took,
         symm_last_error());
  fflush(stdout);
  ASSERT_RES(res, SYMM_ERR_MISMATCH);
  for (int i = 0; i < 3 && d->expect[i]; i++) ASSERT_STR_CONTAINS(symm_last_error(), d->expect[i]);
  ASSERT_LT(took, 10000); /* half the timeout: nobody waited it out */
  return 0;
}

static void run_differ(const differ_arg_t *d, int ranks) {
  ASSERT_EQ(test_run_ranks_timed(ranks, differ_rank, (void *)d, 40000, 20000), 0);
}

TEST_IMPL(identity_settings_differ_bootstrap_shm) {
  differ_arg_t d = {.name = "SYMM_BOOTSTRAP_SHM", .value = "0", .odd = 1,
                    .expect = {"SYMM_BOOTSTRAP_SHM", "has 0", "has 1"}};
  run_differ(&d, 2);
  d.odd = 0;
  run_differ(&d, 3);
  return 0;
}

TEST_IMPL(identity_settings_differ_job_id) {
  differ_arg_t d = {.name = "SYMM_JOB_ID", .value = "another-job", .odd = 1,
                    .expect = {"SYMM_JOB_ID", "another-job", "rank 1"}};
  run_differ(&d, 2);
  d.odd = 2;
  d.expect[2] = "rank 2";
  run_differ(&d, 3);
  return 0;
}

TEST_IMPL(identity_settings_differ_world_size) {
  /* One rank counts a rank that does not exist, or one too few. */
  differ_arg_t d = {.name = "SYMM_WORLD_SIZE", .value = "3", .odd = 1,
                    .expect = {"SYMM_WORLD_SIZE", "has 2", "has 3"}};
  run_differ(&d, 2);
  d.odd = 0;
  run_differ(&d, 2);
  d.value = "2";
  d.odd = 0;
  d.expect[1] = "has 3";
  d.expect[2] = "has 2";
  run_differ(&d, 3);
  return 0;
}

/* ---- a dead rank whose pid is reused: in a PID namespace of its own the
 * ---- test kills rank 1, reaps it and makes a process with rank 1's pid
 * ---- (clone3's set_tid), then lets rank 0 into a barrier.  Rank 0 must
 * ---- see rank 1 lost (it watches a pidfd opened at init), not wait out
 * ---- its timeout for a process that only has rank 1's pid. */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

enum { REUSE_TIMEOUT_MS = 10000 };

typedef struct {
  char addr[64];
  const char *token;
  int ready[2], go[2], hold[2];
  bool pidfd; /* false: watch as where pidfd_open is missing */
} reuse_job_t;

static symm_comm_t *reuse_comm(const reuse_job_t *j, int rank) {
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.rank = rank;
  cfg.world_size = 2;
  cfg.store_addr = j->addr;
  cfg.token = j->token;
  cfg.store_server = 0;
  cfg.timeout_ms = REUSE_TIMEOUT_MS;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &comm));
  return comm;
}

/* A rank's process; rank 0 exits 0 when its barrier saw rank 1 lost. */
static void reuse_rank(reuse_job_t *j, int rank) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  symm_peer_watch_use_pidfd(j->pidfd);
  symm_comm_t *comm = reuse_comm(j, rank);
  ASSERT_OK(symm_comm_barrier(comm));
  char c = (char)rank;
  ASSERT_EQ(write(j->ready[1], &c, 1), 1);
  if (rank == 1) {
    for (;;) pause(); /* until killed */
  }
  ASSERT_EQ(read(j->go[0], &c, 1), 1);
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_barrier(comm);
  printf("rank 0: barrier %s after %llu ms: %s\n", symm_strerror(res),
         (unsigned long long)(test_now_ms() - t0), symm_last_error());
  fflush(stdout);
  ASSERT_RES(res, SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  symm_comm_destroy(comm);
  _exit(0);
}

static pid_t reuse_fork(reuse_job_t *j, int rank) {
  pid_t pid = test_fork();
  if (pid == 0) reuse_rank(j, rank);
  return pid;
}

/* A process with exactly pid `want` that waits until killed; -1 (errno
 * set) where the kernel does not let this process choose. */
static pid_t spawn_with_pid(pid_t want, int hold_fd) {
  struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size;
  } ca = {0};
  ca.exit_signal = SIGCHLD;
  ca.set_tid = (uint64_t)(uintptr_t)&want;
  ca.set_tid_size = 1;
  fflush(stdout);
  fflush(stderr);
  long pid = syscall(SYS_clone3, &ca, sizeof ca);
  if (pid == 0) {
    char c;
    while (read(hold_fd, &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  return (pid_t)pid;
}

/* Waits until a process started now gets a start time past `start`
 * (clock ticks of CLOCK_BOOTTIME, as /proc/<pid>/stat counts them). */
static void wait_past_tick(uint64_t start) {
  const long hz = sysconf(_SC_CLK_TCK);
  for (;;) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    const uint64_t ticks = (uint64_t)ts.tv_sec * (uint64_t)hz +
                           (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
    if (ticks > start) return;
    poll(NULL, 0, 1);
  }
}

/* pid 1 of the namespace: runs the store, the ranks and the reuse.
 * 0: passed, 77: cannot be done here (said why), else failed. */
static int reuse_init(bool pidfd) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
    printf("SKIP: cannot mount /proc for the new PID namespace: %s\n", strerror(errno));
    return 77;
  }
  reuse_job_t j = {.token = "pid-reuse-token", .pidfd = pidfd};
  test_store_proc_t srv;
  test_store_proc_start(j.token, &srv);
  snprintf(j.addr, sizeof j.addr, "127.0.0.1:%d", srv.port);
  ASSERT_EQ(pipe(j.ready), 0);
  ASSERT_EQ(pipe(j.go), 0);
  ASSERT_EQ(pipe(j.hold), 0);
  pid_t r0 = reuse_fork(&j, 0), r1 = reuse_fork(&j, 1);
  char c;
  for (int i = 0; i < 2; i++) ASSERT_EQ(read(j.ready[0], &c, 1), 1);
  /* Rank 1 dies and is reaped: its pid is free, and taken at once, by a
   * process started a clock tick later at least (start times count in
   * ticks: within one, only a pidfd tells them apart). */
  const uint64_t r1_start = symm_process_start_time(r1);
  ASSERT_NE(r1_start, 0);
  ASSERT_EQ(kill(r1, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(waitpid(r1, &st, 0), r1);
  wait_past_tick(r1_start);
  pid_t again = spawn_with_pid(r1, j.hold[0]);
  if (again < 0) {
    printf("SKIP: cannot create a process with pid %d (clone3 set_tid: %s)\n", (int)r1,
           strerror(errno));
    kill(r0, SIGKILL);
    test_store_proc_stop(&srv);
    return 77;
  }
  ASSERT_EQ(again, r1);
  printf("rank 1 (pid %d) killed and reaped; pid %d is another process now\n", (int)r1,
         (int)again);
  fflush(stdout);
  ASSERT_EQ(write(j.go[1], "g", 1), 1);
  ASSERT_EQ(waitpid(r0, &st, 0), r0);
  kill(again, SIGKILL);
  waitpid(again, NULL, 0);
  test_store_proc_stop(&srv);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_pid_reused(bool pidfd) {
  pid_t child = test_fork();
  if (child == 0) {
    /* As root, or as anyone where user namespaces are allowed. */
    if (!test_enter_user_namespace(CLONE_NEWPID | CLONE_NEWNS) &&
        unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
      printf("SKIP: cannot make a PID and mount namespace here: %s\n", strerror(errno));
      _exit(77);
    }
    fflush(stdout);
    pid_t init = fork();
    if (init < 0) _exit(99);
    if (init == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      _exit(reuse_init(pidfd));
    }
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) return TEST_SKIP;
  ASSERT_EQ(WEXITSTATUS(st), 0);
  return 0;
}

TEST_IMPL(identity_dead_rank_pid_reused) { return run_pid_reused(true); }

/* The same where pidfd_open is missing (valgrind 3.19): the start time
 * that rank 1 published tells its successor apart. */
TEST_IMPL(identity_dead_rank_pid_reused_no_pidfd) { return run_pid_reused(false); }

/* ---- the watch itself: a pid whose start time is not the one published
 * ---- (a live process unrelated to the rank that published it) is gone
 * ---- from the start; the right one is alive until it exits. */
/* A child that exits when hold[1] is closed everywhere. */
static pid_t blocked_child(const int hold[2]) {
  pid_t pid = test_fork();
  if (pid == 0) {
    close(hold[1]);
    char c;
    while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  return pid;
}

static void check_watch(bool pidfd) {
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  symm_peer_watch_use_pidfd(pidfd);
  pid_t other = blocked_child(hold), peer = blocked_child(hold);
  const uint64_t other_start = symm_process_start_time(other);
  const uint64_t peer_start = symm_process_start_time(peer);
  ASSERT_NE(other_start, 0);
  ASSERT_NE(peer_start, 0);
  /* As if a rank published other's pid with another start time. */
  ASSERT(symm_peer_watch_add(other, other_start + 1));
  ASSERT_EQ(kill(other, 0), 0);
  ASSERT_EQ(symm_peer_watch_gone(other), 1);
  ASSERT(symm_peer_watch_add(peer, peer_start));
  ASSERT_EQ(symm_peer_watch_gone(peer), 0);
  ASSERT_EQ(kill(peer, SIGKILL), 0);
  int st;
  ASSERT_EQ(waitpid(peer, &st, 0), peer);
  ASSERT_EQ(symm_peer_watch_gone(peer), 1);
  symm_peer_watch_remove(peer, peer_start);
  symm_peer_watch_remove(other, other_start + 1);
  ASSERT_EQ(symm_peer_watch_gone(other), -1); /* no longer watched */
  close(hold[1]);
  ASSERT_EQ(waitpid(other, &st, 0), other);
  close(hold[0]);
  symm_peer_watch_use_pidfd(true);
}

TEST_IMPL(identity_peer_watch_start_time) {
  if (symm_process_start_time(0) == 0) {
    printf("SKIP: /proc is not this PID namespace's: no start times to compare\n");
    return TEST_SKIP;
  }
  check_watch(true);
  check_watch(false);
  return 0;
}
