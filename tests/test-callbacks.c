/* Communicators on the caller's bootstrap callbacks (symm_config_t.
 * bootstrap), in real processes with no store anywhere: the callbacks
 * all-gather through a shared segment the test maps before forking the
 * ranks (a stand-in for MPI).  Init, tensors, collectives, barriers and
 * groups work; no listening TCP socket is opened; a callback that fails
 * or stalls makes the calling function return its code within the
 * deadline; bad callbacks and disagreeing settings are refused. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "listening.h"

#define CH_MAX_W 8
#define CH_SLOT ((size_t)256 << 10) /* bytes one rank sends in one round */
#define CH_REGIONS 32

/* One channel's region of the segment: per rank, the last round it
 * published, and its data of each round parity. */
typedef struct {
  _Atomic uint64_t seq[CH_MAX_W];
  unsigned char data[2][CH_MAX_W][CH_SLOT];
} ch_region_t;

static ch_region_t *segment; /* CH_REGIONS regions, mapped before the fork */

typedef struct {
  ch_region_t *r;
  int region, rank, size;
  uint64_t round;
  int splits;
  /* Faults: from round fail_at on, rank fail_rank's allgather returns
   * fail_code at once (SYMM_ERR_TIMEOUT: after waiting timeout_ms). */
  int fail_rank, fail_code;
  uint64_t fail_at;
  int calls; /* allgather calls on this rank */
} channel_t;

static void map_segment(void) {
  if (segment) return;
  segment = mmap(NULL, sizeof(ch_region_t) * CH_REGIONS, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(segment != MAP_FAILED);
}

/* Waits until every rank of ch published round `round`, or the deadline. */
static int wait_round(channel_t *ch, uint64_t round, int timeout_ms) {
  const uint64_t end = test_now_ms() + (uint64_t)timeout_ms;
  for (int r = 0; r < ch->size; r++)
    while (atomic_load(&ch->r->seq[r]) < round) {
      if (test_now_ms() >= end) return SYMM_ERR_TIMEOUT;
      sched_yield();
    }
  return 0;
}

static int ch_allgather(void *ctx, const void *send, void *recv, size_t len, int timeout_ms) {
  channel_t *ch = ctx;
  ch->calls++;
  if (ch->fail_code && ch->rank == ch->fail_rank && ch->round + 1 >= ch->fail_at) {
    if (ch->fail_code == SYMM_ERR_TIMEOUT) usleep((useconds_t)timeout_ms * 1000);
    return ch->fail_code;
  }
  if (len > CH_SLOT) return SYMM_ERR_INVALID_ARG;
  const uint64_t k = ++ch->round;
  /* Round k reuses the data of k - 2: every rank has read it once every
   * rank published k - 1. */
  int rc = k > 1 ? wait_round(ch, k - 1, timeout_ms) : 0;
  if (rc) return rc;
  memcpy(ch->r->data[k & 1][ch->rank], send, len);
  atomic_store(&ch->r->seq[ch->rank], k);
  if ((rc = wait_round(ch, k, timeout_ms))) return rc;
  for (int r = 0; r < ch->size; r++) memcpy((char *)recv + (size_t)r * len, ch->r->data[k & 1][r], len);
  return 0;
}

static void ch_init(channel_t *ch, int region, int rank, int size, symm_bootstrap_callbacks_t *cb);

/* MPI_Comm_split's contract over the channel: the members of each color,
 * ranked by key, in a region named by the parent's region, its split
 * count and the color (distinct for the few splits a test makes). */
static int ch_split(void *ctx, int color, int key, symm_bootstrap_callbacks_t *child,
                    int timeout_ms) {
  channel_t *ch = ctx;
  int mine[2] = {color, key}, all[2 * CH_MAX_W];
  int rc = ch_allgather(ch, mine, all, sizeof mine, timeout_ms);
  if (rc) return rc;
  ch->splits++;
  if (color < 0) return 0;
  int rank = 0, size = 0;
  for (int r = 0; r < ch->size; r++) {
    if (all[2 * r] != color) continue;
    size++;
    rank += all[2 * r + 1] < key || (all[2 * r + 1] == key && r < ch->rank);
  }
  const int region = 1 + (ch->region * 7 + ch->splits * 5 + color) % (CH_REGIONS - 1);
  channel_t *sub = calloc(1, sizeof *sub);
  if (!sub) return SYMM_ERR_NO_MEMORY;
  ch_init(sub, region, rank, size, child);
  return 0;
}

static void ch_release(void *ctx) { free(ctx); }

static void ch_init(channel_t *ch, int region, int rank, int size,
                    symm_bootstrap_callbacks_t *cb) {
  ch->r = &segment[region];
  ch->region = region;
  ch->rank = rank;
  ch->size = size;
  *cb = (symm_bootstrap_callbacks_t)SYMM_BOOTSTRAP_CALLBACKS_INIT;
  cb->rank = rank;
  cb->world_size = size;
  cb->ctx = ch;
  cb->allgather = ch_allgather;
  cb->split = ch_split;
  cb->release = ch_release;
}

/* No store: the harness's store variables are gone. */
static void forget_store(void) {
  unsetenv("SYMM_STORE_ADDR");
  unsetenv("SYMM_TOKEN");
  unsetenv("MASTER_ADDR");
}

static symm_result_t init_on(symm_bootstrap_callbacks_t *cb, symm_comm_t **comm) {
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = cb;
  return symm_comm_init(&cfg, comm);
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
  forget_store();
  channel_t ch = {0};
  symm_bootstrap_callbacks_t cb;
  ch_init(&ch, 0, rank, size, &cb);
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
  map_segment();
  ASSERT_EQ(test_run_ranks(2, works_rank, NULL), 0);
  return 0;
}

TEST_IMPL(callbacks_works_4) {
  map_segment();
  ASSERT_EQ(test_run_ranks(4, works_rank, NULL), 0);
  return 0;
}

/* Rank 1's all-gather fails from its round `at` on with the code in arg:
 * rank 1 returns that code, naming the callback; the others, whose
 * all-gather then waits for rank 1, time out within their deadline. */
typedef struct {
  int code;
  uint64_t at;
} fault_t;

static int fault_rank(int rank, int size, void *arg) {
  const fault_t *f = arg;
  forget_store();
  channel_t ch = {0};
  symm_bootstrap_callbacks_t cb;
  ch_init(&ch, 0, rank, size, &cb);
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
  } else {
    ASSERT_RES(res, SYMM_ERR_TIMEOUT);
  }
  ASSERT_MSG(took < 1500 + 1000, "init took %llu ms with a 1500 ms timeout",
             (unsigned long long)took);
  return 0;
}

TEST_IMPL(callbacks_fail) {
  map_segment();
  fault_t f = {SYMM_ERR_PEER_LOST, 1};
  ASSERT_EQ(test_run_ranks(3, fault_rank, &f), 0);
  return 0;
}

TEST_IMPL(callbacks_stall) {
  map_segment();
  fault_t f = {SYMM_ERR_TIMEOUT, 3};
  ASSERT_EQ(test_run_ranks(3, fault_rank, &f), 0);
  return 0;
}

/* Callbacks refused as such, and settings the ranks disagree on. */
static int refused_rank(int rank, int size, void *arg) {
  (void)arg;
  forget_store();
  channel_t ch = {0};
  symm_bootstrap_callbacks_t cb;
  ch_init(&ch, 0, rank, size, &cb);
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
  map_segment();
  ASSERT_EQ(test_run_ranks(3, refused_rank, NULL), 0);
  return 0;
}
