/* Communicators on the caller's bootstrap callbacks (symm_config_t.
 * bootstrap), in real processes with no store anywhere: the callbacks
 * all-gather through a shared segment the test maps before forking the
 * ranks (a stand-in for MPI).  Init, tensors, collectives, barriers and
 * groups work; no listening TCP socket is opened; a callback that fails
 * or stalls makes the calling function return its code within the
 * deadline; bad callbacks and disagreeing settings are refused. */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cb_channel.h"
#include "harness.h"
#include "listening.h"

static symm_result_t init_on(symm_bootstrap_callbacks_t *cb, symm_comm_t **comm) {
  return cb_channel_comm_init(cb, SYMM_BACKEND_AUTO, 0, comm);
}

/* Tensors, collectives, signals and a barrier on a communicator. */
static void check_works(symm_comm_t *comm) {
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  int64_t n = 64;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ((volatile int64_t *)ptrs[(rank + 1) % size])[1] = 1000 + rank;
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_EQ(((volatile int64_t *)ptrs[rank])[1], 1000 + (rank + size - 1) % size);
  int64_t x = rank + 1;
  ASSERT_OK(symm_all_reduce(comm, &x, &x, 1, SYMM_DTYPE_I64, SYMM_REDUCE_SUM, NULL));
  ASSERT_EQ(x, (int64_t)size * (size + 1) / 2);
  ASSERT_OK(symm_tensor_free(t));
}

static int works_rank(int rank, int size, void *arg) {
  (void)arg;
  cb_channel_forget_store();
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  cb_channel_open(&ch, 0, rank, size, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
  const int before = symm_test_listening_sockets();
  symm_comm_t *comm = NULL;
  ASSERT_OK(init_on(&cb, &comm));
  ASSERT_EQ(symm_comm_rank(comm), rank);
  ASSERT_EQ(symm_comm_size(comm), size);
  check_works(comm);
  ASSERT_MSG(symm_test_listening_sockets() == before, "%d listening TCP sockets, %d before init",
             symm_test_listening_sockets(), before);
  ASSERT_MSG(ch.calls > 0, "the callbacks were never called");
  /* Groups: even and odd ranks, then the evens again in halves. */
  symm_comm_t *half = NULL, *quarter = NULL;
  ASSERT_OK(symm_comm_split(comm, rank % 2, rank, &half));
  check_works(half);
  ASSERT_OK(symm_comm_split(half, symm_comm_rank(half) < 1 ? 0 : SYMM_SPLIT_NONE, 0, &quarter));
  ASSERT_EQ(quarter != NULL, symm_comm_rank(half) < 1);
  if (quarter) ASSERT_EQ(symm_comm_size(quarter), 1);
  symm_comm_destroy(quarter);
  symm_comm_destroy(half);
  check_works(comm);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(callbacks_works_2) {
  cb_channel_map();
  ASSERT_EQ(test_run_ranks(2, works_rank, NULL), 0);
  return 0;
}

TEST_IMPL(callbacks_works_4) {
  cb_channel_map();
  ASSERT_EQ(test_run_ranks(4, works_rank, NULL), 0);
  return 0;
}

/* Rank 1's all-gather fails from its round `at` on with the code in arg:
 * rank 1 returns that code, naming the callback; the others, whose
 * all-gather then waits for rank 1, time out within their deadline, or
 * learn from the channel that a rank is gone once it returned and exited
 * (rank 1, or a peer that learnt it first; cb_channel.h), which their
 * error then names. */
typedef struct {
  int code;
  uint64_t at;
} fault_t;

static int fault_rank(int rank, int size, void *arg) {
  const fault_t *f = arg;
  cb_channel_forget_store();
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  cb_channel_open(&ch, 0, rank, size, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
  ch.fail_rank = 1, ch.fail_code = f->code, ch.fail_at = f->at;
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = &cb;
  cfg.timeout_ms = 1500;
  symm_comm_t *comm = NULL;
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(&cfg, &comm);
  const uint64_t took = test_now_ms() - t0;
  if (rank == 1) {
    ASSERT_RES(res, (symm_result_t)f->code);
    ASSERT_STR_CONTAINS(symm_last_error(), "the allgather callback failed on rank 1");
  } else if (res == SYMM_ERR_PEER_LOST) {
    ASSERT_STR_CONTAINS(symm_last_error(), "is gone, the callbacks say");
  } else {
    ASSERT_RES(res, SYMM_ERR_TIMEOUT);
  }
  ASSERT_MSG(took < 1500 + 1000, "init took %llu ms with a 1500 ms timeout",
             (unsigned long long)took);
  return 0;
}

TEST_IMPL(callbacks_fail) {
  cb_channel_map();
  fault_t f = {SYMM_ERR_PEER_LOST, 1};
  ASSERT_EQ(test_run_ranks(3, fault_rank, &f), 0);
  return 0;
}

TEST_IMPL(callbacks_stall) {
  cb_channel_map();
  fault_t f = {SYMM_ERR_TIMEOUT, 3};
  ASSERT_EQ(test_run_ranks(3, fault_rank, &f), 0);
  return 0;
}

/* Callbacks refused as such, and settings the ranks disagree on. */
static int refused_rank(int rank, int size, void *arg) {
  (void)arg;
  cb_channel_forget_store();
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  cb_channel_open(&ch, 0, rank, size, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
  symm_comm_t *comm = NULL;
  symm_bootstrap_callbacks_t bad = cb;
  bad.allgather = NULL;
  ASSERT_RES(init_on(&bad, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "no allgather");
  bad = cb;
  bad.size = 8;
  ASSERT_RES(init_on(&bad, &comm), SYMM_ERR_INVALID_ARG);
  bad = cb;
  bad.rank = size;
  ASSERT_RES(init_on(&bad, &comm), SYMM_ERR_INVALID_ARG);
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = &cb;
  cfg.rank = (rank + 1) % size;
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "its bootstrap callbacks rank");
  /* A setting that must agree differs on rank 1: every rank names it. */
  if (rank == 1) setenv("SYMM_HOST_SLICE_BYTES", "8K", 1);
  ASSERT_RES(init_on(&cb, &comm), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_HOST_SLICE_BYTES");
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 0 has");
  unsetenv("SYMM_HOST_SLICE_BYTES");
  /* No split callback: groups are refused on every rank. */
  cb.split = NULL;
  ASSERT_OK(init_on(&cb, &comm));
  symm_comm_t *g = NULL;
  ASSERT_RES(symm_comm_split(comm, 0, rank, &g), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "no split callback");
  check_works(comm);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(callbacks_refused) {
  cb_channel_map();
  ASSERT_EQ(test_run_ranks(3, refused_rank, NULL), 0);
  return 0;
}

/* A rank killed in the middle of a rendezvous (after the exchange of
 * infos, while its peers fetch its memory's fd): the others return
 * SYMM_ERR_PEER_LOST naming it, well within the deadline, not a timeout
 * with no reason. */
static int fdx_lost_rank(int rank, int size, void *arg) {
  _Atomic int *reported = arg; /* survivors that have their result */
  cb_channel_forget_store();
  setenv("SYMM_FAULT", "rendezvous:kill:2", 1);
  setenv("SYMM_MAP_PEERS", "at_rendezvous", 1); /* the fetch in the rendezvous is tested */
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  cb_channel_open(&ch, 0, rank, size, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
  const int timeout_ms = 20000;
  symm_comm_t *comm = NULL;
  ASSERT_OK(cb_channel_comm_init(&cb, SYMM_BACKEND_HOST, timeout_ms, &comm));
  int64_t n = 1024;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I64, &t));
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_tensor_rendezvous(t); /* rank 2 dies in it */
  const uint64_t took = test_now_ms() - t0;
  printf("rank %d: %s after %llu ms: %s\n", rank, symm_strerror(res), (unsigned long long)took,
         symm_last_error());
  ASSERT_RES(res, SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2");
  ASSERT_MSG(took < (uint64_t)timeout_ms / 2, "took %llu ms", (unsigned long long)took);
  /* No survivor exits before the others have their result: a survivor
   * gone would be a second loss, which they might see first. */
  atomic_fetch_add(reported, 1);
  while (atomic_load(reported) < size - 1) sched_yield();
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(callbacks_fdx_peer_lost) {
  cb_channel_map();
  int status[3];
  _Atomic int *reported = mmap(NULL, sizeof *reported, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(reported != MAP_FAILED);
  test_job_opts_t o = {.kill_rank = -1, .exit_status = status};
  ASSERT_EQ(test_run_ranks_opts(3, fdx_lost_rank, (void *)reported, &o), 1);
  munmap((void *)reported, sizeof *reported);
  ASSERT_MSG(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL, "rank 2: status %#x",
             status[2]);
  return 0;
}
