/* Result codes, and where errors are logged: the line that raises an error
 * names its own file:line (never error.c) with the message, the checks on
 * the way up add one "-> CODE" line each with their own place, and the
 * message a caller reads from symm_last_error() carries no location.  Each
 * test reads the real log of a real failing call (SYMM_DEBUG_FILE). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "backends/util/fd_exchange.h"
#include "symm_test_access.h" /* a communicator of its own, the registry */
#include "harness.h"

TEST_IMPL(errors_strerror) {
  ASSERT_STR_CONTAINS(symm_strerror(SYMM_SUCCESS), "success");
  ASSERT_STR_CONTAINS(symm_strerror(SYMM_ERR_MISMATCH), "mismatch");
  ASSERT_STR_CONTAINS(symm_strerror(SYMM_ERR_BACKEND_UNAVAILABLE), "backend unavailable");
  ASSERT_STR_CONTAINS(symm_strerror((symm_result_t)999), "unknown");
  ASSERT_EQ(symm_version(), SYMM_VERSION_CODE);
  ASSERT(strcmp(symm_result_name(SYMM_ERR_TIMEOUT), "SYMM_ERR_TIMEOUT") == 0);
  ASSERT(strcmp(symm_result_name(SYMM_SUCCESS), "SYMM_SUCCESS") == 0);
  ASSERT(symm_result_name((symm_result_t)999) == NULL);
  return 0;
}

/* ------------------------------------------------------------- helpers */

static char log_path[64];
static char log_text[64 << 10];

/* Sends this process's log to a file of its own; before the first log
 * call, which reads the settings once. */
static void log_to_file(const char *level, const char *subsys) {
  snprintf(log_path, sizeof log_path, "/tmp/symm-errors-%d.log", (int)getpid());
  unlink(log_path);
  setenv("SYMM_DEBUG", level, 1);
  if (subsys) setenv("SYMM_DEBUG_SUBSYS", subsys, 1);
  else unsetenv("SYMM_DEBUG_SUBSYS");
  setenv("SYMM_DEBUG_FILE", log_path, 1);
}

/* The log so far (every line is flushed as it is written). */
static const char *log_read(void) {
  FILE *f = fopen(log_path, "r");
  ASSERT(f != NULL);
  size_t n = fread(log_text, 1, sizeof log_text - 1, f);
  log_text[n] = 0;
  fclose(f);
  return log_text;
}

static void log_remove(void) { unlink(log_path); }

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The line of text holding `at` (copied into line). */
static void line_around(const char *text, const char *at, char *line, size_t cap) {
  const char *b = at;
  while (b > text && b[-1] != '\n') b--;
  const char *e = strchr(at, '\n');
  size_t len = e ? (size_t)(e - b) : strlen(b);
  if (len >= cap) len = cap - 1;
  memcpy(line, b, len);
  line[len] = 0;
}

/* The file name and line of a log line ("... symm INFO name.c:123 ..."). */
static void line_origin(const char *line, char *file, size_t cap, int *lineno) {
  const char *p = strstr(line, " symm ");
  ASSERT(p != NULL);
  p = strchr(p + 6, ' '); /* past the level */
  ASSERT(p != NULL);
  p++;
  const char *colon = strchr(p, ':');
  ASSERT(colon != NULL && (size_t)(colon - p) < cap);
  memcpy(file, p, (size_t)(colon - p));
  file[colon - p] = 0;
  *lineno = atoi(colon + 1);
}

/* Asserts the one line that raised `code` with `message`: from a file of
 * the library named `file` (any file but error.c when NULL) and a line > 0.
 * Returns where that line starts in text. */
static const char *assert_raised(const char *text, symm_result_t code, const char *message,
                                 const char *file) {
  char want[1400], line[1600], name[64];
  snprintf(want, sizeof want, "error %s: %s\n", symm_result_name(code), message);
  ASSERT_EQ(count_of(text, message), 1); /* the message once, however deep */
  const char *at = strstr(text, want);
  if (!at) TEST_FAIL_("no line \"%s\" in the log:\n%s", want, text);
  line_around(text, at, line, sizeof line);
  int lineno = 0;
  line_origin(line, name, sizeof name, &lineno);
  ASSERT(strcmp(name, "error.c") != 0);
  if (file && strcmp(name, file) != 0) TEST_FAIL_("raised in %s, not %s: %s", name, file, line);
  ASSERT_GT(lineno, 0);
  while (at > text && at[-1] != '\n') at--;
  return at;
}

/* ------------------------------------------------------- fd exchange */

static void errors_job(char *job, size_t cap) {
  unsigned char rnd[4];
  symm_random_bytes(rnd, sizeof rnd);
  snprintf(job, cap, "err%d-%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1], rnd[2], rnd[3]);
}

/* An fd exchange on a test communicator, which it asks about lost ranks
 * while it waits: *comm is freed after symm_fdx_stop (errors_fdx_stop). */
static symm_fdx_t *errors_fdx(int rank, int size, int timeout_ms, symm_comm_t **comm) {
  char job[64];
  errors_job(job, sizeof job);
  *comm = symm_test_comm_new(&(symm_test_comm_opts_t){
      .job_id = job, .rank = rank, .size = size, .timeout_ms = timeout_ms});
  ASSERT(*comm != NULL);
  symm_fdx_t *fdx = NULL;
  ASSERT_OK(symm_fdx_start(*comm, &fdx));
  return fdx;
}

static void errors_fdx_stop(symm_fdx_t *fdx, symm_comm_t *comm) {
  symm_fdx_stop(fdx);
  symm_test_comm_free(comm);
}

/* Two levels of checks of this file above the fd exchange's own; each
 * notes the line of its check. */
static int check_lines[2];

static symm_result_t fetch_inner(symm_fdx_t *fdx, int peer, int *fd) {
  check_lines[0] = __LINE__ + 1;
  SYMM_CHECK(symm_fdx_fetch(fdx, peer, 5, fd));
  return SYMM_SUCCESS;
}

static symm_result_t fetch_outer(symm_fdx_t *fdx, int peer, int *fd) {
  symm_result_t res = SYMM_SUCCESS;
  check_lines[1] = __LINE__ + 1;
  SYMM_CHECK_GOTO(fetch_inner(fdx, peer, fd), res, out);
out:
  return res;
}

/* A fetch from a rank whose server never comes: the fd exchange raises
 * the timeout (one line, its file:line, the message), then the trail is
 * the fd exchange's check and this file's two, each "-> CODE" at its own
 * line, in that order, without the message. */
TEST_IMPL(errors_origin_trail) {
  log_to_file("INFO", NULL);
  symm_comm_t *fdx_comm = NULL;
  symm_fdx_t *fdx = errors_fdx(0, 2, 100, &fdx_comm);
  int fd = -1;
  symm_result_t res = fetch_outer(fdx, 1, &fd);
  ASSERT(res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST);
  char message[1024];
  snprintf(message, sizeof message, "%s", symm_last_error());
  ASSERT_STR_CONTAINS(message, "rank 1");
  ASSERT(strstr(message, ".c:") == NULL); /* no location in the message */
  const char *text = log_read();
  const char *at = assert_raised(text, res, message, "fd_exchange.c");

  char arrow[64], line[256], raised[256], file[64];
  snprintf(arrow, sizeof arrow, " -> %s\n", symm_result_name(res));
  line_around(text, at, raised, sizeof raised);
  const char *want_file[] = {"fd_exchange.c", "test-errors.c", "test-errors.c"};
  int fdx_line = 0;
  for (int i = 0; i < 3; i++) {
    at = strstr(at + 1, arrow);
    if (!at) TEST_FAIL_("trail line %d missing after \"%s\":\n%s", i, raised, text);
    line_around(text, at, line, sizeof line);
    int lineno = 0;
    line_origin(line, file, sizeof file, &lineno);
    if (strcmp(file, want_file[i]) != 0) TEST_FAIL_("trail line %d from %s: %s", i, file, line);
    ASSERT(strstr(line, " INFO ") != NULL);
    if (i == 0) fdx_line = lineno;
    else ASSERT_EQ(lineno, check_lines[i - 1]);
  }
  /* The fd exchange's check is not where the error arose. */
  int raised_line = 0;
  line_origin(raised, file, sizeof file, &raised_line);
  ASSERT_NE(fdx_line, raised_line);
  ASSERT_EQ(count_of(text, arrow), 3);
  errors_fdx_stop(fdx, fdx_comm);
  log_remove();
  return 0;
}

/* The system-call check: fcntl on an fd that is not open fails in the fd
 * exchange's publish; the last error is the message as written there plus
 * strerror, the log line is publish's. */
TEST_IMPL(errors_syscheck_origin) {
  log_to_file("INFO", NULL);
  symm_comm_t *fdx_comm = NULL;
  symm_fdx_t *fdx = errors_fdx(0, 1, 1000, &fdx_comm);
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(close(fd), 0); /* a number that is not open now */
  ASSERT_RES(symm_fdx_publish(fdx, 7, fd), SYMM_ERR_SYSTEM);
  char want[256];
  snprintf(want, sizeof want, "fd server: dup of fd %d for id 7: %s", fd, strerror(EBADF));
  if (strcmp(symm_last_error(), want) != 0)
    TEST_FAIL_("last error \"%s\", expected \"%s\"", symm_last_error(), want);
  assert_raised(log_read(), SYMM_ERR_SYSTEM, want, "fd_exchange.c");
  ASSERT_EQ(symm_fdx_published(fdx), 0);
  errors_fdx_stop(fdx, fdx_comm);
  log_remove();
  return 0;
}

/* A bad argument to symm_comm_init: the public call's last error is the
 * message exactly, and its log line and trail are the library's own files. */
TEST_IMPL(errors_comm_init_origin) {
  log_to_file("INFO", NULL);
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.rank = 3;
  cfg.world_size = 2;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
  const char *want = "symm_comm_init: rank 3 out of range for world size 2 (set both in the "
                     "config or in the environment, e.g. with symmem-run)";
  if (strcmp(symm_last_error(), want) != 0)
    TEST_FAIL_("last error \"%s\", expected \"%s\"", symm_last_error(), want);
  const char *text = log_read();
  const char *at = assert_raised(text, SYMM_ERR_INVALID_ARG, want, NULL);
  ASSERT(strstr(at, " -> SYMM_ERR_INVALID_ARG\n") != NULL);
  ASSERT(strstr(text, " error.c:") == NULL);
  log_remove();
  return 0;
}

/* Lines go under the raising file's subsystem: with only INIT selected,
 * the fd exchange's (BACKEND) lines are left out and this file's trail
 * (ALL) stays; an internal error is a WARN line whatever is selected. */
TEST_IMPL(errors_subsystem) {
  log_to_file("INFO", "INIT");
  symm_comm_t *fdx_comm = NULL;
  symm_fdx_t *fdx = errors_fdx(0, 2, 1000, &fdx_comm);
  int fd = -1;
  ASSERT_RES(fetch_outer(fdx, 5, &fd), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 5 out of range");
  ASSERT_RES(symm_registry_add(NULL, 0, NULL, 0), SYMM_ERR_INTERNAL);
  ASSERT(strcmp(symm_last_error(), "registry: empty range") == 0);
  const char *text = log_read();
  ASSERT(strstr(text, "fd_exchange.c") == NULL);
  ASSERT(strstr(text, "rank 5 out of range") == NULL);
  ASSERT_EQ(count_of(text, " -> SYMM_ERR_INVALID_ARG\n"), 2);
  const char *at = strstr(text, "error SYMM_ERR_INTERNAL: registry: empty range\n");
  ASSERT(at != NULL);
  char line[256], file[64];
  int lineno = 0;
  line_around(text, at, line, sizeof line);
  ASSERT_STR_CONTAINS(line, " symm WARN registry.c:");
  line_origin(line, file, sizeof file, &lineno);
  ASSERT_GT(lineno, 0);
  errors_fdx_stop(fdx, fdx_comm);
  log_remove();
  return 0;
}
