/* Test runner: `symm-tests NAME` runs one test (ctest runs each in its own
 * process with a timeout); `symm-tests --list` prints the names; with no
 * argument every test runs in turn, each in a child process, and the runner
 * prints "N passed, N failed, N skipped".  Either way a test that outlives
 * the timeout of its TEST_ENTRY is ended by SIGALRM (the harness's jobs end
 * their ranks 5 s before). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define TEST_ENTRY(name, timeout) TEST_IMPL(name);
#include "test-list.h"
#undef TEST_ENTRY

typedef struct {
  const char *name;
  int (*fn)(void);
  int timeout_s;
} test_entry_t;

static const test_entry_t tests[] = {
#define TEST_ENTRY(name, timeout) {#name, run_test_##name, timeout},
#include "test-list.h"
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

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n_tests; i++) printf("%s\n", tests[i].name);
    return 0;
  }
  if (argc > 1) {
    for (size_t i = 0; i < n_tests; i++)
      if (strcmp(argv[1], tests[i].name) == 0) return run_one(&tests[i]);
    fprintf(stderr, "no test named %s (see --list)\n", argv[1]);
    return 2;
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
}
