/* Stream-ordered signals (symm_signal_put / _wait / _barrier) on the host
 * backend, in real processes: data written into a peer's buffer before a
 * put is seen after the matching wait (ping-pong over two channels), the
 * barrier keeps 3 and 8 ranks in step (8 on this machine's CPUs exercises
 * the backoff), pads are all zero after balanced use, a missing signal and
 * an unconsumed one time out naming the peer, and bad arguments are
 * refused. */
#include <stdbool.h>
#include <unistd.h>

#include "harness.h"

enum { ROUNDS = 2000, WORDS = 64, SHORT_TIMEOUT_MS = 1000 };

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

static symm_tensor_t *make_tensor(symm_comm_t *comm, int64_t n) {
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  return t;
}

/* Every slot of this rank's pad is zero (all signals consumed). */
static int pad_is_clear(const symm_tensor_t *t, int rank) {
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, rank, &pad));
  const volatile uint32_t *w = pad;
  for (size_t i = 0; i < symm_comm_signal_pad_bytes(symm_tensor_comm(t)) / 4; i++)
    if (w[i]) {
      fprintf(stderr, "rank %d: pad word %zu = %u\n", rank, i, w[i]);
      return 0;
    }
  return 1;
}

/* Every signal was consumed (this rank's pad is all zero); tears down. */
static int finish(symm_comm_t *comm, symm_tensor_t *t, int rank) {
  ASSERT(pad_is_clear(t, rank));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

/* Stream-ordered 32-bit writes on the host backend: rank 0 fills rank
 * 1's buffer with symm_memset32, then raises a flag word in rank 1's pad
 * with symm_write_value32; rank 1 polls the flag (acquire) and must see
 * every word of the fill.  Rounds alternate the value so stale data
 * shows.  Bad arguments are refused. */
static int write32_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = make_tensor(comm, WORDS);
  void *const *peers = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &peers));
  void *flag_pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, 1, &flag_pad));
  /* The last word of rank 1's pad: no channel of two ranks reaches it. */
  uint32_t *flag = (uint32_t *)flag_pad + symm_signal_pad_bytes() / 4 - 1;
  for (uint32_t i = 1; i <= 500; i++) {
    if (rank == 0) {
      ASSERT_OK(symm_memset32(comm, peers[1], 0x5a000000u + i, WORDS, NULL));
      ASSERT_OK(symm_write_value32(comm, flag, i, NULL));
      ASSERT_OK(symm_signal_wait(t, 1, 0, NULL)); /* rank 1 checked round i */
    } else {
      const uint64_t end = test_now_ms() + 20000;
      while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != i) ASSERT_LT(test_now_ms(), end);
      const uint32_t *mine = peers[1];
      for (int k = 0; k < WORDS; k++) ASSERT_EQ(mine[k], 0x5a000000u + i);
      ASSERT_OK(symm_signal_put(t, 0, 0, NULL));
    }
  }
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 1) *flag = 0; /* the pad clean for finish */
  /* Count 0 writes nothing; the refusals. */
  uint32_t *mine = peers[rank];
  mine[0] = 7;
  ASSERT_OK(symm_memset32(comm, mine, 9, 0, NULL));
  ASSERT_EQ(mine[0], 7u);
  ASSERT_RES(symm_write_value32(comm, (char *)mine + 2, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "4-byte aligned");
  ASSERT_RES(symm_memset32(comm, mine, 1, 4, (symm_stream_t)0x10), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "takes no stream");
  ASSERT_RES(symm_write_value32(NULL, mine, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_memset32(comm, NULL, 1, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_memset32(comm, mine, 1, SIZE_MAX / 2, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_comm_barrier(comm));
  return finish(comm, t, rank);
}

TEST_IMPL(signal_write_value32) {
  ASSERT_EQ(test_run_ranks(2, write32_rank, NULL), 0);
  return 0;
}

/* Rank 0 writes round i into rank 1's buffer and signals on channel 0;
 * rank 1 checks it, answers into rank 0's buffer on channel 1. */
static int ping_pong_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = make_tensor(comm, WORDS);
  void *const *peers = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &peers));
  int other = 1 - rank;
  volatile int32_t *mine = peers[rank], *theirs = peers[other];
  for (int i = 1; i <= ROUNDS; i++) {
    if (rank == 0) {
      for (int k = 0; k < WORDS; k++) theirs[k] = i * WORDS + k;
      ASSERT_OK(symm_signal_put(t, other, 0, NULL));
      ASSERT_OK(symm_signal_wait(t, other, 1, NULL));
      for (int k = 0; k < WORDS; k++) ASSERT_EQ(mine[k], -(i * WORDS + k));
    } else {
      ASSERT_OK(symm_signal_wait(t, other, 0, NULL));
      for (int k = 0; k < WORDS; k++) ASSERT_EQ(mine[k], i * WORDS + k);
      for (int k = 0; k < WORDS; k++) theirs[k] = -(i * WORDS + k);
      ASSERT_OK(symm_signal_put(t, other, 1, NULL));
    }
  }
  ASSERT_OK(symm_comm_barrier(comm));
  return finish(comm, t, rank);
}

TEST_IMPL(signal_ping_pong) {
  ASSERT_EQ(test_run_ranks(2, ping_pong_rank, NULL), 0);
  return 0;
}

/* Each round every rank writes the round number into its own buffer, then
 * barriers (channel varies by round); after it every peer's buffer holds
 * this round.  A second barrier keeps a fast rank from overwriting its
 * buffer while a slow one still reads it. */
static int barrier_rank(int rank, int size, void *arg) {
  int rounds = *(int *)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = make_tensor(comm, 16);
  void *const *peers = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &peers));
  int channels = symm_signal_channels(t);
  ASSERT_EQ(channels, (int)(symm_signal_pad_bytes() / 4 / (size_t)size));
  for (int i = 1; i <= rounds; i++) {
    ((volatile int32_t *)peers[rank])[0] = i;
    ASSERT_OK(symm_signal_barrier(t, i % channels, NULL));
    for (int r = 0; r < size; r++) ASSERT_EQ(((volatile int32_t *)peers[r])[0], i);
    ASSERT_OK(symm_signal_barrier(t, (i + 1) % channels, NULL));
  }
  return finish(comm, t, rank);
}

TEST_IMPL(signal_barrier_3) {
  int rounds = 1000;
  ASSERT_EQ(test_run_ranks(3, barrier_rank, &rounds), 0);
  return 0;
}

/* A communicator with 64 KiB pads (symm_config_t.signal_pad_bytes): 16
 * times the channels, the highest of them working like the lowest, and
 * the whole pad clear after balanced use. */
static int large_pad_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.signal_pad_bytes = 64 << 10;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &comm));
  symm_tensor_t *t = make_tensor(comm, 16);
  const int channels = symm_signal_channels(t);
  ASSERT_EQ(channels, (64 << 10) / 4 / size);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int c = channels - 1; c >= channels - 50; c--) {
    ASSERT_OK(symm_signal_put(t, right, c, NULL));
    ASSERT_OK(symm_signal_wait(t, left, c, NULL));
    ASSERT_OK(symm_signal_barrier(t, c, NULL));
  }
  ASSERT_RES(symm_signal_put(t, right, channels, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "65536-byte pad");
  ASSERT_OK(symm_comm_barrier(comm));
  return finish(comm, t, rank);
}

TEST_IMPL(signal_large_pad) {
  ASSERT_EQ(test_run_ranks(3, large_pad_rank, NULL), 0);
  return 0;
}

TEST_IMPL(signal_barrier_8) {
  int rounds = 100; /* 8 ranks on few CPUs: the waits sleep */
  ASSERT_EQ(test_run_ranks(8, barrier_rank, &rounds), 0);
  return 0;
}

/* Rank 0 waits for a signal rank 1 never sends, then puts twice into a
 * slot rank 1 never drains: both time out and name rank 1. */
static int timeout_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = make_tensor(comm, 16);
  if (rank == 0) {
    ASSERT_RES(symm_signal_wait(t, 1, 3, NULL), SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "no signal from rank 1 on channel 3");
    ASSERT_OK(symm_signal_put(t, 1, 2, NULL));
    ASSERT_RES(symm_signal_put(t, 1, 2, NULL), SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 did not consume");
    ASSERT_OK(symm_store_set(symm_comm_store(comm), "test/signal/gave_up", "1", 1));
  } else {
    /* Silent until rank 0 gave up twice (it says so in the store). */
    test_store_await(symm_comm_store(comm), "test/signal/gave_up");
  }
  ASSERT_OK(symm_comm_barrier(comm));
  /* The one signal that did arrive is there, and consumable. */
  if (rank == 1) ASSERT_OK(symm_signal_wait(t, 0, 2, NULL));
  return finish(comm, t, rank);
}

TEST_IMPL(signal_timeout) {
  ASSERT_EQ(test_run_ranks_timed(2, timeout_rank, NULL, 30000, SHORT_TIMEOUT_MS), 0);
  return 0;
}

/* Rank 1 is SIGKILLed: rank 0's wait for its signal (arg NULL), or its
 * put into the slot rank 1 never empties, ends in PEER_LOST. */
static int killed_peer_rank(int rank, int size, void *arg) {
  (void)size;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = make_tensor(comm, 16);
  if (rank == 1) {
    test_rank_ready();
    sleep(30); /* killed here by the harness */
    return 1;
  }
  if (arg) {
    ASSERT_OK(symm_signal_put(t, 1, 0, NULL));
    ASSERT_RES(symm_signal_put(t, 1, 0, NULL), SYMM_ERR_PEER_LOST);
  } else {
    ASSERT_RES(symm_signal_wait(t, 1, 0, NULL), SYMM_ERR_PEER_LOST);
  }
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 (pid");
  return 0;
}

TEST_IMPL(signal_peer_killed) {
  test_job_opts_t o = {.timeout_ms = 30000, .store_timeout_ms = 20000,
                       .kill_rank = 1, .kill_after_ms = 200};
  ASSERT_EQ(test_run_ranks_opts(2, killed_peer_rank, NULL, &o), 1);
  ASSERT_EQ(test_run_ranks_opts(2, killed_peer_rank, (void *)1, &o), 1);
  return 0;
}

static int bad_args_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  ASSERT_RES(symm_signal_put(NULL, 0, 0, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_EQ(symm_signal_channels(NULL), -1);
  int64_t n = 16;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_RES(symm_signal_wait(t, 1 - rank, 0, NULL), SYMM_ERR_STATE);
  ASSERT_STR_CONTAINS(symm_last_error(), "rendezvous");
  ASSERT_OK(symm_tensor_rendezvous(t));
  int channels = symm_signal_channels(t);
  ASSERT_RES(symm_signal_put(t, rank, 0, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "peer");
  ASSERT_RES(symm_signal_put(t, -1, 0, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_signal_wait(t, size, 0, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_signal_put(t, 1 - rank, -1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_signal_barrier(t, channels, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "channel");
  ASSERT_RES(symm_signal_barrier(t, 0, (void *)t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "stream");
  /* Nothing was signalled by the refused calls; a real barrier works. */
  ASSERT_OK(symm_signal_barrier(t, channels - 1, NULL));
  return finish(comm, t, rank);
}

TEST_IMPL(signal_bad_args) {
  ASSERT_EQ(test_run_ranks(2, bad_args_rank, NULL), 0);
  return 0;
}
