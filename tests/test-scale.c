/* Many ranks: what the store serves grows with the ranks, not with their
 * square, and peers mapped on their first use (SYMM_MAP_PEERS=on_use, the
 * host backend's way) keep the fault model: a peer gone before its first
 * use is SYMM_ERR_PEER_LOST at that use, never a crash.  Counts, never
 * times. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SCALE_RANKS 64
#define SCALE_ROUNDS 8

/* Requests the store serves per bootstrap all-gather of N ranks, at most:
 * each rank sends its key (with the delete of its key of two rounds
 * back) and the wait for every key, then the round's verdict: 4 each. */
#define SCALE_MSGS_PER_RANK_PER_ROUND 5
/* And for the whole of symm_comm_init (the handshake, the identity and
 * settings rounds, the shared-memory segment's): about 22 each. */
#define SCALE_INIT_MSGS_PER_RANK 32

/* Every bootstrap round through the store (SYMM_BOOTSTRAP_SHM=0); rank 0
 * reads the store's counters after init and around SCALE_ROUNDS
 * barriers. */
static int store_counts_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("SYMM_BOOTSTRAP_SHM", "0", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_store_t *store = symm_comm_store(comm);
  symm_store_stats_t init, before, after;
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 0) ASSERT_OK(symm_store_stats(store, &init));
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 0) ASSERT_OK(symm_store_stats(store, &before));
  for (int i = 0; i < SCALE_ROUNDS; i++) ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 0) ASSERT_OK(symm_store_stats(store, &after));
  if (rank == 0) {
    const uint64_t n = (uint64_t)size;
    const uint64_t per_round = (after.requests - before.requests - 1) / SCALE_ROUNDS;
    printf("%d ranks: init %llu requests, %llu connections; %llu requests and %llu bytes "
           "per all-gather\n", size, (unsigned long long)init.requests,
           (unsigned long long)init.connections, (unsigned long long)per_round,
           (unsigned long long)((after.request_bytes + after.reply_bytes - before.request_bytes -
                                 before.reply_bytes) / SCALE_ROUNDS));
    /* One connection per rank: no reconnection, no burst that the listen
     * backlog dropped. */
    ASSERT_EQ(init.connections, n);
    ASSERT_EQ(after.connections, n);
    ASSERT_LE(init.requests, SCALE_INIT_MSGS_PER_RANK * n);
    /* Every rank takes part in every round: at least one request each. */
    ASSERT_GE(per_round, n);
    ASSERT_LE(per_round, SCALE_MSGS_PER_RANK_PER_ROUND * n);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(scale_store_messages_linear) {
  ASSERT_EQ(test_run_ranks_timed(SCALE_RANKS, store_counts_rank, NULL, 200000, 120000), 0);
  return 0;
}

/* Rank 1 dies once every rank has rendezvoused a tensor that no rank has
 * used yet (but for the survivors' views of each other, taken before: a
 * survivor may be gone by the time the other would take it); the others
 * see it in a barrier (PEER_LOST), and then a view of rank 1's memory, its
 * first use, is PEER_LOST too, as are its signal pad and the peer pointer
 * array, while the live peer's view still takes stores.  Mapped at
 * rendezvous, the view of the dead rank would have succeeded on memory
 * that nobody else holds. */
static int dead_peer_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 4096;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  const int other = rank == 0 ? 2 : 0; /* the other survivor */
  symm_view_t v;
  if (rank != 1) ASSERT_OK(symm_tensor_remote_view(t, other, &v));
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 1) raise(SIGKILL);
  ASSERT_RES(symm_comm_barrier(comm), SYMM_ERR_PEER_LOST);
  symm_view_t dead;
  ASSERT_RES(symm_tensor_remote_view(t, 1, &dead), SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  void *pad;
  ASSERT_RES(symm_tensor_signal_pad(t, 1, &pad), SYMM_ERR_PEER_LOST);
  void *const *ptrs;
  ASSERT_RES(symm_tensor_peer_ptrs(t, &ptrs), SYMM_ERR_PEER_LOST);
  memset(v.data, 0x5a, (size_t)n);
  ASSERT_EQ(((unsigned char *)v.data)[n - 1], 0x5a);
  (void)size;
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(scale_map_on_use_dead_peer) {
  int status[3];
  test_job_opts_t o = {.timeout_ms = 50000, .exit_status = status, .store_timeout_ms = 20000,
                       .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(3, dead_peer_rank, NULL, &o), 1);
  ASSERT(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  ASSERT(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0);
  ASSERT(WIFEXITED(status[2]) && WEXITSTATUS(status[2]) == 0);
  return 0;
}

/* Peers' allocations of `bytes` mapped between two readings of this
 * process's mappings, rounded. */
static int peers_in(size_t from, size_t to, size_t bytes) {
  return (int)((to - from + bytes / 2) / bytes);
}

/* A rank that writes its right neighbour maps that one peer, and the peer
 * pointer array then maps the others; with SYMM_MAP_PEERS=at_rendezvous
 * the rendezvous maps them all.  Counted in this process's mappings
 * (/proc/self/maps), the tensor large enough to stand out. */
static int used_peers_rank(int rank, int size, void *arg) {
  const bool at_rendezvous = arg != NULL;
  if (at_rendezvous) setenv("SYMM_MAP_PEERS", "at_rendezvous", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const int64_t n = 16 << 20;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  const size_t bytes = (size_t)n; /* each peer maps a little more: its pad */
  const size_t m0 = test_mapped_bytes();
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
  ((unsigned char *)v.data)[0] = (unsigned char)(rank + 1);
  const size_t m1 = test_mapped_bytes();
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  const size_t m2 = test_mapped_bytes();
  printf("rank %d (%s): %d peer(s) mapped after one view, %d after the pointer array\n", rank,
         at_rendezvous ? "at_rendezvous" : "on_use", peers_in(m0, m1, bytes),
         peers_in(m0, m2, bytes));
  ASSERT_EQ(peers_in(m0, m1, bytes), at_rendezvous ? size - 1 : 1);
  ASSERT_EQ(peers_in(m0, m2, bytes), size - 1);
  for (int r = 0; r < size; r++) ASSERT(ptrs[r] != NULL);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_EQ(((unsigned char *)symm_tensor_data(t))[0], (rank + size - 1) % size + 1);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(scale_map_on_use_maps_what_is_used) {
  ASSERT_EQ(test_run_ranks(4, used_peers_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks(4, used_peers_rank, (void *)1), 0);
  return 0;
}

/* A collective remembers a buffer that needs no mapping on use (here:
 * inside a tensor not yet rendezvoused, so ordinary memory) only until the
 * next rendezvous: the same buffer, now a rendezvoused tensor's, gets
 * every peer mapped at its next call, read in place. */
static int settled_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const int64_t n = 1 << 18; /* 1 MiB of f32: read in place from 64 KiB */
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  float *x = symm_tensor_data(t);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(rank + 1);
  ASSERT_OK(symm_all_reduce(comm, x, x, (size_t)n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_tensor_rendezvous(t));
  for (int64_t i = 0; i < n; i++) x[i] = (float)(rank + 1);
  const size_t m0 = test_mapped_bytes();
  ASSERT_OK(symm_all_reduce(comm, x, x, (size_t)n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_EQ(peers_in(m0, test_mapped_bytes(), (size_t)n * sizeof *x), size - 1);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ((int)x[i], size * (size + 1) / 2);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(scale_map_on_use_after_rendezvous) {
  ASSERT_EQ(test_run_ranks(3, settled_rank, NULL), 0);
  return 0;
}

/* Threads that take their first views of the same peers at once: each
 * peer is mapped once (one pointer for every thread, one mapping's bytes
 * per peer), and the stores through any thread's view arrive. */
#define VIEW_THREADS 4
typedef struct {
  symm_tensor_t *t;
  int size;
  void *seen[8];
} view_thread_t;

static void *take_views(void *arg) {
  view_thread_t *v = arg;
  for (int k = 0; k < v->size; k++) {
    symm_view_t view;
    ASSERT_OK(symm_tensor_remote_view(v->t, k, &view));
    v->seen[k] = view.data;
  }
  return NULL;
}

static int threads_views_rank(int rank, int size, void *arg) {
  (void)arg;
  ASSERT(size <= 8);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const int64_t n = 16 << 20;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  pthread_t th[VIEW_THREADS];
  view_thread_t v[VIEW_THREADS];
  /* Threads that do nothing first: their stacks, which the C library
   * keeps for the next threads, are mapped before the count starts. */
  for (int i = 0; i < VIEW_THREADS; i++) {
    v[i] = (view_thread_t){.t = t, .size = 0};
    ASSERT_EQ(pthread_create(&th[i], NULL, take_views, &v[i]), 0);
  }
  for (int i = 0; i < VIEW_THREADS; i++) ASSERT_EQ(pthread_join(th[i], NULL), 0);
  const size_t m0 = test_mapped_bytes();
  for (int i = 0; i < VIEW_THREADS; i++) {
    v[i] = (view_thread_t){.t = t, .size = size};
    ASSERT_EQ(pthread_create(&th[i], NULL, take_views, &v[i]), 0);
  }
  for (int i = 0; i < VIEW_THREADS; i++) ASSERT_EQ(pthread_join(th[i], NULL), 0);
  ASSERT_EQ(peers_in(m0, test_mapped_bytes(), (size_t)n), size - 1);
  for (int i = 1; i < VIEW_THREADS; i++)
    for (int k = 0; k < size; k++) ASSERT_PTR_EQ(v[i].seen[k], v[0].seen[k]);
  ((unsigned char *)v[rank % VIEW_THREADS].seen[(rank + 1) % size])[1] = (unsigned char)(rank + 1);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_EQ(((unsigned char *)symm_tensor_data(t))[1], (rank + size - 1) % size + 1);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(scale_map_on_use_threads) {
  ASSERT_EQ(test_run_ranks(3, threads_views_rank, NULL), 0);
  return 0;
}
