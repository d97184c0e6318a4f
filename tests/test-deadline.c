/* Deadlines and hostile neighbours of the store (tests/list-deadline.h).
 *
 * Frozen peers: one rank is stopped with SIGSTOP (before its init, inside
 * its init once the store has its HELLO and first key, or in place of a
 * barrier) while the others run; every survivor's waiting call must return
 * SYMM_ERR_TIMEOUT within the header's bound, timeout + max(250 ms,
 * timeout / 10), plus DL_TOLERANCE_MS for scheduling, and name the frozen
 * rank.  Both with rank 0 serving the store and with the store in a
 * process of its own (as symmem-run serves it).
 *
 * Floods: a process holding 2000+ connections that never say HELLO, and
 * opening new ones all along, must not keep a job that has the token from
 * its init and a barrier within SYMM_TIMEOUT_MS.
 *
 * Jobs are forked by hand (not test_run_ranks): the tests choose who
 * serves the store, start ranks in a given order behind a gate (a pipe the
 * parent closes), and freeze one at an event seen through the store. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "harness.h"
#include "int_list.h"
#include "symm_test_access.h"

/* Scheduling on a loaded 2-core machine: 750 ms was seen exceeded (a
 * barrier's survivor back after 2777 ms at 1000 ms + 250 ms of slack, load
 * average 20).  Still tight enough for the old waits: a 5 s floor on HELLO
 * fails at 1000 ms, the serving rank's second timeout (its drain) at
 * 3000 ms. */
#define DL_TOLERANCE_MS 2000
#define DL_MAX_RANKS 4

static int dl_slack_ms(int timeout_ms) {
  return timeout_ms / 10 > 250 ? timeout_ms / 10 : 250;
}

/* ------------------------------------------------------------------ jobs */
typedef enum {
  ROLE_SURVIVOR,      /* init (and barrier when the job says so); reports */
  ROLE_FREEZE_SELF,   /* stops itself before init */
  ROLE_EARLY,         /* init at once, without the gate (the parent freezes it) */
  ROLE_STOP_IN_BARRIER /* init, then stops itself instead of the barrier */
} dl_role_t;

typedef struct {
  int n, timeout_ms, port;
  bool rank0_serves;
  bool barrier; /* survivors call a barrier after a successful init */
  char token[33], job[48], addr[64];
  pid_t store_pid;
  int store_ctl; /* write end: the store process stops at EOF */
  int gate[2];
  int report[2];
  pid_t pids[DL_MAX_RANKS];
} dl_job_t;

/* What a rank tells the parent: one write, below PIPE_BUF. */
typedef struct {
  int rank;
  int init_code, init_ms;
  int barrier_code, barrier_ms;
  int destroy_ms;
  char msg[1024];
} dl_report_t;

static void dl_random_hex(char *out, size_t bytes) {
  FILE *f = fopen("/dev/urandom", "r");
  unsigned char b[32];
  if (!f || bytes > sizeof b || fread(b, 1, bytes, f) != bytes) TEST_FAIL_("urandom");
  fclose(f);
  for (size_t i = 0; i < bytes; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

/* The store in a process of its own (symmem-run's setup: the same server
 * code in a launcher); forked before any thread exists here.  fd_limit > 0
 * lowers that process's RLIMIT_NOFILE (soft and hard) to it first. */
static void dl_start_store_process(dl_job_t *j, int fd_limit) {
  test_store_proc_t sp;
  test_store_proc_start_on(j->token, j->port, fd_limit, &sp);
  ASSERT_EQ(sp.port, j->port);
  j->store_pid = sp.pid;
  j->store_ctl = sp.ctl;
}

static void dl_job_init(dl_job_t *j, int n, int timeout_ms, bool rank0_serves) {
  memset(j, 0, sizeof *j);
  j->n = n;
  j->timeout_ms = timeout_ms;
  j->rank0_serves = rank0_serves;
  j->store_ctl = -1;
  dl_random_hex(j->token, 16);
  char r[9];
  dl_random_hex(r, 4);
  snprintf(j->job, sizeof j->job, "dl%d-%s", (int)getpid(), r);
  j->port = test_free_port();
  snprintf(j->addr, sizeof j->addr, "127.0.0.1:%d", j->port);
  /* Before the pipes, which the store process must not hold open. */
  if (!rank0_serves) dl_start_store_process(j, 0);
  ASSERT_EQ(pipe(j->gate), 0);
  ASSERT_EQ(pipe(j->report), 0);
}

static void dl_report(const dl_job_t *j, const dl_report_t *rep) {
  if (write(j->report[1], rep, sizeof *rep) != (ssize_t)sizeof *rep)
    fprintf(stderr, "rank %d: report: %s\n", rep->rank, strerror(errno));
}

static void dl_rank_env(const dl_job_t *j, int rank) {
  test_set_rank_env(&(test_rank_env_t){.rank = rank, .size = j->n, .store_addr = j->addr,
                                       .token = j->token, .job = j->job, .backend = "host",
                                       .rank0_serves = j->rank0_serves,
                                       .store_timeout_ms = j->timeout_ms});
}

static void dl_wait_gate(const dl_job_t *j) {
  char c;
  while (read(j->gate[0], &c, 1) < 0 && errno == EINTR) {
  }
}

static int dl_rank_main(const dl_job_t *j, int rank, dl_role_t role) {
  dl_rank_env(j, rank);
  if (role == ROLE_FREEZE_SELF) raise(SIGSTOP);
  if (role != ROLE_EARLY) dl_wait_gate(j);
  dl_report_t rep;
  memset(&rep, 0, sizeof rep);
  rep.rank = rank;
  rep.barrier_code = -1;
  symm_comm_t *comm = NULL;
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &comm);
  rep.init_ms = (int)(test_now_ms() - t0);
  rep.init_code = res;
  if (res != SYMM_SUCCESS) snprintf(rep.msg, sizeof rep.msg, "%s", symm_last_error());
  if (res == SYMM_SUCCESS && role == ROLE_STOP_IN_BARRIER) raise(SIGSTOP);
  if (res == SYMM_SUCCESS && j->barrier) {
    t0 = test_now_ms();
    res = symm_comm_barrier(comm);
    rep.barrier_ms = (int)(test_now_ms() - t0);
    rep.barrier_code = res;
    if (res != SYMM_SUCCESS) snprintf(rep.msg, sizeof rep.msg, "%s", symm_last_error());
  }
  t0 = test_now_ms();
  symm_comm_destroy(comm);
  rep.destroy_ms = (int)(test_now_ms() - t0);
  dl_report(j, &rep);
  return 0;
}

static pid_t dl_spawn(dl_job_t *j, int rank, dl_role_t role) {
  pid_t pid = test_fork();
  if (pid == 0) {
    close(j->gate[1]);
    close(j->report[0]);
    if (j->store_ctl >= 0) close(j->store_ctl);
    int rc = dl_rank_main(j, rank, role);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  j->pids[rank] = pid;
  return pid;
}

static void dl_open_gate(dl_job_t *j) {
  close(j->gate[1]);
  j->gate[1] = -1;
}

static void dl_wait_stopped(pid_t pid) {
  int st;
  ASSERT_EQ(waitpid(pid, &st, WUNTRACED), pid);
  ASSERT(WIFSTOPPED(st));
}

/* Reads `want` reports within wait_ms. */
static int dl_collect(dl_job_t *j, dl_report_t *reps, int want, int wait_ms) {
  int got = 0;
  uint64_t end = test_now_ms() + (uint64_t)wait_ms;
  while (got < want && test_now_ms() < end) {
    struct pollfd p = {.fd = j->report[0], .events = POLLIN};
    if (poll(&p, 1, (int)(end - test_now_ms())) <= 0) continue;
    if (read(j->report[0], &reps[got], sizeof reps[got]) != (ssize_t)sizeof reps[got]) break;
    got++;
  }
  return got;
}

/* Kills whatever is left (a stopped rank included), reaps every rank and
 * the store process. */
static void dl_job_end(dl_job_t *j) {
  if (j->gate[1] >= 0) close(j->gate[1]);
  for (int r = 0; r < j->n; r++) {
    if (!j->pids[r]) continue;
    kill(j->pids[r], SIGKILL);
    waitpid(j->pids[r], NULL, 0);
    j->pids[r] = 0;
  }
  close(j->gate[0]);
  close(j->report[0]);
  close(j->report[1]);
  if (j->store_pid) {
    close(j->store_ctl);
    waitpid(j->store_pid, NULL, 0);
  }
}

/* Connects as a tool (rank -1) to the job's store, waiting for it to be up. */
static symm_store_t *dl_tool_client(const dl_job_t *j) {
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(j->addr, j->token, -1, 20000, &s));
  return s;
}

/* Whether msg names rank r: "rank R" or a list "ranks [..R..]". */
static bool dl_names_rank(const char *msg, int r) {
  char want[24];
  snprintf(want, sizeof want, "rank %d", r);
  for (const char *p = msg; (p = strstr(p, want)); p++)
    if (p[strlen(want)] < '0' || p[strlen(want)] > '9') return true;
  for (const char *p = msg; (p = strstr(p, "ranks [")); p++)
    if (int_list_contains(p + 7, r)) return true;
  return false;
}

/* ------------------------------------------------------- frozen peers */
typedef enum { FREEZE_BEFORE_INIT, FREEZE_AFTER_HELLO, FREEZE_IN_BARRIER } dl_freeze_t;

static const char *const freeze_names[] = {"before init", "after its HELLO inside init",
                                           "in a barrier"};

/* One job of n ranks in which `frozen` is stopped at `when`. */
static void dl_frozen_case(int n, int frozen, dl_freeze_t when, int timeout_ms,
                           bool rank0_serves) {
  printf("-- %d ranks, rank %d frozen %s, SYMM_TIMEOUT_MS=%d, store served by %s\n", n,
         frozen, freeze_names[when], timeout_ms, rank0_serves ? "rank 0" : "its own process");
  fflush(stdout);
  dl_job_t j;
  dl_job_init(&j, n, timeout_ms, rank0_serves);
  j.barrier = when == FREEZE_IN_BARRIER;
  if (when == FREEZE_BEFORE_INIT) {
    dl_wait_stopped(dl_spawn(&j, frozen, ROLE_FREEZE_SELF));
  } else if (when == FREEZE_AFTER_HELLO) {
    /* The frozen rank (and rank 0 when it serves) start first. */
    dl_spawn(&j, frozen, ROLE_EARLY);
    if (rank0_serves && frozen != 0) dl_spawn(&j, 0, ROLE_EARLY);
  }
  for (int r = 0; r < n; r++)
    if (!j.pids[r]) dl_spawn(&j, r, r == frozen ? ROLE_STOP_IN_BARRIER : ROLE_SURVIVOR);
  if (when == FREEZE_AFTER_HELLO) {
    /* Once the frozen rank's first key of init (its settings) is in the
     * store, it has said HELLO and waits in init for the others: stop it
     * there, then let the others (waiting at the gate) start at once. */
    symm_store_t *tool = dl_tool_client(&j);
    char key[64], buf[4096]; /* the agreed settings: grows with them */
    size_t len = 0;
    snprintf(key, sizeof key, "symm/c0/settings/%d", frozen);
    ASSERT_OK(symm_store_get(tool, key, buf, sizeof buf, &len, 20000));
    symm_store_close(tool);
    ASSERT_EQ(kill(j.pids[frozen], SIGSTOP), 0);
    dl_wait_stopped(j.pids[frozen]);
  }
  dl_open_gate(&j);
  if (when == FREEZE_IN_BARRIER) dl_wait_stopped(j.pids[frozen]);

  dl_report_t reps[DL_MAX_RANKS];
  int got = dl_collect(&j, reps, n - 1, 3 * timeout_ms + 20000);
  dl_job_end(&j);
  ASSERT_EQ(got, n - 1);
  const int bound = timeout_ms + dl_slack_ms(timeout_ms) + DL_TOLERANCE_MS;
  for (int i = 0; i < got; i++) {
    const dl_report_t *p = &reps[i];
    const bool in_barrier = when == FREEZE_IN_BARRIER;
    const int code = in_barrier ? p->barrier_code : p->init_code;
    const int ms = in_barrier ? p->barrier_ms : p->init_ms;
    printf("rank %d: %s %s after %d ms (destroy %d ms): %s\n", p->rank,
           in_barrier ? "barrier" : "init", symm_strerror((symm_result_t)code), ms,
           p->destroy_ms, p->msg);
    if (in_barrier) ASSERT_EQ(p->init_code, SYMM_SUCCESS);
    ASSERT_EQ(code, SYMM_ERR_TIMEOUT);
    ASSERT_LE(ms, bound);
    ASSERT_LE(p->destroy_ms, bound);
    if (!dl_names_rank(p->msg, frozen))
      TEST_FAIL_("rank %d's message does not name rank %d: %s", p->rank, frozen, p->msg);
  }
  fflush(stdout);
}

/* Rank 0 and another rank frozen, each timeout, 3 ranks. */
static int dl_frozen_matrix(dl_freeze_t when, bool rank0_serves) {
  static const int timeouts[] = {1000, 3000};
  for (size_t t = 0; t < sizeof timeouts / sizeof *timeouts; t++)
    for (int frozen = 0; frozen < 2; frozen++)
      dl_frozen_case(3, frozen, when, timeouts[t], rank0_serves);
  return 0;
}

TEST_IMPL(deadline_frozen_before_init) { return dl_frozen_matrix(FREEZE_BEFORE_INIT, true); }
TEST_IMPL(deadline_frozen_before_init_ext) { return dl_frozen_matrix(FREEZE_BEFORE_INIT, false); }
TEST_IMPL(deadline_frozen_in_init) { return dl_frozen_matrix(FREEZE_AFTER_HELLO, true); }
TEST_IMPL(deadline_frozen_in_init_ext) { return dl_frozen_matrix(FREEZE_AFTER_HELLO, false); }
TEST_IMPL(deadline_frozen_in_barrier) { return dl_frozen_matrix(FREEZE_IN_BARRIER, true); }
TEST_IMPL(deadline_frozen_in_barrier_ext) { return dl_frozen_matrix(FREEZE_IN_BARRIER, false); }

/* ------------------------------------------------------------- floods */
#define FLOOD_HELD 2000   /* kept open to the end */
#define FLOOD_RING 1000   /* the newest others, the oldest of them closed */
#define FLOOD_BURST 20    /* new connections every FLOOD_PERIOD_MS */
#define FLOOD_PERIOD_MS 10

/* A socket connecting (non-blocking) to port; -1 if none could be made. */
static int flood_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Closes with a reset: no TIME_WAIT left for the ports of a long flood. */
static void flood_close(int fd) {
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

/* The flooder's process: FLOOD_HELD connections that never send a byte
 * and stay open, then FLOOD_BURST more every FLOOD_PERIOD_MS (the oldest
 * of those beyond FLOOD_RING closed) until ctl reaches EOF.  Says on
 * `ready` how many it holds (0: its fd limit is too low, then it exits). */
static void flood_main(int port, int ready, int ctl) {
  struct rlimit rl;
  int ok = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max >= 4096;
  if (ok && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ok = setrlimit(RLIMIT_NOFILE, &rl) == 0;
  }
  static int held[FLOOD_HELD], ring[FLOOD_RING];
  int nheld = 0, head = 0, count = 0, opened = 0;
  for (; ok && nheld < FLOOD_HELD; opened++) {
    int fd = flood_connect(port);
    if (fd < 0) break;
    held[nheld++] = fd;
  }
  int said = ok ? nheld : 0;
  if (write(ready, &said, sizeof said) != (ssize_t)sizeof said || !said) _exit(0);
  for (;;) {
    struct pollfd p = {.fd = ctl, .events = POLLIN};
    if (poll(&p, 1, FLOOD_PERIOD_MS) > 0) break; /* EOF: done */
    for (int i = 0; i < FLOOD_BURST; i++) {
      int fd = flood_connect(port);
      if (fd < 0) continue;
      opened++;
      if (count == FLOOD_RING) {
        flood_close(ring[head]);
        ring[head] = fd;
        head = (head + 1) % FLOOD_RING;
      } else {
        ring[count++] = fd;
      }
    }
  }
  for (int i = 0; i < count; i++) flood_close(ring[i]);
  for (int i = 0; i < nheld; i++) flood_close(held[i]);
  printf("flooder: %d connections opened in all\n", opened);
  fflush(stdout);
  _exit(0);
}

typedef struct {
  pid_t pid;
  int ctl;
} flooder_t;

/* Starts the flooder against port; false (with the reason printed) when
 * this machine's fd limit cannot hold the flood. */
static bool flood_start(const dl_job_t *j, flooder_t *f) {
  int ready[2], ctl[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(ctl), 0);
  f->pid = test_fork();
  if (f->pid == 0) {
    close(ready[0]);
    close(ctl[1]);
    /* The job's pipes stay the job's: the gate and the reports end at EOF. */
    close(j->gate[1]);
    close(j->report[1]);
    if (j->store_ctl >= 0) close(j->store_ctl);
    flood_main(j->port, ready[1], ctl[0]);
  }
  close(ready[1]);
  close(ctl[0]);
  f->ctl = ctl[1];
  int held = 0;
  ASSERT_EQ(read(ready[0], &held, sizeof held), (ssize_t)sizeof held);
  close(ready[0]);
  if (held == 0) {
    printf("SKIP: the hard RLIMIT_NOFILE is below 4096: no room for a flood of %d\n",
           FLOOD_HELD);
    close(f->ctl);
    waitpid(f->pid, NULL, 0);
    return false;
  }
  printf("flooder: holding %d connections, opening %d more every %d ms (%d of them open)\n",
         held, FLOOD_BURST, FLOOD_PERIOD_MS, FLOOD_RING);
  ASSERT_GE(held, FLOOD_HELD);
  fflush(stdout);
  return true;
}

static void flood_stop(flooder_t *f) {
  close(f->ctl);
  waitpid(f->pid, NULL, 0);
}

/* A 4-rank job with SYMM_TIMEOUT_MS=5000 inits and does a barrier while
 * the flood runs against its store. */
static int dl_flood_case(bool rank0_serves) {
  enum { N = 4, TIMEOUT_MS = 5000 };
  dl_job_t j;
  dl_job_init(&j, N, TIMEOUT_MS, rank0_serves);
  j.barrier = true;
  /* Rank 0 serving starts first, so that the flood meets its store. */
  if (rank0_serves) {
    dl_spawn(&j, 0, ROLE_EARLY);
    symm_store_close(dl_tool_client(&j));
  }
  flooder_t f;
  if (!flood_start(&j, &f)) {
    dl_job_end(&j);
    return TEST_SKIP;
  }
  for (int r = 0; r < N; r++)
    if (!j.pids[r]) dl_spawn(&j, r, ROLE_SURVIVOR);
  dl_open_gate(&j);
  dl_report_t reps[N];
  int got = dl_collect(&j, reps, N, 3 * TIMEOUT_MS + 20000);
  dl_job_end(&j); /* first: the ranks hold the flooder's control pipe too */
  flood_stop(&f);
  ASSERT_EQ(got, N);
  for (int i = 0; i < got; i++) {
    printf("rank %d: init %s in %d ms, barrier %s in %d ms %s\n", reps[i].rank,
           symm_strerror((symm_result_t)reps[i].init_code), reps[i].init_ms,
           reps[i].barrier_code < 0 ? "not called"
                                    : symm_strerror((symm_result_t)reps[i].barrier_code),
           reps[i].barrier_ms, reps[i].msg);
  }
  for (int i = 0; i < got; i++) {
    ASSERT_EQ(reps[i].init_code, SYMM_SUCCESS);
    ASSERT_EQ(reps[i].barrier_code, SYMM_SUCCESS);
  }
  fflush(stdout);
  return 0;
}

TEST_IMPL(deadline_flood_rank0_store) { return dl_flood_case(true); }
TEST_IMPL(deadline_flood_own_store) { return dl_flood_case(false); }

/* A store out of fds (its process's limit lowered to 64) while 100
 * connections that never say HELLO wait to be accepted: accept() fails
 * with EMFILE, and the server gives up the oldest of those connections
 * to take the next one, so a client with the token is served within its
 * timeout instead of waiting for handshake deadlines to free fds. */
TEST_IMPL(deadline_store_out_of_fds) {
  enum { LIMIT = 64, FLOOD = 100, TIMEOUT_MS = 3000 };
  dl_job_t j;
  memset(&j, 0, sizeof j);
  dl_random_hex(j.token, 16);
  j.port = test_free_port();
  snprintf(j.addr, sizeof j.addr, "127.0.0.1:%d", j.port);
  dl_start_store_process(&j, LIMIT);
  static int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) ASSERT_GE(fds[i] = flood_connect(j.port), 0);
  uint64_t t0 = test_now_ms();
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(j.addr, j.token, -1, TIMEOUT_MS, &s));
  ASSERT_OK(symm_store_set(s, "k", "v", 1));
  char buf[4];
  size_t len = 0;
  ASSERT_OK(symm_store_get(s, "k", buf, sizeof buf, &len, 0));
  ASSERT_EQ(len, 1);
  printf("served after %d ms with the store out of fds\n", (int)(test_now_ms() - t0));
  symm_store_close(s);
  for (int i = 0; i < FLOOD; i++) flood_close(fds[i]);
  close(j.store_ctl);
  int st;
  ASSERT_EQ(waitpid(j.store_pid, &st, 0), j.store_pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return 0;
}

/* ---- inside the bound, not on it: a call whose store stops answering
 * ---- waits for a reply until its timeout plus the grace, the slack less
 * ---- a tenth, and so returns before timeout + slack however the
 * ---- machine schedules it afterwards (up to that tenth: 25 ms here).
 * ---- Measured in ns: a wait that used the whole slack ends past it. */
TEST_IMPL(deadline_store_silent_inside_bound) {
  const char *token = "silent-store-token";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t server = test_fork();
  if (server == 0) {
    symm_store_server_t *srv = NULL;
    ASSERT_OK(symm_store_server_start("127.0.0.1", 0, token, &srv));
    int port = symm_store_server_port(srv);
    ASSERT_EQ(write(ready[1], &port, sizeof port), (ssize_t)sizeof port);
    for (;;) pause();
  }
  int port = 0;
  ASSERT_EQ(read(ready[0], &port, sizeof port), (ssize_t)sizeof port);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  const int timeout_ms = 1000, slack_ms = 250;
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect(addr, token, -1, 10000, &s));
  symm_store_set_timeout(s, timeout_ms);
  ASSERT_EQ(kill(server, SIGSTOP), 0);
  char buf[16];
  size_t len = 0;
  const uint64_t t0 = symm_now_ns();
  symm_result_t res = symm_store_get(s, "never-set", buf, sizeof buf, &len, timeout_ms);
  const uint64_t took_us = (symm_now_ns() - t0) / 1000;
  printf("get from a stopped store: %s after %llu us (bound %d ms): %s\n", symm_strerror(res),
         (unsigned long long)took_us, timeout_ms + slack_ms, symm_last_error());
  ASSERT(res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST);
  ASSERT_GE(took_us, (uint64_t)timeout_ms * 1000);
  ASSERT_LT(took_us, (uint64_t)(timeout_ms + slack_ms) * 1000);
  symm_store_close(s);
  kill(server, SIGKILL);
  waitpid(server, NULL, 0);
  return 0;
}

/* ---- one timeout per signal call: rank 0's signal barrier waits for
 * ---- rank 1, which comes 600 ms late, then for rank 2, which never
 * ---- comes (it makes no signal call).  Rank 0 times out at 1000 ms (plus
 * ---- slack), not 600 ms + a fresh 1000 ms for its second wait. */
enum { SIG_TIMEOUT_MS = 1000, SIG_LATE_MS = 600 };

static int signal_late_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_store_t *st = symm_comm_store(comm);
  int64_t shape[1] = {256};
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, shape, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  char v[32];
  size_t len = 0;
  if (rank == 0) {
    const uint64_t t0 = test_now_ms();
    int n = snprintf(v, sizeof v, "%llu", (unsigned long long)t0);
    ASSERT_OK(symm_store_set(st, "test/signal/rank0", v, (size_t)n));
    symm_result_t res = symm_signal_barrier(t, 0, NULL);
    const uint64_t took = test_now_ms() - t0;
    printf("rank 0: signal barrier %s after %llu ms: %s\n", symm_strerror(res),
           (unsigned long long)took, symm_last_error());
    fflush(stdout);
    ASSERT_OK(symm_store_set(st, "test/signal/done", "1", 1));
    ASSERT_RES(res, SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 2");
    /* A fresh timeout for the second wait ends at SIG_LATE_MS +
     * SIG_TIMEOUT_MS at the earliest; one timeout leaves SIG_LATE_MS for
     * scheduling. */
    ASSERT_LT(took, SIG_TIMEOUT_MS + SIG_LATE_MS);
  } else if (rank == 1) {
    /* Late by SIG_LATE_MS, counted from rank 0's mark, not by a sleep of
     * its own. */
    ASSERT_OK(symm_store_get(st, "test/signal/rank0", v, sizeof v - 1, &len, 30000));
    v[len] = 0;
    const uint64_t at = strtoull(v, NULL, 10) + SIG_LATE_MS;
    for (uint64_t now; (now = test_now_ms()) < at;) poll(NULL, 0, (int)(at - now));
    (void)symm_signal_barrier(t, 0, NULL); /* rank 2 never signals it either */
  }
  test_store_await(st, "test/signal/done");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(deadline_signal_barrier_one_timeout) {
  ASSERT_EQ(test_run_ranks_timed(3, signal_late_rank, NULL, 40000, SIG_TIMEOUT_MS), 0);
  return 0;
}

/* ---- a silent fd server is named, not a live rank: rank 2's fd server
 * ---- thread is stopped (ptrace, that thread only) before a rendezvous,
 * ---- so ranks 0 and 1 wait in vain for its reply while rank 2 maps
 * ---- theirs and waits for them in the rendezvous's agreement.  Their
 * ---- wait must end early enough to tell rank 2 why: every rank then
 * ---- returns SYMM_ERR_TIMEOUT naming rank 2's server, where rank 2 used
 * ---- to blame rank 0 ("did not arrive") and ranks 0 and 1 "came late". */
typedef struct {
  int pid_pipe[2], go_pipe[2], done_pipe[2];
} silent_job_t;

/* The peers map at rendezvous and through the fd servers (no blob for
 * /proc: no export_mem), which is what is tested. */
static symm_backend_ops_t silent_fdx_ops;

static int silent_fdx_rank(int rank, int size, void *arg) {
  (void)size;
  silent_job_t *j = arg;
  symm_comm_t *comm = NULL;
  setenv("SYMM_MAP_PEERS", "at_rendezvous", 1);
  ASSERT_OK(symm_comm_init(NULL, &comm));
  silent_fdx_ops = *symm_test_comm_ops(comm);
  silent_fdx_ops.export_mem = NULL;
  symm_test_comm_set_ops(comm, &silent_fdx_ops);
  int64_t shape[1] = {1024};
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, shape, 1, SYMM_DTYPE_F32, &t));
  char c = 0;
  if (rank == 2) {
    pid_t me = getpid();
    ASSERT_EQ(write(j->pid_pipe[1], &me, sizeof me), (ssize_t)sizeof me);
    ASSERT_EQ(read(j->go_pipe[0], &c, 1), 1);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_tensor_rendezvous(t);
  printf("rank %d: rendezvous %s after %llu ms: %s\n", rank, symm_strerror(res),
         (unsigned long long)(test_now_ms() - t0), symm_last_error());
  fflush(stdout);
  c = (char)(res == SYMM_ERR_TIMEOUT && strstr(symm_last_error(), "rank 2's server"));
  ASSERT_EQ(write(j->done_pipe[1], &c, 1), 1);
  ASSERT_RES(res, SYMM_ERR_TIMEOUT);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2's server");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(deadline_silent_fd_server_named) {
  silent_job_t j;
  ASSERT_EQ(pipe(j.pid_pipe), 0);
  ASSERT_EQ(pipe(j.go_pipe), 0);
  ASSERT_EQ(pipe(j.done_pipe), 0);
  pid_t job = test_fork();
  if (job == 0) {
    _exit(test_run_ranks_timed(3, silent_fdx_rank, &j, 40000, 2000) ? 1 : 0);
  }
  pid_t victim = 0;
  ASSERT_EQ(read(j.pid_pipe[0], &victim, sizeof victim), (ssize_t)sizeof victim);
  /* The host backend's rank has two threads: its own and its fd server's. */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)victim);
  DIR *d = opendir(path);
  ASSERT(d != NULL);
  pid_t server = 0;
  for (struct dirent *e; (e = readdir(d));) {
    int tid = atoi(e->d_name);
    if (tid > 0 && tid != victim) server = tid;
  }
  closedir(d);
  ASSERT_GT(server, 0);
  if (ptrace(PTRACE_SEIZE, server, 0, 0) != 0) {
    printf("SKIP: cannot ptrace rank 2's fd server thread: %s\n", strerror(errno));
    kill(job, SIGKILL);
    waitpid(job, NULL, 0);
    return TEST_SKIP;
  }
  ASSERT_EQ(ptrace(PTRACE_INTERRUPT, server, 0, 0), 0);
  int st = 0;
  ASSERT_EQ(waitpid(server, &st, __WALL), server);
  ASSERT_EQ(write(j.go_pipe[1], "g", 1), 1);
  int named = 0;
  for (int r = 0; r < 3; r++) {
    char c;
    ASSERT_EQ(read(j.done_pipe[0], &c, 1), 1);
    named += c;
  }
  /* Rank 2 can finish (and destroy its fd server) once its thread runs. */
  (void)ptrace(PTRACE_DETACH, server, 0, 0); /* gone if rank 2 failed */
  ASSERT_EQ(waitpid(job, &st, 0), job);
  ASSERT_EQ(named, 3);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return 0;
}
