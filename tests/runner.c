/* Test runner: `symm-tests NAME` runs one test (ctest runs each in its own
 * process with a timeout); `symm-tests --list` prints the names; with no
 * argument every test runs in turn, each in a child process, and the runner
 * prints "N passed, N failed, N skipped".  Either way a test that outlives
 * the timeout of its TEST_ENTRY is ended by SIGALRM (the harness's jobs end
 * their ranks 5 s before).
 *
 * Built with TEST_LIST naming another list (default test-list.h) and
 * TEST_RANKS defined, it is a rank program (the GPU tests): see run_rank. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#ifndef TEST_LIST
#define TEST_LIST "test-list.h"
#endif

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include TEST_LIST
#undef TEST_ENTRY

typedef struct {
  const char *name;
  int (*fn)(void);
  int timeout_s;
} test_entry_t;

static const test_entry_t tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name, timeout},
#include TEST_LIST
#undef TEST_ENTRY
};
static const size_t n_tests = sizeof(tests) / sizeof(tests[0]);

static int run_one(const test_entry_t *t) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_timeout_s = t->timeout_s;
  alarm((unsigned)t->timeout_s);
  int rc = t->fn();
  fflush(stdout);
  fflush(stderr);
  return rc;
}

static const test_entry_t *find_test(const char *name) {
  for (size_t i = 0; i < n_tests; i++)
    if (strcmp(name, tests[i].name) == 0) return &tests[i];
  fprintf(stderr, "no test named %s (see --list)\n", name);
  return NULL;
}

#ifdef TEST_RANKS
/* Rank mode.  This process is one rank of a job (symmem-run -n N -- PROG
 * [NAME...]): every rank runs the named tests (default: all, in list order)
 * in this process, in the same order, since their collective calls must
 * meet and they share the rank's communicator (a forked child could not
 * make another on the same store).  Each test prints "rank R: ok|skip|FAIL
 * NAME (N checks)", the rank "rank R: N passed, N failed, N skipped, N
 * checks" at the end.  A failed ASSERT aborts the rank and a test past its
 * timeout is ended by SIGALRM, each after a "rank R: FAIL NAME" line;
 * symmem-run then stops the other ranks.  Exit status: 1 if a test failed,
 * TEST_SKIP if every test skipped, else 0. */
static char abort_line[256], alarm_line[256];

static void on_fatal_signal(int sig) {
  const char *line = sig == SIGALRM ? alarm_line : abort_line;
  if (write(STDOUT_FILENO, line, strlen(line)) < 0) {
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static int run_rank(int argc, char **argv) {
  const test_entry_t **chosen = calloc(n_tests + (size_t)argc, sizeof *chosen);
  size_t n = 0;
  if (!chosen) return 2;
  for (int i = 1; i < argc; i++)
    if (!(chosen[n++] = find_test(argv[i]))) return 2;
  if (argc == 1)
    for (size_t i = 0; i < n_tests; i++) chosen[n++] = &tests[i];
  const char *rank_env = getenv("SYMM_RANK");
  int rank = rank_env ? atoi(rank_env) : 0;
  signal(SIGABRT, on_fatal_signal);
  signal(SIGALRM, on_fatal_signal);
  int passed = 0, failed = 0, skipped = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned long checks0 = test_checks;
    snprintf(abort_line, sizeof abort_line, "rank %d: FAIL %s (aborted)\n", rank,
             chosen[i]->name);
    snprintf(alarm_line, sizeof alarm_line, "rank %d: FAIL %s (past its timeout, %d s)\n",
             rank, chosen[i]->name, chosen[i]->timeout_s);
    int code = run_one(chosen[i]);
    alarm(0);
    const char *verdict = code == 0 ? "ok" : code == TEST_SKIP ? "skip" : "FAIL";
    printf("rank %d: %-4s %s (%lu checks)\n", rank, verdict, chosen[i]->name,
           test_checks - checks0);
    if (code == 0) passed++;
    else if (code == TEST_SKIP) skipped++;
    else failed++;
  }
  printf("rank %d: %d passed, %d failed, %d skipped, %lu checks\n", rank, passed, failed,
         skipped, test_checks);
  fflush(stdout);
  free(chosen);
  return failed ? 1 : passed == 0 ? TEST_SKIP : 0;
}
#endif

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n_tests; i++) printf("%s\n", tests[i].name);
    return 0;
  }
#ifdef TEST_RANKS
  return run_rank(argc, argv);
#else
  if (argc > 1) {
    const test_entry_t *t = find_test(argv[1]);
    return t ? run_one(t) : 2;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (size_t i = 0; i < n_tests; i++) {
    pid_t pid = fork();
    if (pid == 0) _exit(run_one(&tests[i]));
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    const char *verdict = code == 0 ? "ok" : code == TEST_SKIP ? "skip" : "FAIL";
    printf("%-4s %s\n", verdict, tests[i].name);
    if (code == 0) passed++;
    else if (code == TEST_SKIP) skipped++;
    else failed++;
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
#endif
}
