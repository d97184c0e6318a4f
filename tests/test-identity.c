/* A communicator's identity: which communicator of a store the ranks meet
 * in (communicators made at once from threads, a process in two groups on
 * different stores), and the settings every rank must share, compared at
 * init.  Real processes, threads and stores. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

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
    symm_store_server_t *srv[THREADS];
    for (int t = 0; t < THREADS; t++) {
      snprintf(st.token[t], sizeof st.token[t], "thread-token-%d", t);
      ASSERT_OK(symm_store_server_start("127.0.0.1", 0, st.token[t], &srv[t]));
      snprintf(st.addr[t], sizeof st.addr[t], "127.0.0.1:%d", symm_store_server_port(srv[t]));
    }
    ASSERT_EQ(test_run_ranks(2, threads_rank, &st), 0);
    for (int t = 0; t < THREADS; t++) symm_store_server_stop(srv[t]);
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
  symm_store_server_t *srv[2];
  for (int g = 0; g < 2; g++) {
    snprintf(st.token[g], sizeof st.token[g], "group-token-%d", g);
    ASSERT_OK(symm_store_server_start("127.0.0.1", 0, st.token[g], &srv[g]));
    snprintf(st.addr[g], sizeof st.addr[g], "127.0.0.1:%d", symm_store_server_port(srv[g]));
  }
  ASSERT_EQ(test_run_ranks(3, two_groups_rank, &st), 0);
  for (int g = 0; g < 2; g++) symm_store_server_stop(srv[g]);
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
  test_job_opts_t o = {.timeout_ms = 40000, .store_timeout_ms = 20000, .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(ranks, differ_rank, (void *)d, &o), 0);
}

TEST_IMPL(identity_settings_differ_bootstrap_shm) {
  differ_arg_t d = {"SYMM_BOOTSTRAP_SHM", "0", 1, {"SYMM_BOOTSTRAP_SHM", "has 0", "has 1"}};
  run_differ(&d, 2);
  d.odd = 0;
  run_differ(&d, 3);
  return 0;
}

TEST_IMPL(identity_settings_differ_job_id) {
  differ_arg_t d = {"SYMM_JOB_ID", "another-job", 1, {"SYMM_JOB_ID", "another-job", "rank 1"}};
  run_differ(&d, 2);
  d.odd = 2;
  d.expect[2] = "rank 2";
  run_differ(&d, 3);
  return 0;
}

TEST_IMPL(identity_settings_differ_world_size) {
  /* One rank counts a rank that does not exist, or one too few. */
  differ_arg_t d = {"SYMM_WORLD_SIZE", "3", 1, {"SYMM_WORLD_SIZE", "has 2", "has 3"}};
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
