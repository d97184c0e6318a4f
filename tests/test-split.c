/* Groups (symm_comm_split, symm_comm_split_2d) in real processes: uneven
 * groups ranked by key with a rank opting out, nested splits and the 2-D
 * layout, groups working on their own (collectives, tensors), overlapping
 * groups whose signals never cross, a split against another call and a
 * refused split (SYMM_ERR_MISMATCH), and a parent destroyed before its
 * groups.  The ranks_ tests run on every backend (conformance). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "symm_test_access.h"

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

/* Destroys n communicators, children before parents as listed. */
static void destroy_all(symm_comm_t *const *comms, size_t n) {
  for (size_t i = 0; i < n; i++) symm_comm_destroy(comms[i]);
}

/* A test that runs fn on n ranks. */
#define SPLIT_TEST(name, n, fn, arg)                                          \
  TEST_IMPL(name) {                                                           \
    ASSERT_EQ(test_run_ranks(n, fn, arg), 0);                                 \
    return 0;                                                                 \
  }

/* Whether this backend can make groups at all (nvshmem cannot). */
static bool splits(symm_comm_t *comm) { return !symm_comm_caps(comm)->collective_alloc; }

/* The group works on its own: an all-reduce of the members' parent ranks
 * (CPU memory; the fake GPU libraries run no kernels), and a tensor every
 * member writes into its right neighbour's. */
static void check_group(symm_comm_t *g, int parent_rank, int want_sum) {
  if (symm_comm_device(g) < 0) {
    int64_t x = parent_rank;
    ASSERT_OK(symm_all_reduce(g, &x, &x, 1, SYMM_DTYPE_I64, SYMM_REDUCE_SUM, NULL));
    ASSERT_EQ(x, want_sum);
  }
  const int r = symm_comm_rank(g), w = symm_comm_size(g);
  int64_t n = 16;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(g, &n, 1, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  if (symm_comm_device(g) < 0) { /* CPU memory: store into the neighbour's */
    ((volatile int64_t *)ptrs[(r + 1) % w])[0] = 100 + parent_rank;
    ASSERT_OK(symm_comm_barrier(g));
    ASSERT_NE(((volatile int64_t *)ptrs[r])[0], 0);
  }
  ASSERT_OK(symm_comm_barrier(g));
  ASSERT_OK(symm_tensor_free(t));
}

/* color = rank % 3, key = -rank (the group in reverse), the last rank
 * opting out. */
static int groups_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  const int color = rank == size - 1 ? SYMM_SPLIT_NONE : rank % 3;
  symm_comm_t *g = (symm_comm_t *)0x1;
  if (!splits(comm)) {
    ASSERT_RES(symm_comm_split(comm, color, -rank, &g), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "allocates over every rank");
    ASSERT(g == NULL);
    symm_comm_destroy(comm);
    return 0;
  }
  ASSERT_OK(symm_comm_split(comm, color, -rank, &g));
  if (color == SYMM_SPLIT_NONE) {
    ASSERT(g == NULL);
  } else {
    int members = 0, above = 0, sum = 0;
    for (int r = 0; r < size - 1; r++)
      if (r % 3 == color) {
        members++;
        above += r > rank;
        sum += r;
      }
    ASSERT_EQ(symm_comm_size(g), members);
    ASSERT_EQ(symm_comm_rank(g), above); /* ranked by key: the highest parent rank first */
    ASSERT_EQ(symm_comm_backend(g), symm_comm_backend(comm));
    ASSERT_EQ(symm_comm_device(g), symm_comm_device(comm));
    check_group(g, rank, sum);
  }
  ASSERT_OK(symm_comm_barrier(comm)); /* the parent works beside its groups */
  symm_comm_destroy(g);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_split_groups) {
  ASSERT_EQ(test_run_ranks(2, groups_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks(5, groups_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks(8, groups_rank, NULL), 0);
  return 0;
}

/* The 2-D layout at 8 ranks (rows of 4, columns of 2), a group of a row,
 * and by host (one host here: the whole world). */
static int nested_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  if (!splits(comm)) {
    symm_comm_destroy(comm);
    return 0;
  }
  symm_comm_t *row = NULL, *col = NULL, *half = NULL, *host = NULL;
  ASSERT_OK(symm_comm_split_2d(comm, 4, &row, &col));
  ASSERT_EQ(symm_comm_size(row), 4);
  ASSERT_EQ(symm_comm_rank(row), rank % 4);
  ASSERT_EQ(symm_comm_size(col), size / 4);
  ASSERT_EQ(symm_comm_rank(col), rank / 4);
  const int row0 = rank / 4 * 4;
  check_group(row, rank, 4 * row0 + 6);
  check_group(col, rank, rank % 4 * (size / 4) + 4 * (size / 4) * (size / 4 - 1) / 2);
  ASSERT_OK(symm_comm_split(row, symm_comm_rank(row) % 2, 0, &half));
  ASSERT_EQ(symm_comm_size(half), 2);
  check_group(half, rank, rank % 2 == 0 ? 2 * row0 + 2 : 2 * row0 + 4);
  ASSERT_OK(symm_comm_split(comm, SYMM_SPLIT_BY_HOST, 0, &host));
  ASSERT_EQ(symm_comm_size(host), size);
  ASSERT_EQ(symm_comm_rank(host), rank);
  /* Refused layouts. */
  symm_comm_t *a = (symm_comm_t *)0x1, *b = (symm_comm_t *)0x1;
  ASSERT_RES(symm_comm_split_2d(comm, 3, &a, &b), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "divide");
  ASSERT(a == NULL && b == NULL);
  symm_comm_t *const made[] = {half, row, host, col, comm};
  destroy_all(made, sizeof made / sizeof *made);
  return 0;
}

SPLIT_TEST(ranks_split_nested, 8, nested_rank, NULL)

/* A split where a peer makes another call, and one whose arguments a rank
 * refuses: every rank fails, and the communicator goes on in step. */
static int mismatch_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_comm_t *g = NULL;
  symm_result_t r = rank == 0 ? symm_comm_barrier(comm) : symm_comm_split(comm, 0, 0, &g);
  ASSERT_RES(r, SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "symm_comm_split");
  ASSERT(g == NULL);
  ASSERT_OK(symm_comm_barrier(comm));
  r = symm_comm_split(comm, rank == 1 ? -7 : 0, 0, &g);
  if (rank == 1) {
    ASSERT_RES(r, SYMM_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(symm_last_error(), "color -7");
  } else {
    ASSERT_RES(r, SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 1's call failed its argument checks");
  }
  ASSERT(g == NULL);
  ASSERT_RES(symm_comm_split(comm, 0, 0, NULL), SYMM_ERR_INVALID_ARG); /* every rank's own */
  ASSERT_STR_CONTAINS(symm_last_error(), "newcomm is NULL");
  if (splits(comm)) {
    ASSERT_OK(symm_comm_split(comm, 0, 0, &g));
    check_group(g, rank, 3);
    symm_comm_destroy(g);
  }
  symm_comm_destroy(comm);
  return 0;
}

SPLIT_TEST(ranks_split_mismatch, 3, mismatch_rank, NULL)

/* The parent goes first, on every rank, rank 0 serving the store: the
 * groups still work (the parent stays until its last group goes). */
static int parent_first_rank(int rank, int size, void *arg) {
  test_rank_serves_store(*(int *)arg);
  symm_comm_t *comm = init_comm();
  if (!splits(comm)) {
    symm_comm_destroy(comm);
    return 0;
  }
  symm_comm_t *g = NULL, *gg = NULL;
  ASSERT_OK(symm_comm_split(comm, 0, rank, &g));
  ASSERT_OK(symm_comm_split(g, 0, rank, &gg));
  symm_comm_destroy(comm);
  check_group(g, rank, size * (size - 1) / 2);
  symm_comm_destroy(g);
  check_group(gg, rank, size * (size - 1) / 2);
  symm_comm_destroy(gg);
  return 0;
}

TEST_IMPL(ranks_split_parent_destroyed_first) {
  int port = test_free_port();
  ASSERT_EQ(test_run_ranks(3, parent_first_rank, &port), 0);
  return 0;
}

/* Whether every word of this rank's pad of t is zero. */
static bool pad_clear(const symm_tensor_t *t) {
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, symm_comm_rank(symm_tensor_comm(t)), &pad));
  for (size_t i = 0; i < symm_comm_signal_pad_bytes(symm_tensor_comm(t)) / 4; i++)
    if (((volatile uint32_t *)pad)[i]) return false;
  return true;
}

/* Overlapping groups signalling at once never see each other's signals:
 * a put in one group lands in that group's pad only (the other group's
 * pad of the same rank stays clear, so its wait could not complete), and
 * balanced rounds in both, interleaved, leave both pads clear.  Host
 * backend (signals at once). */
static int isolation_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  symm_comm_t *all = NULL, *three = NULL;
  ASSERT_OK(symm_comm_split(comm, 0, rank, &all));
  ASSERT_OK(symm_comm_split(comm, rank < 3 ? 0 : SYMM_SPLIT_NONE, rank, &three));
  int64_t n = 8;
  symm_tensor_t *ta = NULL, *t3 = NULL;
  ASSERT_OK(symm_tensor_alloc(all, &n, 1, SYMM_DTYPE_I64, &ta));
  ASSERT_OK(symm_tensor_rendezvous(ta));
  if (three) {
    ASSERT_OK(symm_tensor_alloc(three, &n, 1, SYMM_DTYPE_I64, &t3));
    ASSERT_OK(symm_tensor_rendezvous(t3));
  }
  /* Rank 1 signals rank 0 in `all` only, on the channel and as the sender
   * that rank 0's slot in `three` would take. */
  if (rank == 1) ASSERT_OK(symm_signal_put(ta, 0, 0, NULL));
  ASSERT_OK(symm_comm_barrier(comm));
  if (rank == 0) {
    ASSERT(pad_clear(t3));
    ASSERT(!pad_clear(ta));
    ASSERT_OK(symm_signal_wait(ta, 1, 0, NULL));
  }
  ASSERT_OK(symm_comm_barrier(comm));
  /* Both groups' rings at once, interleaved, every round. */
  for (int round = 0; round < 200; round++) {
    const int w = size, r = rank;
    ASSERT_OK(symm_signal_put(ta, (r + 1) % w, 1, NULL));
    if (three) ASSERT_OK(symm_signal_put(t3, (r + 1) % 3, 1, NULL));
    ASSERT_OK(symm_signal_wait(ta, (r + w - 1) % w, 1, NULL));
    if (three) ASSERT_OK(symm_signal_wait(t3, (r + 2) % 3, 1, NULL));
  }
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT(pad_clear(ta));
  if (t3) ASSERT(pad_clear(t3));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(ta);
  symm_tensor_free(t3);
  symm_comm_t *const made[] = {three, all, comm};
  destroy_all(made, sizeof made / sizeof *made);
  return 0;
}

SPLIT_TEST(split_isolation, 4, isolation_rank, NULL)
