/* Tests of the tools: symmem-run (environment, output prefixing, failure
 * handling, signals, timeouts, usage, the store it serves) and symmem-info.
 * The tools are run as separate processes, the way people run them. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "symm_test_access.h"
#include "harness.h"

#define OUT_CAP (64 * 1024)

/* ---------------------------------------------------------------- helpers */

/* Runs a shell command built from fmt; returns its exit status (128+signal
 * when killed) and how long it took. */
static int run_fmt(char *out, uint64_t *elapsed_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run_fmt(char *out, uint64_t *elapsed_ms, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  ASSERT_LT(n, (int)sizeof cmd);
  uint64_t start = test_now_ms();
  int rc = test_run_command(cmd, out, OUT_CAP);
  if (elapsed_ms) *elapsed_ms = test_now_ms() - start;
  printf("$ %s\n-> %d\n%s\n", cmd, rc, out);
  return rc;
}

static int count_occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* A fresh directory for one test's files; removed by remove_temp_dir. */
static char *make_temp_dir(void) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/symm-launcher-XXXXXX");
  ASSERT(mkdtemp(path) != NULL);
  return path;
}

static void remove_temp_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static void write_file(const char *dir, const char *name, const char *text, mode_t mode) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  fputs(text, f);
  fclose(f);
  chmod(path, mode);
}

static int read_pid_file(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) TEST_FAIL_("missing pid file %s", path);
  int pid = 0;
  if (fscanf(f, "%d", &pid) != 1) pid = 0;
  fclose(f);
  ASSERT_GT(pid, 1);
  return pid;
}

static void read_file(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(out, 1, cap - 1, f) : 0;
  out[n] = 0;
  if (f) fclose(f);
}

static bool file_exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* Gone means no such process, or a zombie waiting for a parent that does
 * not reap (a container's pid 1). */
static bool process_gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64], stat[512] = "";
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  read_file(path, stat, sizeof stat);
  const char *paren = strrchr(stat, ')');
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Every process named by the pid files must be gone within wait_ms. */
static void assert_all_gone(const char *dir, const char *const *names, int n, int wait_ms) {
  uint64_t deadline = test_now_ms() + (uint64_t)wait_ms;
  for (int i = 0; i < n; i++) {
    int pid = read_pid_file(dir, names[i]);
    while (!process_gone(pid) && test_now_ms() < deadline) usleep(20000);
    if (!process_gone(pid)) {
      kill(pid, SIGKILL);
      TEST_FAIL_("process %d (%s) of the job is still alive", pid, names[i]);
    }
  }
}

/* Starts symmem-run with argv (NULL-terminated, after the tool name) with
 * stdout and stderr to out_path, for tests that signal it. */
static pid_t spawn_run(const char *out_path, const char *const *args) {
  const char *argv[32];
  int n = 0;
  argv[n++] = test_tool_path("symmem-run");
  while (*args && n < 31) argv[n++] = *args++;
  argv[n] = NULL;
  pid_t pid = test_fork();
  if (pid == 0) {
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) _exit(99);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(98);
  }
  return pid;
}

/* Waits for pid to exit within wait_ms; returns its decoded status, or -1
 * (after killing it) on timeout. */
static int wait_exit(pid_t pid, int wait_ms) {
  uint64_t deadline = test_now_ms() + (uint64_t)wait_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (test_now_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(10000);
  }
}

static void wait_for_files(const char *dir, const char *const *names, int n, int wait_ms) {
  uint64_t deadline = test_now_ms() + (uint64_t)wait_ms;
  for (int i = 0; i < n; i++)
    while (!file_exists(dir, names[i])) {
      if (test_now_ms() >= deadline) TEST_FAIL_("%s/%s did not appear", dir, names[i]);
      usleep(10000);
    }
}

static const char *store_check_path(void) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/progs/symm-store-check", SYMM_TESTS_DIR);
  return path;
}

/* symmem-run -n 2 sh DIR/rank.sh (the script written there), output into
 * out_path; returns its pid once the first `wait` of `files` exist in DIR
 * (the script writes them; NULL: sh.0 and sh.1, each rank's pid). */
static pid_t spawn_two_shell_ranks(const char *dir, const char *script, char *out_path,
                                   size_t out_len, const char *const *files, int wait) {
  static const char *const pids[] = {"sh.0", "sh.1"};
  char script_path[256];
  write_file(dir, "rank.sh", script, 0644);
  snprintf(out_path, out_len, "%s/out", dir);
  snprintf(script_path, sizeof script_path, "%s/rank.sh", dir);
  const char *args[] = {"-n", "2", "sh", script_path, NULL};
  pid_t pid = spawn_run(out_path, args);
  if (!files) files = pids, wait = 2;
  wait_for_files(dir, files, wait, 10000);
  return pid;
}

/* Reads the ranks' output file into out until ranks 0 and 1 both printed
 * "<tag> <rank>", or 5 s passed (the caller asserts what it needs). */
static void wait_both_ranks_said(const char *out_path, char *out, const char *tag) {
  char want0[64], want1[64];
  snprintf(want0, sizeof want0, "%s 0", tag);
  snprintf(want1, sizeof want1, "%s 1", tag);
  uint64_t deadline = test_now_ms() + 5000;
  do {
    usleep(50000);
    read_file(out_path, out, OUT_CAP);
  } while ((!strstr(out, want0) || !strstr(out, want1)) && test_now_ms() < deadline);
}

/* Sends sig to the launcher of spawn_two_shell_ranks and waits (10 s at
 * most) for its exit status, which it returns (-1: it did not exit);
 * *ms: how long that took.  The ranks' output is read into out and
 * printed with it. */
static int signal_and_wait(pid_t pid, int sig, const char *out_path, char *out, uint64_t *ms) {
  const uint64_t start = test_now_ms();
  int rc = kill(pid, sig) == 0 ? wait_exit(pid, 10000) : -2;
  *ms = test_now_ms() - start;
  read_file(out_path, out, OUT_CAP);
  printf("symmem-run -> %d after %llu ms (signal %d):\n%s\n", rc, (unsigned long long)*ms, sig,
         out);
  return rc;
}

/* ------------------------------------------------ ranks of a test's own */

/* A test that needs a rank program of its own runs the test executable
 * (symm-tests) under symmem-run as "symm-tests TEST" with RANK_ROLE_ENV
 * set: the test, started so, is the rank's body instead of the test. */
#define RANK_ROLE_ENV "SYMM_TEST_LAUNCHER_RANK"

static bool is_rank_role(const char *role) {
  const char *r = getenv(RANK_ROLE_ENV);
  return r && strcmp(r, role) == 0;
}

static const char *self_path(void) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/symm-tests", SYMM_TESTS_DIR);
  return path;
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v) TEST_FAIL_("%s is not set", name);
  return atoi(v);
}

/* In a rank: connects to symmem-run's store as SYMM_RANK, sets up/RANK
 * and waits until every rank has; returns the connection. */
static symm_store_t *rank_store_barrier(void) {
  int rank = env_int("SYMM_RANK"), size = env_int("SYMM_WORLD_SIZE");
  symm_store_t *store = NULL;
  ASSERT_OK(symm_store_connect(getenv("SYMM_STORE_ADDR"), getenv("SYMM_TOKEN"), rank, 20000,
                               &store));
  char key[32];
  snprintf(key, sizeof key, "up/%d", rank);
  ASSERT_OK(symm_store_set(store, key, "1", 1));
  for (int r = 0; r < size; r++) {
    snprintf(key, sizeof key, "up/%d", r);
    const char *keys[] = {key};
    ASSERT_OK(symm_store_wait(store, keys, 1, 20000));
  }
  return store;
}

static void write_piece(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, data, len);
    if (w < 0 && errno == EINTR) continue;
    ASSERT_GT(w, 0);
    data += w;
    len -= (size_t)w;
  }
}

/* Reads a whole file into a malloc'd string. */
static char *slurp(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) TEST_FAIL_("cannot open %s", path);
  size_t cap = 1 << 20, n = 0, r;
  char *buf = malloc(cap);
  ASSERT(buf != NULL);
  while ((r = fread(buf + n, 1, cap - 1 - n, f)) > 0) {
    n += r;
    if (n + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      ASSERT(buf != NULL);
    }
  }
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* Whether text holds `line` as one whole line. */
static bool has_line(const char *text, const char *line) {
  size_t len = strlen(line);
  for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
    if ((p == text || p[-1] == '\n') && p[len] == '\n') return true;
  return false;
}

/* ------------------------------------------------------------ symmem-run */

TEST_IMPL(launcher_env) {
  char *out = malloc(OUT_CAP);
  /* Inherited job variables are replaced; the multicast guards are not. */
  int rc = run_fmt(out, NULL,
                   "NCCL_NVLS_ENABLE=0 SYMM_RANK=99 SYMM_TOKEN=stale %s -n 3 sh -c "
                   "'echo ENV $SYMM_RANK $SYMM_WORLD_SIZE $SYMM_LOCAL_RANK $SYMM_LOCAL_SIZE "
                   "$SYMM_TOKEN $SYMM_STORE_ADDR $SYMM_JOB_ID $SYMM_STORE_EXTERNAL "
                   "$NCCL_NVLS_ENABLE'",
                   test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  bool seen[3] = {false, false, false};
  char first_token[64] = "", first_addr[128] = "", first_job[64] = "";
  int lines = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    int rank, world, local_rank, local_size, external, nvls;
    char token[64], addr[128], job[64];
    if (strncmp(line, "ENV ", 4) != 0) continue;
    ASSERT_EQ(sscanf(line, "ENV %d %d %d %d %63s %127s %63s %d %d", &rank, &world, &local_rank,
                     &local_size, token, addr, job, &external, &nvls),
              9);
    ASSERT(rank >= 0 && rank < 3);
    ASSERT(!seen[rank]);
    seen[rank] = true;
    ASSERT_EQ(world, 3);
    ASSERT_EQ(local_rank, rank);
    ASSERT_EQ(local_size, 3);
    ASSERT_EQ(external, 1);
    ASSERT_EQ(nvls, 0);
    ASSERT_EQ(strlen(token), 32);
    ASSERT_EQ(strspn(token, "0123456789abcdef"), 32);
    ASSERT_STR_CONTAINS(addr, ":");
    ASSERT(job[0] != 0);
    if (lines++ == 0) {
      strcpy(first_token, token);
      strcpy(first_addr, addr);
      strcpy(first_job, job);
    }
    ASSERT_EQ(strcmp(token, first_token), 0);
    ASSERT_EQ(strcmp(addr, first_addr), 0);
    ASSERT_EQ(strcmp(job, first_job), 0);
  }
  ASSERT_EQ(lines, 3);

  /* Two jobs get different tokens. */
  rc = run_fmt(out, NULL, "%s -n 1 sh -c 'echo TOKEN $SYMM_TOKEN'", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "TOKEN ");
  ASSERT(strstr(out, first_token) == NULL);
  free(out);
  return 0;
}

TEST_IMPL(launcher_prefix) {
  char *out = malloc(OUT_CAP);
  char *dir = make_temp_dir();
  /* A line written in two pieces must come out whole; a last line without
   * a newline must still come out. */
  write_file(dir, "rank.sh",
             "r=$SYMM_RANK\n"
             "echo out$r\n"
             "echo err$r >&2\n"
             "printf 'piece%s-' $r\n"
             "sleep 0.2\n"
             "echo joined$r\n"
             "printf 'tail%s' $r\n",
             0644);
  int rc = run_fmt(out, NULL, "%s -p -n 2 sh %s/rank.sh", test_tool_path("symmem-run"), dir);
  ASSERT_EQ(rc, 0);
  for (int r = 0; r < 2; r++) {
    const char *fmts[] = {"[%d] out%d\n", "[%d] err%d\n", "[%d] piece%d-joined%d\n",
                          "[%d] tail%d\n"};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
      char want[64];
      snprintf(want, sizeof want, fmts[i], r, r, r);
      ASSERT_STR_CONTAINS(out, want);
    }
  }
  int lines = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++)
    if (!(line[0] == '[' && (line[1] == '0' || line[1] == '1') && !strncmp(line + 2, "] ", 2)))
      TEST_FAIL_("line without a rank prefix: \"%s\"", line);
  ASSERT_EQ(lines, 8);
  remove_temp_dir(dir);
  free(out);
  return 0;
}

/* launcher_whole_lines: WL_RANKS ranks write WL_LINES lines of WL_OUT_LEN
 * bytes to stdout and one in WL_ERR_EVERY of WL_ERR_LEN bytes to stderr,
 * all at once, each line in pieces (several write() calls), then a last
 * line without a newline to each. */
#define WL_RANKS 4
#define WL_LINES 2000
#define WL_OUT_LEN 100
#define WL_ERR_LEN 60
#define WL_ERR_EVERY 10

/* Line i of rank `rank`: "<kind><rank> L<i> " filled to len with one
 * letter per rank, the newline included. */
static void make_line(char *line, size_t len, char kind, int rank, int i) {
  int n = snprintf(line, len, "%c%d L%05d ", kind, rank, i);
  memset(line + n, 'a' + rank, len - 1 - (size_t)n);
  line[len - 1] = '\n';
}

static int whole_lines_rank(void) {
  int rank = env_int("SYMM_RANK");
  symm_store_close(rank_store_barrier()); /* every rank writes at once */
  char out[WL_OUT_LEN], err[WL_ERR_LEN], tail[32];
  for (int i = 0; i < WL_LINES; i++) {
    make_line(out, sizeof out, 'O', rank, i);
    write_piece(1, out, 7);
    write_piece(1, out + 7, 40);
    write_piece(1, out + 47, 52);
    write_piece(1, out + 99, 1);
    if (i % WL_ERR_EVERY == 0) {
      make_line(err, sizeof err, 'E', rank, i / WL_ERR_EVERY);
      write_piece(2, err, 5);
      write_piece(2, err + 5, 30);
      write_piece(2, err + 35, 25);
    }
  }
  int n = snprintf(tail, sizeof tail, "tail-out %d", rank);
  write_piece(1, tail, (size_t)n);
  n = snprintf(tail, sizeof tail, "tail-err %d", rank);
  write_piece(2, tail, (size_t)n);
  return 0;
}

/* Every line of text (symmem-run's stdout or stderr) must be one whole
 * line of one rank: its `count` lines of `kind` in order, then its tail
 * line, each with "[rank] " before it when prefixed, and nothing else. */
static void check_whole_lines(char *text, char kind, size_t len, int count, const char *tail,
                              bool prefixed) {
  int next[WL_RANKS] = {0};
  bool tail_seen[WL_RANKS] = {false};
  char want[WL_OUT_LEN];
  for (char *line = text; *line;) {
    char *nl = strchr(line, '\n');
    if (!nl) TEST_FAIL_("a last line without its newline: \"%.120s\"", line);
    *nl = 0;
    const char *body = line;
    int pr = -1, used = 0;
    if (prefixed) {
      if (sscanf(line, "[%d] %n", &pr, &used) != 1 || used == 0)
        TEST_FAIL_("a line without its rank's prefix: \"%.120s\"", line);
      body += used;
    }
    int rank = body[0] ? body[1] - '0' : -1;
    size_t tail_len = strlen(tail);
    if (!strncmp(body, tail, tail_len) && body[tail_len] == ' ') {
      rank = atoi(body + tail_len + 1);
      ASSERT(rank >= 0 && rank < WL_RANKS);
      if (tail_seen[rank] || next[rank] != count)
        TEST_FAIL_("rank %d's last line out of place: \"%.120s\"", rank, line);
      tail_seen[rank] = true;
    } else {
      if (body[0] != kind || rank < 0 || rank >= WL_RANKS || next[rank] >= count)
        TEST_FAIL_("not one rank's whole line: \"%.120s\"", line);
      make_line(want, len, kind, rank, next[rank]);
      if (strlen(body) != len - 1 || memcmp(body, want, len - 1) != 0)
        TEST_FAIL_("not rank %d's line %d, whole: \"%.120s\"", rank, next[rank], line);
      next[rank]++;
    }
    if (prefixed && pr != rank) TEST_FAIL_("rank %d's line prefixed [%d]", rank, pr);
    line = nl + 1;
  }
  for (int r = 0; r < WL_RANKS; r++) {
    ASSERT_EQ(next[r], count);
    if (!tail_seen[r]) TEST_FAIL_("rank %d's line without a newline (%s) is missing", r, tail);
  }
}

/* Ranks that write many lines at once, in pieces, to stdout and stderr:
 * every line that comes out is one rank's whole line, in the rank's order,
 * on the stream it was written to; a last line without a newline comes out
 * too.  With and without -p. */
TEST_IMPL(launcher_whole_lines) {
  if (is_rank_role("whole-lines")) return whole_lines_rank();
  char *dir = make_temp_dir(), *out = malloc(OUT_CAP);
  for (int prefixed = 0; prefixed < 2; prefixed++) {
    int rc = run_fmt(out, NULL, "{ %s=whole-lines %s %s-n %d %s launcher_whole_lines >%s/out "
                     "2>%s/err; }",
                     RANK_ROLE_ENV, test_tool_path("symmem-run"), prefixed ? "-p " : "",
                     WL_RANKS, self_path(), dir, dir);
    char *o = slurp(dir, "out"), *e = slurp(dir, "err");
    if (rc != 0) printf("stderr:\n%.4000s\n", e);
    ASSERT_EQ(rc, 0);
    check_whole_lines(o, 'O', WL_OUT_LEN, WL_LINES, "tail-out", prefixed);
    check_whole_lines(e, 'E', WL_ERR_LEN, WL_LINES / WL_ERR_EVERY, "tail-err", prefixed);
    free(o);
    free(e);
  }
  remove_temp_dir(dir);
  free(out);
  return 0;
}

/* launcher_stop_flushes: 4 ranks meet at symmem-run's store; then rank 1
 * leaves it cleanly and exits 3.  Ranks 0 and 2 hold output in stdio's
 * buffer (stdout is a pipe) and write it, with a marker, when SIGTERM
 * comes, exiting without BYE; rank 2 first waits on the store for a key
 * nobody sets, which only symmem-run's report of rank 1 can end.  Rank 3
 * dies of SIGTERM. */
static int stop_flushes_rank(void) {
  int rank = env_int("SYMM_RANK");
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (rank != 3) ASSERT_EQ(sigprocmask(SIG_BLOCK, &term, NULL), 0);
  if (rank == 0 || rank == 2) printf("buffered %d\n", rank);
  symm_store_t *store = rank_store_barrier();
  if (rank == 1) {
    symm_store_close(store);
    return 3;
  }
  if (rank == 2) {
    const char *keys[] = {"never/set"};
    symm_result_t res = symm_store_wait(store, keys, 1, 20000);
    printf("peer-lost %d %s\n", rank, res == SYMM_ERR_PEER_LOST ? "yes" : symm_strerror(res));
  }
  if (rank == 3)
    for (;;) pause();
  int sig = 0;
  ASSERT_EQ(sigwait(&term, &sig), 0);
  printf("term-flushed %d\n", rank);
  fflush(stdout);
  _exit(0); /* the store connection closes without BYE */
}

/* A rank fails: symmem-run names it and its status, stops the others with
 * SIGTERM, and passes on what they write as they go; the store reports the
 * failed rank lost (rank 2 hears of it), and not the ranks symmem-run
 * stopped itself. */
TEST_IMPL(launcher_stop_flushes) {
  if (is_rank_role("stop-flushes")) return stop_flushes_rank();
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "%s=stop-flushes %s -n 4 %s launcher_stop_flushes", RANK_ROLE_ENV,
                   test_tool_path("symmem-run"), self_path());
  ASSERT_EQ(rc, 3);
  ASSERT_STR_CONTAINS(out, "symmem-run: rank 1 (pid ");
  ASSERT_STR_CONTAINS(out, "exited with status 3; stopping the other ranks");
  static const char *const lines[] = {"buffered 0",   "term-flushed 0", "buffered 2",
                                      "peer-lost 2 yes", "term-flushed 2"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    if (!has_line(out, lines[i])) TEST_FAIL_("no line \"%s\"", lines[i]);
    ASSERT_EQ(count_occurrences(out, lines[i]), 1);
  }
  /* SIGTERM was enough: no rank waited out the grace period. */
  ASSERT(strstr(out, "still running") == NULL);
  ASSERT_STR_CONTAINS(out, "store: rank 1 lost");
  for (int r = 0; r < 4; r++) {
    char quiet[32];
    snprintf(quiet, sizeof quiet, "store: rank %d lost", r);
    if (r != 1 && strstr(out, quiet)) TEST_FAIL_("\"%s\" for a rank symmem-run stopped", quiet);
  }
  free(out);
  return 0;
}

TEST_IMPL(launcher_exit_code) {
  char *out = malloc(OUT_CAP);
  uint64_t ms;
  int rc = run_fmt(out, &ms,
                   "%s -n 3 sh -c 'if [ \"$SYMM_RANK\" = 1 ]; then exit 3; fi; sleep 30'",
                   test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 3);
  ASSERT_STR_CONTAINS(out, "rank 1 (pid ");
  ASSERT_STR_CONTAINS(out, "exited with status 3");
  ASSERT_STR_CONTAINS(out, "stopping the other ranks");
  ASSERT_LT(ms, 10000);
  /* All ranks succeeding gives 0 and no complaint. */
  rc = run_fmt(out, NULL, "%s -n 4 true", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(strlen(out), 0);
  free(out);
  return 0;
}

TEST_IMPL(launcher_kill) {
  char *out = malloc(OUT_CAP);
  char *dir = make_temp_dir();
  char script[1024];
  /* Every rank records its shell and a background child; rank 2 kills
   * itself with SIGKILL once all six pids are written. */
  snprintf(script, sizeof script,
           "d=%s\n"
           "echo $$ > $d/sh.$SYMM_RANK\n"
           "sleep 30 &\n"
           "echo $! > $d/bg.$SYMM_RANK\n"
           "if [ \"$SYMM_RANK\" = 2 ]; then\n"
           "  while [ $(ls $d | grep -cE '^(sh|bg)[.]') -lt 6 ]; do sleep 0.05; done\n"
           "  kill -9 $$\n"
           "fi\n"
           "wait\n",
           dir);
  write_file(dir, "rank.sh", script, 0644);
  uint64_t ms;
  int rc = run_fmt(out, &ms, "%s -n 3 sh %s/rank.sh", test_tool_path("symmem-run"), dir);
  ASSERT_EQ(rc, 128 + 9);
  ASSERT_STR_CONTAINS(out, "rank 2 (pid ");
  ASSERT_STR_CONTAINS(out, "was killed by signal 9 (SIGKILL");
  ASSERT_LT(ms, 10000);
  const char *names[] = {"sh.0", "sh.1", "sh.2", "bg.0", "bg.1", "bg.2"};
  assert_all_gone(dir, names, 6, 3000);
  remove_temp_dir(dir);
  free(out);
  return 0;
}

TEST_IMPL(launcher_no_leftovers) {
  char *out = malloc(OUT_CAP);
  char *dir = make_temp_dir();
  char script[1024];
  int rc = test_run_command("command -v setsid", out, OUT_CAP);
  const char *escape = rc == 0 ? "setsid" : "";
  if (rc != 0) printf("no setsid here: the escaping child stays in its group\n");
  /* Ranks that succeed but leave children behind, one of them in a
   * session of its own: the job is over when the ranks are, and with -p
   * the leftovers would also hold the output pipes open. */
  snprintf(script, sizeof script,
           "sleep 30 &\n"
           "echo $! > %s/bg.$SYMM_RANK\n"
           "%s sleep 31 &\n"
           "echo $! > %s/esc.$SYMM_RANK\n"
           "sleep 0.2\n"
           "echo done $SYMM_RANK\n",
           dir, escape, dir);
  write_file(dir, "rank.sh", script, 0644);
  uint64_t ms;
  rc = run_fmt(out, &ms, "%s -p -n 2 sh %s/rank.sh", test_tool_path("symmem-run"), dir);
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "[0] done 0");
  ASSERT_STR_CONTAINS(out, "[1] done 1");
  ASSERT_LT(ms, 5000);
  const char *names[] = {"bg.0", "bg.1", "esc.0", "esc.1"};
  assert_all_gone(dir, names, 4, 3000);
  remove_temp_dir(dir);
  free(out);
  return 0;
}

TEST_IMPL(launcher_sigterm) {
  char *dir = make_temp_dir();
  char script[1024], out_path[256], *out = malloc(OUT_CAP);
  /* The nested shell hears SIGTERM only if its rank's whole process group
   * is signalled; its parent does not pass the signal on. */
  snprintf(script, sizeof script,
           "d=%s\n"
           "trap 'echo trapped $SYMM_RANK; exit 5' TERM\n"
           "sh -c 'trap \"echo grandchild-term $SYMM_RANK; exit 0\" TERM; "
           "echo $$ > %s/gc.$SYMM_RANK; sleep 30 & wait' &\n"
           "sleep 30 &\n"
           "echo $! > $d/bg.$SYMM_RANK\n"
           "echo $$ > $d/sh.$SYMM_RANK\n"
           "wait\n",
           dir, dir);
  const char *names[] = {"sh.0", "sh.1", "gc.0", "gc.1", "bg.0", "bg.1"};
  pid_t pid = spawn_two_shell_ranks(dir, script, out_path, sizeof out_path, names, 4);
  uint64_t ms;
  ASSERT_EQ(signal_and_wait(pid, SIGTERM, out_path, out, &ms), 128 + SIGTERM);
  ASSERT_LT(ms, 5000);
  ASSERT_STR_CONTAINS(out, "forwarding");
  ASSERT_STR_CONTAINS(out, "trapped 0");
  ASSERT_STR_CONTAINS(out, "trapped 1");
  ASSERT_STR_CONTAINS(out, "grandchild-term 0");
  ASSERT_STR_CONTAINS(out, "grandchild-term 1");
  assert_all_gone(dir, names, 6, 3000);
  remove_temp_dir(dir);
  free(out);
  return 0;
}

/* SIGHUP (the terminal went away) is forwarded like SIGTERM: the ranks hear
 * it, and symmem-run exits 128 + SIGHUP.  The ranks exit 0 from the trap: a
 * rank that exited non-zero first would have the others SIGTERMed before
 * their trap printed. */
TEST_IMPL(launcher_sighup) {
  char *dir = make_temp_dir();
  char script[512], out_path[256], *out = malloc(OUT_CAP);
  snprintf(script, sizeof script,
           "trap 'echo hup $SYMM_RANK; exit 0' HUP\n"
           "echo $$ > %s/sh.$SYMM_RANK\n"
           "sleep 30 & wait\n",
           dir);
  pid_t pid = spawn_two_shell_ranks(dir, script, out_path, sizeof out_path, NULL, 0);
  uint64_t ms;
  ASSERT_EQ(signal_and_wait(pid, SIGHUP, out_path, out, &ms), 128 + SIGHUP);
  ASSERT_STR_CONTAINS(out, "got SIGHUP; forwarding it");
  ASSERT_STR_CONTAINS(out, "hup 0");
  ASSERT_STR_CONTAINS(out, "hup 1");
  remove_temp_dir(dir);
  free(out);
  return 0;
}

/* SIGUSR1 (Slurm's --signal=USR1@T checkpoint warning) and SIGUSR2 reach
 * every rank and do not end the job: ranks that trap them go on and exit 0,
 * and so does symmem-run.  Left at their default these signals killed the
 * launcher and, through PR_SET_PDEATHSIG, every rank. */
TEST_IMPL(launcher_sigusr) {
  char *dir = make_temp_dir();
  char script[512], out_path[256], *out = malloc(OUT_CAP);
  snprintf(script, sizeof script,
           "trap 'echo usr1 $SYMM_RANK; got1=1' USR1\n"
           "trap 'echo usr2 $SYMM_RANK; got2=1' USR2\n"
           "echo $$ > %s/sh.$SYMM_RANK\n"
           "n=0\n"
           "while [ -z \"$got1\" ] || [ -z \"$got2\" ]; do\n"
           "  n=$((n + 1)); [ $n -gt 200 ] && exit 7\n"
           "  sleep 0.05\n"
           "done\n"
           "echo done $SYMM_RANK\n",
           dir);
  pid_t pid = spawn_two_shell_ranks(dir, script, out_path, sizeof out_path, NULL, 0);
  ASSERT_EQ(kill(pid, SIGUSR1), 0);
  wait_both_ranks_said(out_path, out, "usr1");
  int st;
  ASSERT_EQ(waitpid(pid, &st, WNOHANG), 0); /* the launcher is still there */
  uint64_t ms;
  ASSERT_EQ(signal_and_wait(pid, SIGUSR2, out_path, out, &ms), 0);
  ASSERT_STR_CONTAINS(out, "got SIGUSR1; forwarding it");
  ASSERT_STR_CONTAINS(out, "got SIGUSR2; forwarding it");
  ASSERT_EQ(count_occurrences(out, "usr1 0"), 1);
  ASSERT_EQ(count_occurrences(out, "usr1 1"), 1);
  ASSERT_EQ(count_occurrences(out, "usr2 0"), 1);
  ASSERT_EQ(count_occurrences(out, "usr2 1"), 1);
  ASSERT_STR_CONTAINS(out, "done 0");
  ASSERT_STR_CONTAINS(out, "done 1");
  remove_temp_dir(dir);
  free(out);
  return 0;
}

/* --port: the store listens where it is told and the ranks are told so; a
 * port already taken is refused with a message that names it. */
TEST_IMPL(launcher_port) {
  char *out = malloc(OUT_CAP);
  int port = test_free_port();
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = run_fmt(out, NULL, "%s -n 2 --port %d -- sh -c 'echo addr $SYMM_STORE_ADDR'",
                   test_tool_path("symmem-run"), port);
  ASSERT_EQ(rc, 0);
  char want[64];
  snprintf(want, sizeof want, "addr 127.0.0.1:%d", port);
  ASSERT_EQ(count_occurrences(out, want), 2);
  /* Taken: a listener of ours holds it. */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(s >= 0);
  ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)), 0);
  ASSERT_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(s, 1), 0);
  rc = run_fmt(out, NULL, "%s -n 1 --port %d -- true", test_tool_path("symmem-run"), port);
  close(s);
  ASSERT(rc != 0);
  snprintf(want, sizeof want, "%d", port);
  ASSERT_STR_CONTAINS(out, want);
  free(out);
  return 0;
}

TEST_IMPL(launcher_sigint_twice) {
  char *dir = make_temp_dir();
  char script[1024], out_path[256], *out = malloc(OUT_CAP);
  /* Ranks that shrug off SIGINT: the first one is only forwarded, the
   * second one must kill them. */
  snprintf(script, sizeof script,
           "trap 'echo got-int $SYMM_RANK' INT\n"
           "echo $$ > %s/sh.$SYMM_RANK\n"
           "while :; do sleep 0.1; done\n",
           dir);
  pid_t pid = spawn_two_shell_ranks(dir, script, out_path, sizeof out_path, NULL, 0);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  wait_both_ranks_said(out_path, out, "got-int");
  ASSERT_STR_CONTAINS(out, "got-int 0");
  ASSERT_STR_CONTAINS(out, "got-int 1");
  int st;
  ASSERT_EQ(waitpid(pid, &st, WNOHANG), 0); /* still running after one */
  uint64_t ms;
  ASSERT_EQ(signal_and_wait(pid, SIGINT, out_path, out, &ms), 128 + SIGINT);
  ASSERT_LT(ms, 5000);
  ASSERT_STR_CONTAINS(out, "killing");
  const char *names[] = {"sh.0", "sh.1"};
  assert_all_gone(dir, names, 2, 3000);
  remove_temp_dir(dir);
  free(out);
  return 0;
}

TEST_IMPL(launcher_timeout) {
  char *out = malloc(OUT_CAP);
  uint64_t ms;
  int rc = run_fmt(out, &ms, "%s --timeout 1 -n 2 sleep 30", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 124);
  ASSERT_STR_CONTAINS(out, "timeout");
  ASSERT_GE(ms, 900);
  ASSERT_LT(ms, 6000);
  /* Ranks ignoring SIGTERM are killed after the grace period. */
  rc = run_fmt(out, &ms, "%s --timeout 0.5 -n 2 sh -c 'trap \"\" TERM; sleep 30'",
               test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 124);
  ASSERT_STR_CONTAINS(out, "killing");
  ASSERT_LT(ms, 8000);
  free(out);
  return 0;
}

TEST_IMPL(launcher_usage) {
  char *out = malloc(OUT_CAP);
  static const char *const bad[] = {
      "",          "true",          "-n 0 true",           "-n 4097 true",
      "-n abc true", "-n 2",        "--bogus -n 1 true",   "-n 1 --port 70000 true",
      "-n 1 --timeout -1 true",     "-n 1 --timeout x true", "-n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = run_fmt(out, NULL, "%s %s", test_tool_path("symmem-run"), bad[i]);
    ASSERT_EQ(rc, 2);
    ASSERT_STR_CONTAINS(out, "usage: symmem-run");
    ASSERT_STR_CONTAINS(out, "symmem-run: "); /* a message saying what is wrong */
  }
  int rc = run_fmt(out, NULL, "%s --help", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "usage: symmem-run");
  rc = run_fmt(out, NULL, "%s --version", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", SYMM_VERSION_MAJOR, SYMM_VERSION_MINOR,
           SYMM_VERSION_PATCH);
  ASSERT_STR_CONTAINS(out, version);
  /* Options after PROGRAM belong to it; "--" ends ours. */
  rc = run_fmt(out, NULL, "%s -n 1 -- sh -c 'echo args: $0 $1' x -n",
               test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "args: x -n");
  rc = run_fmt(out, NULL, "%s --np=2 sh -c 'echo long-np-ok'", test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(count_occurrences(out, "long-np-ok"), 2);
  free(out);
  return 0;
}

TEST_IMPL(launcher_exec_fail) {
  char *out = malloc(OUT_CAP);
  char *dir = make_temp_dir();
  int rc = run_fmt(out, NULL, "%s -n 2 /nonexistent/symm-no-such-program",
                   test_tool_path("symmem-run"));
  ASSERT_EQ(rc, 127);
  ASSERT_STR_CONTAINS(out, "cannot execute");
  ASSERT_STR_CONTAINS(out, "symm-no-such-program");
  ASSERT_EQ(count_occurrences(out, "cannot execute"), 1);
  write_file(dir, "not-executable", "echo hi\n", 0644);
  rc = run_fmt(out, NULL, "%s -n 2 %s/not-executable", test_tool_path("symmem-run"), dir);
  ASSERT_EQ(rc, 126);
  ASSERT_STR_CONTAINS(out, "cannot execute");
  remove_temp_dir(dir);
  free(out);
  return 0;
}

TEST_IMPL(launcher_store) {
  /* Built with the tests (tests/progs): missing means a broken build. */
  ASSERT_EQ(access(store_check_path(), X_OK), 0);
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "%s -n 3 %s", test_tool_path("symmem-run"), store_check_path());
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(count_occurrences(out, "store ok rank"), 3);
  /* The store checks the token symmem-run made. */
  rc = run_fmt(out, NULL, "%s -n 2 %s --wrong-token", test_tool_path("symmem-run"),
               store_check_path());
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(count_occurrences(out, "token refused ok"), 2);
  /* --bind with an explicit port. */
  rc = run_fmt(out, NULL, "%s --bind 0.0.0.0 -n 2 %s", test_tool_path("symmem-run"),
               store_check_path());
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(count_occurrences(out, "store ok rank"), 2);
  free(out);
  return 0;
}

TEST_IMPL(launcher_peer_lost) {
  /* Built with the tests (tests/progs): missing means a broken build. */
  ASSERT_EQ(access(store_check_path(), X_OK), 0);
  char *out = malloc(OUT_CAP);
  uint64_t ms;
  /* Rank 1 leaves the store cleanly and exits 3: only symmem-run's
   * mark_lost can wake rank 0, which waits with a 20 s timeout. */
  int rc = run_fmt(out, &ms, "%s -n 2 %s --peer-lost", test_tool_path("symmem-run"),
                   store_check_path());
  ASSERT_EQ(rc, 3);
  ASSERT_STR_CONTAINS(out, "peer lost ok");
  ASSERT_STR_CONTAINS(out, "rank 1 (pid ");
  ASSERT_LT(ms, 10000);
  free(out);
  return 0;
}

/* ----------------------------------------------------------- symmem-info */

/* The report line of backend `name`: "  name   available" or
 * "  name   unavailable: reason". */
static void check_backend_line(const char *out, const char *name) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "\n  %s ", name);
  const char *line = strstr(out, prefix);
  if (!line) TEST_FAIL_("no line for backend %s", name);
  line += strlen(prefix);
  while (*line == ' ') line++;
  if (!strncmp(line, "available", 9)) return;
  if (strncmp(line, "unavailable: ", 13) != 0) TEST_FAIL_("backend %s: bad line", name);
  line += 13;
  ASSERT(*line != '\n' && *line != ' ' && *line != 0); /* a reason is given */
}

TEST_IMPL(launcher_info) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "env -u SYMM_BACKEND SYMM_TIMOUT_MS=5 SYMM_TIMEOUT_MS=7 %s",
                   test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  char version[32];
  snprintf(version, sizeof version, "symmem %d.%d.%d", SYMM_VERSION_MAJOR, SYMM_VERSION_MINOR,
           SYMM_VERSION_PATCH);
  ASSERT_STR_CONTAINS(out, version);
  static const char *const names[] = {"host", "native", "cuda", "nccl", "nvshmem"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_backend_line(out, names[i]);
  ASSERT_STR_CONTAINS(out, "multicast: ");
  ASSERT_STR_CONTAINS(out, "SYMM_TIMEOUT_MS=7");
  ASSERT_STR_CONTAINS(out, "SYMM_TIMOUT_MS=5  (not a symmem setting");
  free(out);
  return 0;
}

TEST_IMPL(launcher_info_env) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "SYMM_TIMEOUT_MS=1234 %s --env", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "SYMM_TIMEOUT_MS (int, default 60000)");
  ASSERT_STR_CONTAINS(out, "current value: 1234");
  /* An empty default reads as none, like a missing one (not "default )"). */
  ASSERT_STR_CONTAINS(out, "SYMM_COLL_KERNELS (string, default unset)");
  ASSERT(strstr(out, "default )") == NULL);
  size_t n = 0;
  const symm_setting_desc_t *table = symm_settings_table(&n);
  ASSERT_GT(n, 0);
  for (size_t i = 0; i < n; i++) {
    char head[128];
    snprintf(head, sizeof head, "%s (", table[i].name);
    ASSERT_STR_CONTAINS(out, head);
    ASSERT_STR_CONTAINS(out, table[i].help);
  }
  rc = run_fmt(out, NULL, "SYMM_TIMEOUT_MS=soon %s --env", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "current value: soon (not an integer)");
  free(out);
  return 0;
}

/* The job's token is a secret: symmem-info says it is set, in every output
 * form, and never prints it (a job's log would leak it). */
TEST_IMPL(launcher_info_hides_token) {
  char *out = malloc(OUT_CAP);
  static const char *const forms[] = {"", "--env", "--json"};
  for (int k = 0; k < 3; k++) {
    int rc = run_fmt(out, NULL, "SYMM_TOKEN=tok3n-s3cret-42 %s %s", test_tool_path("symmem-info"),
                     forms[k]);
    ASSERT_EQ(rc, 0);
    if (strstr(out, "tok3n-s3cret-42")) TEST_FAIL_("symmem-info %s printed the token", forms[k]);
    ASSERT_STR_CONTAINS(out, "(set; hidden: a secret)");
    /* A listed setting is not followed by "none are set". */
    if (k == 0 && strstr(out, "(none; defaults apply")) TEST_FAIL_("'(none' after a setting");
  }
  /* Without any SYMM_ variable, the report says so. */
  int rc = run_fmt(out, NULL, "env -i PATH=/usr/bin:/bin %s", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "(none; defaults apply");
  free(out);
  return 0;
}

TEST_IMPL(launcher_info_bogus_backend) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "SYMM_BACKEND=bogus %s", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 1);
  ASSERT_STR_CONTAINS(out, "backends");  /* the report is still printed */
  const char *err = strstr(out, "error: SYMM_BACKEND");
  ASSERT(err != NULL);
  ASSERT_STR_CONTAINS(err, "bogus");
  ASSERT_STR_CONTAINS(err, "host");
  ASSERT_STR_CONTAINS(err, "native");
  /* A valid name, any case, is fine. */
  rc = run_fmt(out, NULL, "SYMM_BACKEND=HOST %s", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "backend choice: SYMM_BACKEND=HOST");
  free(out);
  return 0;
}

TEST_IMPL(launcher_info_multicast) {
  char *out = malloc(OUT_CAP);
  const char *clean = "env -u NCCL_NVLS_ENABLE -u TORCH_SYMM_MEM_DISABLE_MULTICAST "
                      "-u NVSHMEM_DISABLE_NVLS";
  int rc = run_fmt(out, NULL, "%s %s", clean, test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "multicast: off (symmem never creates");
  rc = run_fmt(out, NULL, "%s NCCL_NVLS_ENABLE=0 %s", clean, test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "NCCL_NVLS_ENABLE=0 is set");
  free(out);
  return 0;
}


TEST_IMPL(launcher_info_json) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "env -u SYMM_BACKEND SYMM_TIMEOUT_MS=42 %s --json",
                   test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  test_assert_json_shape(out);
  ASSERT_STR_CONTAINS(out, "\"backends\":[");
  static const char *const names[] = {"host", "native", "cuda", "nccl", "nvshmem"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "{\"name\":\"%s\"", names[i]);
    ASSERT_STR_CONTAINS(out, want);
  }
  ASSERT_STR_CONTAINS(out, "{\"name\":\"SYMM_TIMEOUT_MS\",\"type\":\"int\",\"default\":\"60000\","
                           "\"value\":\"42\"");
  ASSERT_STR_CONTAINS(out, "\"multicast\":{\"allowed\":");
  ASSERT_STR_CONTAINS(out, "{\"name\":\"SYMM_COLL_KERNELS\",\"type\":\"string\",\"default\":null,");
  free(out);
  return 0;
}

TEST_IMPL(launcher_info_usage) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, NULL, "%s --bogus", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "usage: symmem-info");
  rc = run_fmt(out, NULL, "%s extra", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "unexpected argument");
  rc = run_fmt(out, NULL, "%s --help", test_tool_path("symmem-info"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "--env");
  free(out);
  return 0;
}

/* The CPUs this process may run on; 0 (after a SKIP line) when fewer than
 * the 2 that binding needs. */
static int cpus_to_bind(void) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  const int cpus = CPU_COUNT(&mine);
  if (cpus >= 2) return cpus;
  printf("SKIP: this process may run on %d CPU; binding needs 2\n", cpus);
  return 0;
}

/* --bind-to: with a core per rank each rank runs on one core of its own
 * (the ranks see it in their affinity and the library reports it), none
 * leaves them on all of symmem-run's CPUs, core with too few cores and a
 * bad value are usage errors; -v says the choice and each rank's CPUs. */
TEST_IMPL(launcher_bind_to) {
  const int cpus = cpus_to_bind();
  if (!cpus) return TEST_SKIP;
  char *out = malloc(OUT_CAP);
  ASSERT(out);
  const char *run = test_tool_path("symmem-run"), *info = test_tool_path("symmem-info");
  ASSERT_EQ(run_fmt(out, NULL, "%s -v -n 2 --bind-to core -- sh -c 'taskset -pc $$; %s | grep "
                    "^binding'", run, info), 0);
  ASSERT_STR_CONTAINS(out, "symmem-run: binding core: 2 ranks");
  ASSERT_STR_CONTAINS(out, "symmem-run: rank 0: cpus ");
  ASSERT_EQ(count_occurrences(out, "(bound: "), 2);
  /* Two different single-core lists: "current affinity list: N". */
  int got[2] = {-1, -1}, n = 0;
  for (const char *p = strstr(out, "affinity list: "); p && n < 2;
       p = strstr(p + 1, "affinity list: "))
    got[n++] = atoi(p + strlen("affinity list: "));
  ASSERT_EQ(n, 2);
  ASSERT_NE(got[0], got[1]);
  ASSERT_EQ(run_fmt(out, NULL, "%s -v -n 2 --bind-to none -- %s", run, info), 0);
  ASSERT_EQ(count_occurrences(out, "not bound"), 2 + 2); /* -v's lines, symmem-info's */
  ASSERT_EQ(run_fmt(out, NULL, "%s -n %d --bind-to core -- true", run, cpus + 1), 2);
  ASSERT_STR_CONTAINS(out, "needs a core per rank");
  ASSERT_EQ(run_fmt(out, NULL, "%s -v -n %d -- true", run, cpus + 1), 0);
  ASSERT_STR_CONTAINS(out, "(default: more ranks than cores)");
  ASSERT_EQ(run_fmt(out, NULL, "%s -n 1 --bind-to socket -- true", run), 2);
  ASSERT_STR_CONTAINS(out, "--bind-to takes core, numa or none");
  ASSERT_EQ(run_fmt(out, NULL, "%s -v -n 3 --bind-to numa -- true", run), 0);
  ASSERT_STR_CONTAINS(out, "binding numa: 3 ranks");
  free(out);
  return 0;
}

/* The CPU engine's waits spin while the host's ranks have a CPU each among
 * the CPUs they run on together (ranks bound a core each included, though
 * each sees one CPU), yield at once with more ranks than that, and sleep
 * with more than 4 ranks a CPU. */
TEST_IMPL(launcher_bind_spin) {
  const int cpus = cpus_to_bind();
  if (!cpus) return TEST_SKIP;
  char *out = malloc(OUT_CAP);
  ASSERT(out);
  const char *run = test_tool_path("symmem-run"), *bench = test_tool_path("symmem-bench");
  ASSERT_EQ(run_fmt(out, NULL, "SYMM_DEBUG=INFO %s -n 2 --bind-to core -- %s -b 8 -e 8 -n 1 -w 0",
                    run, bench), 0);
  ASSERT_EQ(count_occurrences(out, "CPUs here: waits spin, then yield"), 2);
  ASSERT_EQ(run_fmt(out, NULL, "SYMM_DEBUG=INFO %s -n %d --bind-to none -- %s -b 8 -e 8 -n 1 "
                    "-w 0", run, cpus + 1, bench), 0);
  ASSERT_EQ(count_occurrences(out, "CPUs here: waits yield at once"), cpus + 1);
  ASSERT_EQ(run_fmt(out, NULL, "SYMM_DEBUG=INFO %s -n %d --bind-to none -- %s -b 8 -e 8 -n 1 "
                    "-w 0", run, 4 * cpus + 1, bench), 0);
  ASSERT_EQ(count_occurrences(out, "CPUs here: waits sleep"), 4 * cpus + 1);
  free(out);
  return 0;
}
