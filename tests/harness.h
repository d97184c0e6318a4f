/* Test harness, libuv style: TEST_IMPL bodies return 0 on success, exit via
 * ASSERT on failure, or return TEST_SKIP (77) with a printed reason
 * ("SKIP: ..." on stdout).  Every ASSERT counts one check in test_checks
 * (the runner's rank mode prints the count). */
#ifndef SYMM_TEST_HARNESS_H
#define SYMM_TEST_HARNESS_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "symmem.h"

#define TEST_SKIP 77
#define TEST_IMPL(name) int run_test_##name(void)

/* Checks made so far in this process (every ASSERT_*, passed or not). */
extern unsigned long test_checks;
#define TEST_CHECKED_() (void)__atomic_add_fetch(&test_checks, 1, __ATOMIC_RELAXED)

/* Prints "FAIL file:line: " and the message (in a rank's process of
 * test_run_ranks, "rank R: " first) and aborts. */
void test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define TEST_FAIL_(...) test_fail_at(__FILE__, __LINE__, __VA_ARGS__)

#define ASSERT(expr)                                                          \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    if (!(expr)) TEST_FAIL_("assertion failed: %s", #expr);                   \
  } while (0)
/* ASSERT with a message that says what was found (printf arguments): for a
 * condition that is not one comparison of two values. */
#define ASSERT_MSG(expr, ...)                                                 \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    if (!(expr)) {                                                            \
      char m_[512];                                                           \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                   \
      TEST_FAIL_("%s: %s", #expr, m_);                                        \
    }                                                                         \
  } while (0)
#define ASSERT_INT_(a, op, b)                                                 \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    long long a_ = (long long)(a), b_ = (long long)(b);                       \
    if (!(a_ op b_))                                                          \
      TEST_FAIL_("%s %s %s: %lld vs %lld", #a, #op, #b, a_, b_);              \
  } while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_(a, >=, b)
#define ASSERT_PTR_EQ(a, b)                                                   \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    const void *a_ = (const void *)(a), *b_ = (const void *)(b);              \
    if (a_ != b_) TEST_FAIL_("%s == %s: %p vs %p", #a, #b, a_, b_);           \
  } while (0)
#define ASSERT_STR_CONTAINS(hay, needle)                                      \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    const char *h_ = (hay), *n_ = (needle);                                   \
    if (!h_ || !strstr(h_, n_))                                               \
      TEST_FAIL_("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);   \
  } while (0)
/* A symm_ call that must succeed; prints the detailed error otherwise. */
#define ASSERT_OK(call)                                                       \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    symm_result_t r_ = (call);                                                \
    if (r_ != SYMM_SUCCESS)                                                   \
      TEST_FAIL_("%s -> %s (%s)", #call, symm_strerror(r_), symm_last_error()); \
  } while (0)
#define ASSERT_RES(call, expected)                                            \
  do {                                                                        \
    TEST_CHECKED_();                                                          \
    symm_result_t r_ = (call);                                                \
    if (r_ != (expected))                                                     \
      TEST_FAIL_("%s -> %s, expected %s (%s)", #call, symm_strerror(r_),      \
                 symm_strerror(expected), symm_last_error());                 \
  } while (0)

/* ---- multi-process jobs ------------------------------------------------ */
/* Body run in each rank's process; returns 0 on success.  The environment
 * has SYMM_RANK, SYMM_WORLD_SIZE, SYMM_STORE_ADDR, SYMM_TOKEN, SYMM_JOB_ID and
 * SYMM_STORE_EXTERNAL=1 set, so symm_comm_init(NULL, ...) just works. */
typedef int (*test_rank_fn)(int rank, int size, void *arg);

typedef struct test_job_opts {
  int timeout_ms;          /* whole job; default: the test's own timeout less 5 s
                              (test_timeout_s), else 60000 */
  int *exit_status;        /* optional [n]: raw wait() status of each rank */
  const char *backend;     /* SYMM_BACKEND for the ranks; default "host" */
  int store_timeout_ms;    /* SYMM_TIMEOUT_MS for the ranks; default 20000 */
  int kill_rank;           /* rank to SIGKILL kill_after_ms after it called
                              test_rank_ready(); -1 none */
  int kill_after_ms;
  /* In each rank's process, before anything else: enter(rank, enter_arg)
   * (moving it into a namespace host: tests/ns_hosts.h); NULL: nothing. */
  void (*enter)(int rank, void *enter_arg);
  void *enter_arg;
  /* host:port where rank 0 serves the store itself, bound to that host
   * (SYMM_STORE_BIND); NULL: the harness's store process on 127.0.0.1. */
  const char *store_addr;
} test_job_opts_t;

/* The running test's timeout from its TEST_ENTRY (seconds; 0: unknown),
 * set by the runner: a job's default deadline follows it. */
extern int test_timeout_s;

/* In a rank's process: the harness may SIGKILL this rank from now on
 * (test_job_opts_t.kill_rank), so that a rank slow to start (a sanitizer
 * build on a busy machine) is not killed before the point the test means. */
void test_rank_ready(void);

/* Starts a store server in a process of its own, forks n ranks running fn,
 * waits for all (killing them all at the timeout).  Returns the number of ranks
 * that did not exit with status 0. */
int test_run_ranks(int n, test_rank_fn fn, void *arg);
int test_run_ranks_opts(int n, test_rank_fn fn, void *arg, const test_job_opts_t *opts);
/* test_run_ranks with a deadline of its own for the whole job and for the
 * ranks' store calls (SYMM_TIMEOUT_MS), no rank killed. */
int test_run_ranks_timed(int n, test_rank_fn fn, void *arg, int timeout_ms,
                         int store_timeout_ms);
/* test_run_ranks_opts (opts NULL: defaults) with arg a fresh folder under
 * /tmp, removed after; for ranks that write files there, such as logs. */
int test_run_ranks_in_tmpdir(int n, test_rank_fn fn, const test_job_opts_t *opts);
/* Sends this process's COLL log lines at `level` to dir/name-rank.log,
 * whose path goes to path: tests read which path each collective took. */
void test_log_coll_to(const char *dir, const char *name, int rank, const char *level,
                      char *path, size_t cap);

/* The environment that symm_comm_init(NULL, ...) reads in one rank of a
 * job whose store is at store_addr; SYMM_LOCAL_RANK and SYMM_LOCAL_SIZE
 * are unset, so the library works them out itself. */
typedef struct test_rank_env {
  int rank, size;
  const char *store_addr, *token, *job, *backend;
  bool rank0_serves; /* SYMM_STORE_EXTERNAL=0: rank 0 runs the store */
  int store_timeout_ms;
  const char *store_bind; /* SYMM_STORE_BIND; NULL: left as it is */
} test_rank_env_t;
void test_set_rank_env(const test_rank_env_t *e);
/* setenv(name, value in decimal, overwrite). */
void test_setenv_int(const char *name, long long value);

/* A store server of a test's own (serving token on 127.0.0.1, its port in
 * port), in a process of its own: a test that forks ranks must not run a
 * server thread itself, since a child forked while that thread holds a
 * lock (malloc's, the sanitizers' allocator's) deadlocks on it.  Start
 * before any thread of the test runs; stop kills it. */
typedef struct {
  int pid, ctl, port;
} test_store_proc_t;
void test_store_proc_start(const char *token, test_store_proc_t *s);
/* The same on a given port (0: any), the store process's RLIMIT_NOFILE
 * first lowered to fd_limit where that is > 0 (a store out of fds). */
void test_store_proc_start_on(const char *token, int port, int fd_limit, test_store_proc_t *s);
void test_store_proc_stop(test_store_proc_t *s);

/* fork() after flushing stdout and stderr (else the child prints again
 * what the parent had buffered); a failed fork fails the test. */
pid_t test_fork(void);

/* Waits up to 30 s for some rank to set key in store: how a rank stays
 * silent until another has given up on it. */
void test_store_await(symm_store_t *store, const char *key);

/* Counts open fds of this process (/proc/self/fd) and mapped bytes
 * (/proc/self/maps). */
int test_count_fds(void);
size_t test_mapped_bytes(void);
/* Whether address p is inside any mapping of this process (/proc/self/maps). */
bool test_address_mapped(const void *p);
uint64_t test_now_ms(void);
/* A loopback TCP port for a store of the test's to listen on: bound to 0,
 * read back, and kept bound (SO_REUSEADDR, not listening) so that no test
 * running beside it takes it first; symmem's stores bind beside it. */
int test_free_port(void);
/* In a rank of test_run_ranks: the communicators it makes from now on meet
 * at 127.0.0.1:port, where rank 0 serves the store itself (no external
 * store, as without symmem-run). */
void test_rank_serves_store(int port);
/* Moves this process (with CLONE_NEWUTS) or its later children (with
 * CLONE_NEWPID) into a new user namespace, plus extra_clone_flags' other
 * namespaces, with this uid and gid mapped to themselves, so SO_PEERCRED
 * and file owners look the same from both sides.  false (errno set) where
 * that cannot be done unprivileged. */
bool test_enter_user_namespace(int extra_clone_flags);
/* Runs fn(arg) in a child in a new user + PID namespace (pid 1 there, so
 * its pid means nothing to processes outside, as in another container that
 * shares the host name and IPC but not PIDs); returns the child's exit
 * status (128 + signal), 100 + errno when the namespace cannot be made.
 * Call it in a process of its own (a rank): it changes the caller's user
 * namespace. */
int test_run_in_pid_namespace(int (*fn)(void *), void *arg);
/* Whether test_run_in_pid_namespace works here (unprivileged user
 * namespaces may be off); false with the reason in why. */
bool test_pid_namespace_usable(char *why, size_t why_len);
/* Where it does not: prints "SKIP: " and the reason, and returns true (the
 * test then returns TEST_SKIP). */
bool test_pid_namespace_skip(void);
/* Path of a built tool (symmem-run, symmem-info). */
const char *test_tool_path(const char *tool);
/* Runs a shell command, captures up to cap bytes of stdout+stderr in out;
 * returns the exit status (as from system(), decoded: exit code or
 * 128+signal). */
int test_run_command(const char *cmd, char *out, size_t cap);

/* Asserts that s is one JSON object: balanced brackets outside strings,
 * terminated strings, no control characters (not a full parser). */
void test_assert_json_shape(const char *s);

#endif
