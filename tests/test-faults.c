/*
 * The fault matrix: a rank is killed (SIGKILL) or frozen (SIGSTOP) at each
 * phase of a communicator's life, and every other rank must get what
 * include/symmem.h promises, in time, with nothing of the job left behind.
 *
 * A cell is one phase x one action x one target rank (0 or the last) x
 * 2 or 4 ranks x one way of launching: by hand (the test forks the ranks
 * with SYMM_RANK, SYMM_WORLD_SIZE and SYMM_STORE_ADDR set, and rank 0
 * serves the store) or under symmem-run (whose store also hears of a dead
 * rank from the launcher).  The ranks run tests/progs/fault_rank.c; the
 * library stops the target itself at the phase (SYMM_FAULT), except before
 * init, where the rank program raises the signal before it calls init.
 *
 * A survivor passes when
 *  - every call before the fault's phase succeeded, and the first one that
 *    can meet the target failed or a later one did (a destroy fault fails
 *    nothing: destroy is local);
 *  - that failure is SYMM_ERR_TIMEOUT for a stopped target, and
 *    SYMM_ERR_PEER_LOST for a killed one (its process is gone and, all
 *    ranks sharing this host, watched; the header promises PEER_LOST for a
 *    rank that dies in init, a barrier, a rendezvous, a signal wait), with
 *    one exception: by hand, in the first communicator's init (and in the
 *    second's when rank 0, which serves the store, is the one that died),
 *    TIMEOUT too.  There a survivor may reach the store only after it went (rank 0 died,
 *    or gave up and stopped serving) or before the target ever came, and
 *    nothing tells it a rank that never arrived from one that is late;
 *    symmem-run's store hears of the death from the launcher;
 *  - that call, and destroy, returned within the timeout + slack
 *    (max(250 ms, timeout / 10)), plus 750 ms for a loaded 2-core machine.
 * After the job: no process of it, nothing in /dev/shm naming its job id,
 * no abstract socket of it in /proc/net/unix, no listener on its store port.
 *
 * A cell that fails runs once more before it counts (run_phase says why).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* SYMM_TIMEOUT_MS of the ranks: long enough that the bound (3000 ms) lies
 * well below two timeouts, the mark of a call that waits twice. */
#define FAULT_TIMEOUT_MS 2000
/* Budget for the whole cell before the test gives up and kills it. */
#define FAULT_CELL_MS 30000
#define FAULT_MAX_RANKS 4

/* ------------------------------------------------------------ a cell */

typedef struct cell {
  const char *phase; /* a SYMM_FAULT phase, or "before_init" */
  bool stop;         /* SIGSTOP, else SIGKILL */
  int target, n;
  bool run;          /* under symmem-run, else by hand */
  bool second;       /* the phases run on the process's second communicator */
  char name[96];
} cell_t;

/* The calls of fault_rank.c in order, with their stage: a fault in a phase
 * may first be seen at that phase's stage. */
static const struct {
  const char *call;
  int stage;
} calls[] = {{"init1", 0},       {"barrier1", 1},    {"init", 2},   {"alloc", 3},
             {"rendezvous", 4},  {"barrier", 5},     {"all_reduce", 6},
             {"signal_put", 7},  {"signal_wait", 7}, {"free", 8},
             {"final_barrier", 9}, {"destroy", 10},  {"destroy1", 11}};

static int stage_of_call(const char *call) {
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (strcmp(calls[i].call, call) == 0) return calls[i].stage;
  return -1;
}

/* The first stage where survivors can see a fault of `phase` (alloc is
 * local: the rendezvous after it is the first to meet the target; so is
 * the final barrier after free).  99: never (destroy is local). */
static int first_stage(const char *phase) {
  static const struct {
    const char *phase;
    int stage;
  } map[] = {{"before_init", 2}, {"init.hello", 2}, {"init.shm", 2},   {"alloc", 4},
             {"rendezvous", 4},  {"barrier", 5},    {"collective", 6}, {"signal_wait", 7},
             {"free", 9},        {"destroy", 99}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].phase, phase) == 0) return map[i].stage;
  TEST_FAIL_("unknown phase %s", phase);
}

static int bound_ms(void) {
  int slack = FAULT_TIMEOUT_MS / 10 > 250 ? FAULT_TIMEOUT_MS / 10 : 250;
  return FAULT_TIMEOUT_MS + slack + 750;
}

/* What went wrong in a cell, one line after another. */
typedef struct verdict {
  char text[4096];
  size_t len;
} verdict_t;

static void complain(verdict_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void complain(verdict_t *v, const char *fmt, ...) {
  if (v->len + 2 >= sizeof v->text) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(v->text + v->len, sizeof v->text - v->len - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  v->len += (size_t)n < sizeof v->text - v->len - 1 ? (size_t)n : sizeof v->text - v->len - 2;
  v->text[v->len++] = '\n';
  v->text[v->len] = 0;
}

/* ------------------------------------------------------------ files */

static void read_text(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(out, 1, cap - 1, f) : 0;
  out[n] = 0;
  if (f) fclose(f);
}

static void dir_file(const char *dir, const char *name, int rank, char *out, size_t cap) {
  if (rank >= 0) snprintf(out, cap, "%s/%s.%d", dir, name, rank);
  else snprintf(out, cap, "%s/%s", dir, name);
}

static bool has_line(const char *dir, const char *name, int rank, const char *line) {
  char path[512], text[8192], want[64];
  dir_file(dir, name, rank, path, sizeof path);
  read_text(path, text, sizeof text);
  snprintf(want, sizeof want, "\n%s\n", line);
  char with_nl[8200];
  snprintf(with_nl, sizeof with_nl, "\n%s", text);
  return strstr(with_nl, want) != NULL;
}

static pid_t rank_pid(const char *dir, int rank) {
  char path[512], text[64];
  dir_file(dir, "pid", rank, path, sizeof path);
  read_text(path, text, sizeof text);
  return (pid_t)atoi(text);
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
  rmdir(dir);
}

/* /proc/<pid>/stat's state letter, 0 when there is no such process. */
static char proc_state(pid_t pid) {
  char path[64], text[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  read_text(path, text, sizeof text);
  const char *paren = strrchr(text, ')');
  return paren && paren[1] == ' ' ? paren[2] : 0;
}

static bool process_gone(pid_t pid) {
  char s = proc_state(pid);
  return s == 0 || s == 'Z' || s == 'X';
}

/* ----------------------------------------------------------- launching */

static const char *fault_rank_path(void) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/progs/symm-fault-rank", SYMM_TESTS_DIR);
  return path;
}

/* The rank program's arguments for this cell (argv from index 1). */
static int rank_args(const cell_t *c, const char *dir, const char **argv, char *before,
                     size_t before_len) {
  int n = 0;
  argv[n++] = fault_rank_path();
  argv[n++] = dir;
  if (strcmp(c->phase, "before_init") == 0) {
    snprintf(before, before_len, "%s:%d", c->stop ? "stop" : "kill", c->target);
    argv[n++] = "--before-init";
    argv[n++] = before;
  }
  if (c->second) argv[n++] = "--second";
  argv[n] = NULL;
  return n;
}

/* In a child about to exec: the settings every cell shares, and output to
 * DIR/log. */
static void child_setup(const cell_t *c, const char *dir) {
  char v[64], path[512];
  snprintf(v, sizeof v, "%d", FAULT_TIMEOUT_MS);
  setenv("SYMM_TIMEOUT_MS", v, 1);
  setenv("SYMM_BACKEND", "host", 1);
  setenv("SYMM_SCRATCH_BYTES", "64K", 1); /* the all-reduce is zero copy */
  if (strcmp(c->phase, "before_init") != 0) {
    snprintf(v, sizeof v, "%s:%s:%d", c->phase, c->stop ? "stop" : "kill", c->target);
    setenv("SYMM_FAULT", v, 1);
  } else {
    unsetenv("SYMM_FAULT");
  }
  unsetenv("SYMM_DEBUG");
  snprintf(path, sizeof path, "%s/log", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
}

/* By hand: n ranks forked with the launcher's variables, rank 0 serving
 * the store on a port free a moment ago. */
static void launch_by_hand(const cell_t *c, const char *dir, pid_t *pids, int *port) {
  *port = test_free_port();
  char addr[64], job[64], token[40];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", *port);
  snprintf(job, sizeof job, "fm%d-%d", (int)getpid(), *port);
  snprintf(token, sizeof token, "fault-matrix-%d-%d", (int)getpid(), *port);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < c->n; r++) {
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
      char v[32], before[32];
      const char *argv[8];
      child_setup(c, dir);
      snprintf(v, sizeof v, "%d", r);
      setenv("SYMM_RANK", v, 1);
      snprintf(v, sizeof v, "%d", c->n);
      setenv("SYMM_WORLD_SIZE", v, 1);
      setenv("SYMM_STORE_ADDR", addr, 1);
      setenv("SYMM_TOKEN", token, 1);
      setenv("SYMM_JOB_ID", job, 1);
      unsetenv("SYMM_STORE_EXTERNAL");
      unsetenv("SYMM_LOCAL_RANK");
      unsetenv("SYMM_LOCAL_SIZE");
      rank_args(c, dir, argv, before, sizeof before);
      execv(argv[0], (char *const *)argv);
      _exit(127);
    }
    pids[r] = pid;
  }
}

/* Under symmem-run: its pid. */
static pid_t launch_under_run(const cell_t *c, const char *dir) {
  pid_t pid = test_fork();
  if (pid == 0) {
    char np[16], before[32];
    const char *argv[12], *rargv[8];
    child_setup(c, dir);
    /* symmem-run sends the other ranks SIGTERM when one dies; blocked here,
     * it stays blocked in the ranks (the launcher hands them the signal
     * mask it started with) from before their first instruction, so that
     * the survivors' own calls are judged.  Its SIGKILL 2 s later stands. */
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, NULL);
    snprintf(np, sizeof np, "%d", c->n);
    int n = 0;
    argv[n++] = test_tool_path("symmem-run");
    argv[n++] = "-n";
    argv[n++] = np;
    argv[n++] = "--";
    rank_args(c, dir, rargv, before, sizeof before);
    for (int i = 0; rargv[i]; i++) argv[n++] = rargv[i];
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* ------------------------------------------------------------ judging */

/* Checks survivor r's record against what the header promises; appends
 * its first failure ("r1 init 5 1003ms") to the cell's summary. */
static void judge_survivor(const cell_t *c, const char *dir, int r, verdict_t *v, char *summary,
                           size_t summary_len) {
  char path[512], text[8192];
  dir_file(dir, "res", r, path, sizeof path);
  read_text(path, text, sizeof text);
  const int first = first_stage(c->phase), bound = bound_ms();
  const symm_result_t want = c->stop ? SYMM_ERR_TIMEOUT : SYMM_ERR_PEER_LOST;
  /* By hand, in init, a death may be unseen (see the file comment): in the
   * first communicator's, or in the second's when the dead rank is rank 0,
   * whose store went with it and was the only one that could tell. */
  const bool unseen_death =
      !c->stop && !c->run && first == 2 && (!c->second || c->target == 0);
  int failures = 0;
  bool exited = false;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char call[32];
    int code;
    unsigned long long ms;
    if (strcmp(line, "exit") == 0) exited = true;
    if (sscanf(line, "%31s %d %llu", call, &code, &ms) != 3) continue;
    const int stage = stage_of_call(call);
    /* The deadline is the promise of a call that gives up (and of destroy,
     * which waits on nobody but the store's drain); a call that succeeds
     * on an oversubscribed machine may take what its peers take. */
    if ((code != SYMM_SUCCESS || stage >= 10) && ms > (unsigned long long)bound)
      complain(v, "rank %d: %s took %llu ms (bound %d ms)", r, call, ms, bound);
    if (strcmp(call, "destroy") == 0 && ms >= 100) {
      size_t used = strlen(summary);
      snprintf(summary + used, summary_len - used, " r%d:destroy/%llums", r, ms);
    }
    if (code == SYMM_SUCCESS) continue;
    if (!failures) {
      size_t used = strlen(summary);
      snprintf(summary + used, summary_len - used, " r%d:%s=%d/%llums", r, call, code, ms);
    }
    failures++;
    if (stage < first)
      complain(v, "rank %d: %s failed with %s before the fault's phase", r, call,
               symm_strerror((symm_result_t)code));
    else if (code != (int)want && !(unseen_death && code == SYMM_ERR_TIMEOUT))
      complain(v, "rank %d: %s returned %s, not %s", r, call, symm_strerror((symm_result_t)code),
               symm_strerror(want));
  }
  if (!exited) complain(v, "rank %d did not finish (no 'exit' in its record)", r);
  if (first < 99 && failures == 0) complain(v, "rank %d: no call failed", r);
  if (first == 99 && failures) complain(v, "rank %d: a call failed on a destroy fault", r);
}

/* Whether a TCP listener on `port` exists (/proc/net/tcp and tcp6). */
static bool port_listening(int port) {
  static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  char want[16];
  snprintf(want, sizeof want, ":%04X", (unsigned)port);
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (!f) continue;
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char local[80], remote[80], state[8];
      if (sscanf(line, "%*s %79s %79s %7s", local, remote, state) != 3) continue;
      size_t n = strlen(local);
      if (n > 5 && strcmp(local + n - 5, want) == 0 && strcmp(state, "0A") == 0) {
        fclose(f);
        return true;
      }
    }
    fclose(f);
  }
  return false;
}

/* Lines of /proc/net/unix naming an abstract socket of the job. */
static int job_sockets(const char *job) {
  char want[96];
  snprintf(want, sizeof want, "@symmem-%s", job);
  FILE *f = fopen("/proc/net/unix", "r");
  if (!f) return 0;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, want) != NULL;
  fclose(f);
  return n;
}

/* Entries of /dev/shm whose name holds the job id. */
static int job_shm_files(const char *job, char *first, size_t cap) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, job)) {
      if (!n++) snprintf(first, cap, "%s", e->d_name);
    }
  closedir(d);
  return n;
}

/* The job id and store port rank 0 saw; false if it wrote none. */
static bool read_job(const char *dir, char *job, size_t job_len, int *port) {
  char path[512], text[512], id[128], addr[128];
  dir_file(dir, "job", -1, path, sizeof path);
  read_text(path, text, sizeof text);
  if (sscanf(text, "%127s %127s", id, addr) != 2) return false;
  snprintf(job, job_len, "%s", id);
  const char *colon = strrchr(addr, ':');
  *port = colon ? atoi(colon + 1) : 0;
  return true;
}

/* While a stopped target lives, the checks of judge_leftovers must see
 * what it holds: from init on its fd server's socket, and by hand, when it
 * is rank 0, the store's port (else they would prove nothing). */
static void judge_checks_see(const cell_t *c, const char *dir, verdict_t *v) {
  char job[128];
  int port = 0;
  if (!c->stop || first_stage(c->phase) < 4 || !read_job(dir, job, sizeof job, &port)) return;
  if (job_sockets(job) == 0)
    complain(v, "no socket @symmem-%s in /proc/net/unix while stopped rank %d lives", job,
             c->target);
  if (!c->run && c->target == 0 && !port_listening(port))
    complain(v, "store port %d not seen listening while stopped rank 0 lives", port);
}

/* After the job: nothing of it remains (waiting up to 2 s for the kernel
 * to let go of what dying processes held). */
static void judge_leftovers(const cell_t *c, const char *dir, verdict_t *v) {
  char job[128];
  int port = 0;
  if (!read_job(dir, job, sizeof job, &port)) {
    complain(v, "rank 0 wrote no job id and store address");
    return;
  }
  const uint64_t deadline = test_now_ms() + 2000;
  for (;;) {
    int alive = -1;
    for (int r = 0; r < c->n && alive < 0; r++) {
      pid_t pid = rank_pid(dir, r);
      if (pid > 0 && !process_gone(pid)) alive = r;
    }
    char shm[256] = "";
    const int shm_n = job_shm_files(job, shm, sizeof shm), socks = job_sockets(job);
    const bool listening = port > 0 && port_listening(port);
    if (alive < 0 && !shm_n && !socks && !listening) return;
    if (test_now_ms() >= deadline) {
      if (alive >= 0)
        complain(v, "rank %d (pid %d) is still there after the job", alive, (int)rank_pid(dir, alive));
      if (shm_n) complain(v, "/dev/shm holds %d file(s) of job %s: %s ...", shm_n, job, shm);
      if (socks) complain(v, "/proc/net/unix lists %d socket(s) @symmem-%s...", socks, job);
      if (listening) complain(v, "the store port %d still listens", port);
      return;
    }
    usleep(20000);
  }
}

/* ------------------------------------------------------------- running */

/* Every non-target rank wrote "held" (or ended); then DIR/go lets them
 * destroy.  Returns false at the deadline. */
static bool survivors_hold(const cell_t *c, const char *dir, uint64_t deadline) {
  for (;;) {
    bool all = true;
    for (int r = 0; r < c->n && all; r++) {
      if (r == c->target) continue;
      pid_t pid = rank_pid(dir, r);
      all = has_line(dir, "res", r, "held") || has_line(dir, "res", r, "exit") ||
            (pid > 0 && process_gone(pid));
    }
    if (all) return true;
    if (test_now_ms() >= deadline) return false;
    usleep(5000);
  }
}

static void release_survivors(const char *dir) {
  char path[512];
  dir_file(dir, "go", -1, path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}

/* Waits for the target to have taken its fault: gone (kill) or stopped. */
static void judge_target(const cell_t *c, const char *dir, verdict_t *v) {
  pid_t pid = rank_pid(dir, c->target);
  if (pid <= 0) {
    complain(v, "target rank %d wrote no pid", c->target);
    return;
  }
  const uint64_t deadline = test_now_ms() + 2000;
  for (;;) {
    char s = proc_state(pid);
    bool ok = c->stop ? s == 'T' : (s == 0 || s == 'Z' || s == 'X');
    if (ok) return;
    if (test_now_ms() >= deadline) {
      complain(v, "target rank %d (pid %d) is not %s (state %c): the fault did not fire",
               c->target, (int)pid, c->stop ? "stopped" : "gone", s ? s : '-');
      return;
    }
    usleep(5000);
  }
}

/* Reaps pid within wait_ms (SIGKILL after it); its wait status. */
static int reap(pid_t pid, int wait_ms) {
  const uint64_t deadline = test_now_ms() + (uint64_t)wait_ms;
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return st;
    if (test_now_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(5000);
  }
}

/* Runs one cell; returns true if it passed. */
static bool run_cell(cell_t *c) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/symm-faults-XXXXXX");
  ASSERT(mkdtemp(dir) != NULL);
  verdict_t v = {.text = ""};
  pid_t pids[FAULT_MAX_RANKS] = {0}, launcher = 0;
  int port = 0;
  const uint64_t start = test_now_ms(), deadline = start + FAULT_CELL_MS;
  if (c->run) launcher = launch_under_run(c, dir);
  else launch_by_hand(c, dir, pids, &port);

  if (!survivors_hold(c, dir, deadline))
    complain(&v, "survivors did not finish their phases within %d ms", FAULT_CELL_MS);
  release_survivors(dir);
  judge_target(c, dir, &v);
  judge_checks_see(c, dir, &v);
  /* The survivors end by themselves; the target is killed once they did. */
  if (!c->run) {
    for (int r = 0; r < c->n; r++) {
      if (r == c->target) continue;
      int st = reap(pids[r], (int)(deadline > test_now_ms() ? deadline - test_now_ms() : 1));
      if (st == -1) complain(&v, "rank %d did not exit; killed", r);
      else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        complain(&v, "rank %d ended with wait status 0x%x", r, (unsigned)st);
    }
    int st = 0;
    if (waitpid(pids[c->target], &st, WNOHANG | WUNTRACED) == pids[c->target] &&
        WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
      complain(&v, "target ended by signal %d", WTERMSIG(st));
    kill(pids[c->target], SIGKILL);
    reap(pids[c->target], 5000);
  } else {
    /* symmem-run waits for every rank: the stopped one must go first. */
    for (int r = 0; r < c->n; r++) {
      if (r == c->target) continue;
      pid_t pid = rank_pid(dir, r);
      while (pid > 0 && !process_gone(pid) && test_now_ms() < deadline) usleep(5000);
    }
    pid_t tpid = rank_pid(dir, c->target);
    if (tpid > 0 && !process_gone(tpid)) kill(tpid, SIGKILL);
    int st = reap(launcher, 10000);
    if (st == -1) complain(&v, "symmem-run did not exit; killed");
  }
  char summary[256] = "";
  for (int r = 0; r < c->n; r++)
    if (r != c->target) judge_survivor(c, dir, r, &v, summary, sizeof summary);
  judge_leftovers(c, dir, &v);

  const bool passed = v.len == 0;
  const unsigned long long ms = (unsigned long long)(test_now_ms() - start);
  if (passed) {
    printf("ok    %s (%llu ms)%s\n", c->name, ms, summary);
  } else {
    char log[16384], path[512];
    dir_file(dir, "log", -1, path, sizeof path);
    read_text(path, log, sizeof log);
    printf("FAIL  %s (%llu ms)\n%s--- log of the job:\n%s---\n", c->name, ms, v.text, log);
  }
  fflush(stdout);
  remove_dir(dir);
  return passed;
}

/* Every cell of one phase: kill and stop, of rank 0 and of the last rank,
 * with 2 and 4 ranks, by hand and under symmem-run.  Returns the number of
 * failed cells. */
static int run_phase(const char *phase, bool second) {
  if (access(fault_rank_path(), X_OK) != 0) TEST_FAIL_("%s is missing", fault_rank_path());
  static const int sizes[] = {2, 4};
  int failed = 0, cells = 0;
  /* FAULT_CELLS=<pattern> runs only the cells it matches (to chase one). */
  const char *only = getenv("FAULT_CELLS");
  for (int run = 0; run < 2; run++)
    for (int si = 0; si < 2; si++)
      for (int last = 0; last < 2; last++)
        for (int stop = 0; stop < 2; stop++) {
          cell_t c = {phase, stop != 0, last ? sizes[si] - 1 : 0, sizes[si], run != 0, second,
                      ""};
          snprintf(c.name, sizeof c.name, "%s:%s:%d/%d/%s%s", phase, stop ? "stop" : "kill",
                   c.target, c.n, run ? "run" : "hand", second ? "/second" : "");
          if (only && fnmatch(only, c.name, 0) != 0) continue;
          /* A cell that fails is run once more: a deadline overshoot of a
           * second (a rank not scheduled for that long while the rest of
           * the suite runs beside it) does not come twice in a row, where
           * a call that really waits twice its timeout does. */
          bool ok = run_cell(&c);
          if (!ok) {
            printf("retry %s once\n", c.name);
            ok = run_cell(&c);
          }
          failed += !ok;
          cells++;
        }
  printf("%s%s: %d of %d cells failed\n", phase, second ? " (second communicator)" : "",
         failed, cells);
  return failed;
}

#define FAULT_PHASE_TEST(test, phase, second) \
  TEST_IMPL(test) {                          \
    ASSERT_EQ(run_phase(phase, second), 0);  \
    return 0;                                \
  }

FAULT_PHASE_TEST(faults_before_init, "before_init", false)
FAULT_PHASE_TEST(faults_before_second_init, "before_init", true)
FAULT_PHASE_TEST(faults_init_hello, "init.hello", false)
FAULT_PHASE_TEST(faults_init_shm, "init.shm", false)
FAULT_PHASE_TEST(faults_alloc, "alloc", false)
FAULT_PHASE_TEST(faults_rendezvous, "rendezvous", false)
FAULT_PHASE_TEST(faults_barrier, "barrier", false)
FAULT_PHASE_TEST(faults_collective, "collective", false)
FAULT_PHASE_TEST(faults_signal_wait, "signal_wait", false)
FAULT_PHASE_TEST(faults_free, "free", false)
FAULT_PHASE_TEST(faults_destroy, "destroy", false)

/* SYMM_FAULT is a setting like the others: a value that does not parse is
 * refused at init, naming what is accepted, and symmem-info lists it. */
TEST_IMPL(faults_setting) {
  setenv("SYMM_FAULT", "barrier:explode", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_FAULT");
  ASSERT_STR_CONTAINS(symm_last_error(), "signal_wait");
  /* A rank the spec does not name goes through every point. */
  setenv("SYMM_FAULT", "barrier:kill:5", 1);
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  unsetenv("SYMM_FAULT");
  char *out = malloc(64 * 1024);
  ASSERT(out);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "%s --env", test_tool_path("symmem-info"));
  ASSERT_EQ(test_run_command(cmd, out, 64 * 1024), 0);
  ASSERT_STR_CONTAINS(out, "SYMM_FAULT (string");
  ASSERT_STR_CONTAINS(out, "Testing aid");
  free(out);
  return 0;
}
