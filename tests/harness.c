#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/store.h"

uint64_t test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int test_count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

size_t test_mapped_bytes(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  size_t total = 0;
  unsigned long lo, hi;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) total += hi - lo;
  fclose(f);
  return total;
}

bool test_address_mapped(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  unsigned long lo, hi, a = (unsigned long)(uintptr_t)p;
  char line[512];
  bool mapped = false;
  while (!mapped && fgets(line, sizeof line, f))
    mapped = sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi;
  fclose(f);
  return mapped;
}

const char *test_tool_path(const char *tool) {
  static char buf[4][1024];
  static int i;
  char *p = buf[i++ & 3];
  snprintf(p, 1024, "%s/%s", SYMM_TOOLS_DIR, tool);
  return p;
}

int test_run_command(const char *cmd, char *out, size_t cap) {
  char full[8192];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = 0;
  if (out && cap) {
    size_t r;
    while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0) n += r;
    out[n] = 0;
  }
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  int st = pclose(p);
  if (st == -1) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

/* Forks the store process, serving on port (0: any) with its
 * RLIMIT_NOFILE first lowered to fd_limit where that is > 0; returns its
 * pid with the port it serves.  It runs until ctl[1] is closed. */
static pid_t start_store_process(const char *token, int port_wanted, int fd_limit, int ctl[2],
                                 int *port) {
  int portpipe[2];
  if (pipe(ctl) != 0 || pipe(portpipe) != 0) TEST_FAIL_("pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL_("fork: %s", strerror(errno));
  if (pid == 0) {
    close(ctl[1]);
    close(portpipe[0]);
    symm_store_server_t *server = NULL;
    int p = -1;
    struct rlimit rl = {(rlim_t)fd_limit, (rlim_t)fd_limit};
    if ((fd_limit <= 0 || setrlimit(RLIMIT_NOFILE, &rl) == 0) &&
        symm_store_server_start("127.0.0.1", port_wanted, token, &server) == SYMM_SUCCESS)
      p = symm_store_server_port(server);
    if (write(portpipe[1], &p, sizeof p) != (ssize_t)sizeof p) _exit(1);
    close(portpipe[1]);
    char c;
    while (read(ctl[0], &c, 1) > 0) {
    }
    symm_store_server_stop(server);
    _exit(0);
  }
  close(ctl[0]);
  close(portpipe[1]);
  if (read(portpipe[0], port, sizeof *port) != (ssize_t)sizeof *port || *port <= 0)
    TEST_FAIL_("store process did not start: %s", strerror(errno));
  close(portpipe[0]);
  return pid;
}

void test_store_proc_start_on(const char *token, int port, int fd_limit, test_store_proc_t *s) {
  int ctl[2];
  s->pid = (int)start_store_process(token, port, fd_limit, ctl, &s->port);
  s->ctl = ctl[1];
}

void test_store_proc_start(const char *token, test_store_proc_t *s) {
  test_store_proc_start_on(token, 0, 0, s);
}

/* Killed, not asked: processes forked later (ranks, other stores) hold
 * copies of its control pipe. */
void test_store_proc_stop(test_store_proc_t *s) {
  if (s->pid <= 0) return;
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  close(s->ctl);
  s->pid = 0;
}

/* Write end of the pipe through which a rank says test_rank_ready. */
static int rank_ready_fd = -1;
/* This process's rank in test_run_ranks' job, -1 outside one. */
static int test_rank = -1;

void test_fail_at(const char *file, int line, const char *fmt, ...) {
  if (test_rank >= 0) fprintf(stderr, "rank %d: ", test_rank);
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}

void test_rank_ready(void) {
  char c = 1;
  if (rank_ready_fd >= 0 && write(rank_ready_fd, &c, 1) != 1)
    fprintf(stderr, "test_rank_ready: %s\n", strerror(errno));
}

int test_run_ranks(int n, test_rank_fn fn, void *arg) {
  return test_run_ranks_opts(n, fn, arg, NULL);
}

int test_run_ranks_timed(int n, test_rank_fn fn, void *arg, int timeout_ms,
                         int store_timeout_ms) {
  test_job_opts_t o = {.timeout_ms = timeout_ms, .store_timeout_ms = store_timeout_ms,
                       .kill_rank = -1};
  return test_run_ranks_opts(n, fn, arg, &o);
}

void test_setenv_int(const char *name, long long value) {
  char num[32];
  snprintf(num, sizeof num, "%lld", value);
  setenv(name, num, 1);
}

void test_set_rank_env(const test_rank_env_t *e) {
  test_setenv_int("SYMM_RANK", e->rank);
  test_setenv_int("SYMM_WORLD_SIZE", e->size);
  unsetenv("SYMM_LOCAL_RANK");
  unsetenv("SYMM_LOCAL_SIZE");
  setenv("SYMM_STORE_ADDR", e->store_addr, 1);
  setenv("SYMM_TOKEN", e->token, 1);
  setenv("SYMM_JOB_ID", e->job, 1);
  setenv("SYMM_STORE_EXTERNAL", e->rank0_serves ? "0" : "1", 1);
  setenv("SYMM_BACKEND", e->backend, 1);
  test_setenv_int("SYMM_TIMEOUT_MS", e->store_timeout_ms);
  if (e->store_bind) setenv("SYMM_STORE_BIND", e->store_bind, 1);
}

int test_timeout_s;
unsigned long test_checks;

/* A job's deadline when the test sets none: inside the test's own timeout,
 * so that the harness, not ctest, kills the ranks and says which. */
static int default_job_ms(void) {
  return test_timeout_s > 10 ? (test_timeout_s - 5) * 1000 : 60000;
}

/* What one job's ranks are started with, and what the harness watches. */
typedef struct {
  test_job_opts_t o;
  char token[33], job[40], addr[64], bind[64];
  int ctl[2];      /* the store process's control pipe (ctl[1] -1: none) */
  pid_t store_pid; /* 0: rank 0 serves the store (o.store_addr) */
  int ready[2];    /* test_rank_ready's pipe (-1: no rank to kill) */
  pid_t *pids;
} job_t;

/* A job's options with the defaults filled in, its token and job id. */
static void job_prepare(job_t *j, const test_job_opts_t *opts) {
  /* SYMM_TEST_BACKEND runs the same jobs on another backend (run-gpu-tests.sh
   * runs the conformance tests on native over the fake driver). */
  const char *env_backend = getenv("SYMM_TEST_BACKEND");
  const char *dflt = env_backend && *env_backend ? env_backend : "host";
  j->o = (test_job_opts_t){.kill_rank = -1};
  if (opts) j->o = *opts;
  if (!j->o.timeout_ms) j->o.timeout_ms = default_job_ms();
  if (!j->o.backend) j->o.backend = dflt;
  if (!j->o.store_timeout_ms) j->o.store_timeout_ms = 20000;
  unsigned char rnd[16];
  FILE *ur = fopen("/dev/urandom", "r");
  if (!ur || fread(rnd, 1, sizeof rnd, ur) != sizeof rnd) TEST_FAIL_("urandom");
  fclose(ur);
  for (int i = 0; i < 16; i++) sprintf(j->token + 2 * i, "%02x", rnd[i]);
  snprintf(j->job, sizeof j->job, "t%d-%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1],
           rnd[2], rnd[3]);
  j->ctl[0] = j->ctl[1] = j->ready[0] = j->ready[1] = -1;
  j->bind[0] = 0;
  if (j->o.store_addr) {
    snprintf(j->addr, sizeof j->addr, "%s", j->o.store_addr);
    snprintf(j->bind, sizeof j->bind, "%.*s", (int)strcspn(j->addr, ":"), j->addr);
    return;
  }
  /* The store runs in a process of its own, forked before any thread
   * exists here: forking the ranks from a process with a running server
   * thread could hand them a lock held by that thread (malloc's, the
   * sanitizers' allocator's) and deadlock them. */
  int port = 0;
  j->store_pid = start_store_process(j->token, 0, 0, j->ctl, &port);
  snprintf(j->addr, sizeof j->addr, "127.0.0.1:%d", port);
}

/* In rank r's process, just forked: its environment, then fn. */
static void rank_main(job_t *j, int r, int n, test_rank_fn fn, void *arg) {
  free(j->pids); /* the parent's bookkeeping (valgrind counts it lost in the rank) */
  if (j->ctl[1] >= 0) close(j->ctl[1]);
  if (j->ready[0] >= 0) close(j->ready[0]);
  test_rank = r;
  rank_ready_fd = r == j->o.kill_rank ? j->ready[1] : -1;
  if (r != j->o.kill_rank && j->ready[1] >= 0) close(j->ready[1]);
  if (j->o.enter) j->o.enter(r, j->o.enter_arg);
  test_set_rank_env(&(test_rank_env_t){.rank = r, .size = n, .store_addr = j->addr,
                                       .token = j->token, .job = j->job,
                                       .backend = j->o.backend,
                                       .rank0_serves = j->o.store_addr != NULL,
                                       .store_timeout_ms = j->o.store_timeout_ms,
                                       .store_bind = j->bind[0] ? j->bind : NULL});
  int rc = fn(r, n, arg);
  fflush(stdout);
  fflush(stderr);
  _exit(rc);
}

/* Records rank r's exit; true if it failed. */
static bool rank_exited(const job_t *j, int r, int st) {
  if (j->o.exit_status) j->o.exit_status[r] = st;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return false;
  if (r != j->o.kill_rank)
    fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return true;
}

/* Waits for every rank, killing o.kill_rank when due and all of them at
 * the deadline; returns how many did not exit 0. */
static int wait_ranks(job_t *j, int n) {
  uint64_t deadline = test_now_ms() + (uint64_t)j->o.timeout_ms, ready_at = 0;
  int remaining = n, bad = 0, killed_target = 0;
  while (remaining > 0) {
    char c;
    if (j->ready[0] >= 0 && !ready_at && read(j->ready[0], &c, 1) == 1) ready_at = test_now_ms();
    if (ready_at && !killed_target && j->pids[j->o.kill_rank] &&
        test_now_ms() >= ready_at + (uint64_t)j->o.kill_after_ms) {
      kill(j->pids[j->o.kill_rank], SIGKILL);
      killed_target = 1;
    }
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; r++)
        if (j->pids[r] == pid) {
          bad += rank_exited(j, r, st);
          j->pids[r] = 0;
          remaining--;
        }
      continue;
    }
    if (test_now_ms() > deadline) {
      fprintf(stderr, "job timed out after %d ms; killing ranks\n", j->o.timeout_ms);
      for (int r = 0; r < n; r++)
        if (j->pids[r]) kill(j->pids[r], SIGKILL);
      deadline = UINT64_MAX;
    }
    usleep(2000);
  }
  return bad;
}

int test_run_ranks_opts(int n, test_rank_fn fn, void *arg,
                        const test_job_opts_t *opts) {
  job_t j = {0};
  job_prepare(&j, opts);
  if (j.o.kill_rank >= 0 && (pipe(j.ready) != 0 || fcntl(j.ready[0], F_SETFL, O_NONBLOCK) != 0))
    TEST_FAIL_("pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  j.pids = calloc((size_t)n, sizeof *j.pids);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) TEST_FAIL_("fork: %s", strerror(errno));
    if (pid == 0) rank_main(&j, r, n, fn, arg);
    j.pids[r] = pid;
  }
  if (j.ready[1] >= 0) close(j.ready[1]);
  int bad = wait_ranks(&j, n);
  free(j.pids);
  if (j.ready[0] >= 0) close(j.ready[0]);
  if (j.store_pid > 0) {
    close(j.ctl[1]); /* the store process stops on EOF */
    int st;
    waitpid(j.store_pid, &st, 0);
  }
  return bad;
}

pid_t test_fork(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL_("fork: %s", strerror(errno));
  return pid;
}

void test_store_await(symm_store_t *store, const char *key) {
  char v[8];
  size_t len = 0;
  symm_result_t r = symm_store_get(store, key, v, sizeof v, &len, 30000);
  ASSERT_MSG(r == SYMM_SUCCESS, "waiting for %s: %s (%s)", key, symm_strerror(r),
             symm_last_error());
}

/* Strings, escapes and bracket nesting of a JSON text (not a full parser). */
void test_assert_json_shape(const char *s) {
  int depth = 0;
  bool in_string = false;
  while (*s == ' ' || *s == '\n') s++;
  ASSERT_EQ(*s, '{');
  for (; *s; s++) {
    if (in_string) {
      if (*s == '\\') s++;
      else if (*s == '"') in_string = false;
      else ASSERT((unsigned char)*s >= 0x20);
    } else if (*s == '"') {
      in_string = true;
    } else if (*s == '{' || *s == '[') {
      depth++;
    } else if (*s == '}' || *s == ']') {
      ASSERT_GT(depth, 0);
      if (--depth == 0) break;
    }
  }
  ASSERT_EQ(depth, 0);
  ASSERT(!in_string);
}

void test_rank_serves_store(int port) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  setenv("SYMM_STORE_ADDR", addr, 1);
  unsetenv("SYMM_STORE_EXTERNAL");
}

int test_free_port(void) {
  /* The socket stays bound (SO_REUSEADDR, never listening) for the rest of
   * this process: the kernel hands a bound port to no connect() and to no
   * other bind to port 0, so tests running beside this one (ctest -j8)
   * cannot take it before the store that is to listen there; that store
   * binds it beside this socket, as SO_REUSEADDR allows while this one
   * does not listen.  Closed at exec and at exit. */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)) != 0 ||
      bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    TEST_FAIL_("test_free_port: %s", strerror(errno));
  return ntohs(a.sin_port);
}

static bool write_proc_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

bool test_enter_user_namespace(int extra_clone_flags) {
  char map[64];
  const unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();
  if (unshare(CLONE_NEWUSER | extra_clone_flags) != 0) return false;
  snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
  if (!write_proc_text("/proc/self/uid_map", map) ||
      !write_proc_text("/proc/self/setgroups", "deny\n"))
    return false;
  snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
  return write_proc_text("/proc/self/gid_map", map);
}

int test_run_in_pid_namespace(int (*fn)(void *), void *arg) {
  if (!test_enter_user_namespace(CLONE_NEWPID)) return 100 + errno % 100;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return 99;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    _exit(fn(arg));
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int pid_namespace_probe(void *arg) {
  (void)arg;
  return getpid() == 1 ? 0 : 1;
}

bool test_pid_namespace_skip(void) {
  char why[160];
  if (test_pid_namespace_usable(why, sizeof why)) return false;
  printf("SKIP: %s\n", why);
  return true;
}

bool test_pid_namespace_usable(char *why, size_t why_len) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, why_len, "fork: %s", strerror(errno));
    return false;
  }
  if (pid == 0) _exit(test_run_in_pid_namespace(pid_namespace_probe, NULL));
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  snprintf(why, why_len, "cannot make a user + PID namespace unprivileged here (%s)",
           code >= 100 ? strerror(code - 100) : "the child did not run as pid 1");
  return false;
}

int test_run_ranks_in_tmpdir(int n, test_rank_fn fn, const test_job_opts_t *opts) {
  char dir[] = "/tmp/symm-test-XXXXXX";
  ASSERT(mkdtemp(dir));
  const int bad = test_run_ranks_opts(n, fn, dir, opts);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
  return bad;
}

void test_log_coll_to(const char *dir, const char *name, int rank, const char *level,
                      char *path, size_t cap) {
  snprintf(path, cap, "%s/%s-%d.log", dir, name, rank);
  setenv("SYMM_DEBUG", level, 1);
  setenv("SYMM_DEBUG_SUBSYS", "COLL", 1);
  setenv("SYMM_DEBUG_FILE", path, 1);
}
