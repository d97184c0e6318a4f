/* All-to-all-v on the host backend, in real processes: host counts
 * (packed, explicit displacements in any order with gaps), the device-split
 * forms (1-D, 2-D expert-major with alignment, combine as the inverse of
 * the dispatch), random and skewed counts with zeros and a rank that sends
 * nothing, every element checked against a reference each rank computes
 * from the whole count matrix on its own; faults (over capacity, bad
 * splits, counts that do not add up, overlapping receive ranges, ranks
 * that call differently) reported on every rank with nothing written, and
 * the communicator usable after them; a call that grows the scratch. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "symm_test_access.h" /* the scratch that grows */

#define SENTINEL 0xA5A5A5A5u
#define MAX_W 8
#define MAX_E 4

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

/* Rows chunk (s -> d, expert e) of round `seed`: random, a quarter of them
 * 0, rank w - 1 sending nothing in odd rounds, destination 0 getting
 * `skew` times more than the others.  Every rank computes every entry. */
static uint64_t rows_of(unsigned seed, int s, int d, int e, int w, int skew) {
  if ((seed & 1) && s == w - 1) return 0;
  uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(s * 131 + d * 17 + e) << 20;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  if (x % 4 == 0) return 0;
  return (x >> 8) % 9 * (d == 0 ? (uint64_t)skew : 1);
}

/* Element k of row j of chunk (s -> d, e): unique over the job. */
static uint32_t value_of(int s, int d, int e, uint64_t j, size_t k) {
  return (uint32_t)(s * 0x01000193u ^ d * 0x9E3779B1u ^ e * 0x85EBCA6Bu ^
                    (uint32_t)j * 2654435761u) + (uint32_t)k;
}

typedef struct {
  int w, me, ne, skew;
  unsigned seed;
  size_t row; /* elements per row */
} job_t;

static uint64_t rows(const job_t *j, int s, int d, int e) {
  return rows_of(j->seed, s, d, e, j->w, j->skew);
}

/* This rank's send buffer, chunks packed rank-major (p, e): its rows. */
static uint64_t fill_send(const job_t *j, uint32_t *send, int64_t *splits) {
  uint64_t at = 0;
  for (int p = 0; p < j->w; p++)
    for (int e = 0; e < j->ne; e++) {
      const uint64_t n = rows(j, j->me, p, e);
      if (splits) splits[p * j->ne + e] = (int64_t)n;
      for (uint64_t r = 0; r < n; r++)
        for (size_t k = 0; k < j->row; k++)
          send[(at + r) * j->row + k] = value_of(j->me, p, e, r, k);
      at += n;
    }
  return at;
}

/* Checks recv rows [off, off + n) hold chunk (s -> me, e). */
static void check_chunk(const job_t *j, const uint32_t *recv, uint64_t off, int s, int e,
                        uint64_t n) {
  for (uint64_t r = 0; r < n; r++)
    for (size_t k = 0; k < j->row; k++)
      ASSERT_MSG(recv[(off + r) * j->row + k] == value_of(s, j->me, e, r, k),
                 "seed %u: row %llu of chunk from rank %d expert %d: %#x, want %#x", j->seed,
                 (unsigned long long)r, s, e, recv[(off + r) * j->row + k],
                 value_of(s, j->me, e, r, k));
}

/* Rows [from, to) of recv still hold the sentinel. */
static void check_untouched(const job_t *j, const uint32_t *recv, uint64_t from, uint64_t to) {
  for (uint64_t i = from * j->row; i < to * j->row; i++)
    ASSERT_MSG(recv[i] == SENTINEL, "seed %u: element %llu written (%#x)", j->seed,
               (unsigned long long)i, recv[i]);
}

/* Where buffers come from: malloc, or (coll_a2av_zero_copy) carved from a
 * symmetric tensor, which a round hands back whole. */
static struct {
  char *base, *at, *end;
} arena;

static uint32_t *sentinel_buf(size_t elems) {
  const size_t bytes = ((elems ? elems : 1) * sizeof(uint32_t) + 63) & ~(size_t)63;
  uint32_t *b;
  if (arena.base && (size_t)(arena.end - arena.at) >= bytes) {
    b = (uint32_t *)arena.at;
    arena.at += bytes;
  } else {
    b = malloc(bytes);
  }
  ASSERT(b);
  for (size_t i = 0; i < elems; i++) b[i] = SENTINEL;
  return b;
}

static void buf_free(void *p) {
  if (!arena.base || (char *)p < arena.base || (char *)p >= arena.end) free(p);
}

/* ------------------------------------------------------------ host counts */

/* symm_all_to_all_v with NULL (packed) displacements, or explicit ones
 * laid out in reverse rank order with a one-element gap before each. */
static void host_round(symm_comm_t *comm, const job_t *j, bool packed) {
  size_t sc[MAX_W], sd[MAX_W], rc[MAX_W], rd[MAX_W], sat = 0, rat = 0;
  for (int k = 0; k < j->w; k++) {
    const int p = packed ? k : j->w - 1 - k;
    sc[p] = rows(j, j->me, p, 0);
    rc[p] = rows(j, p, j->me, 0);
    sat += !packed, rat += !packed;
    sd[p] = sat, rd[p] = rat;
    sat += sc[p], rat += rc[p];
  }
  uint32_t *send = sentinel_buf(sat), *recv = sentinel_buf(rat + 1);
  for (int p = 0; p < j->w; p++)
    for (size_t r = 0; r < sc[p]; r++) send[sd[p] + r] = value_of(j->me, p, 0, r, 0);
  ASSERT_OK(symm_all_to_all_v(comm, send, sc, packed ? NULL : sd, recv, rc, packed ? NULL : rd,
                              SYMM_DTYPE_U32, NULL));
  uint64_t expect_at = 0;
  for (int k = 0; k < j->w; k++) {
    const int p = packed ? k : j->w - 1 - k;
    if (!packed) check_untouched(j, recv, expect_at, expect_at + 1), expect_at++;
    check_chunk(j, recv, expect_at, p, 0, rc[p]);
    expect_at += rc[p];
  }
  check_untouched(j, recv, rat, rat + 1);
  buf_free(send);
  buf_free(recv);
}

/* ---------------------------------------------------------- device splits */

/* Rows this rank receives in all, and the 2-D layout's end with align. */
static uint64_t recv_total(const job_t *j, size_t align) {
  uint64_t at = 0;
  for (int e = 0; e < j->ne; e++) {
    at = (at + align - 1) / align * align;
    for (int p = 0; p < j->w; p++) at += rows(j, p, j->me, e);
  }
  return at;
}

/* symm_all_to_all_vdev (ne 1) or _2d: data, out_splits_offsets and the
 * rows between blocks checked; the buffers are returned for a combine. */
static void dispatch_round(symm_comm_t *comm, const job_t *j, size_t align, uint32_t **send_out,
                           uint64_t *send_rows, uint32_t **recv_out, uint64_t *cap,
                           int64_t **so_out) {
  const size_t chunks = (size_t)j->w * (size_t)j->ne;
  int64_t *splits = calloc(chunks, sizeof *splits), *so = calloc(2 * chunks, sizeof *so);
  uint32_t *send = sentinel_buf(9 * (size_t)j->skew * chunks * j->row);
  const uint64_t srows = fill_send(j, send, splits);
  *cap = recv_total(j, align) + 3; /* room to spare, left alone */
  uint32_t *recv = sentinel_buf(*cap * j->row);
  if (j->ne == 1 && align == 1)
    ASSERT_OK(symm_all_to_all_vdev(comm, send, srows, recv, *cap, j->row, SYMM_DTYPE_U32, splits,
                                   so, NULL));
  else
    ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, srows, recv, *cap, j->row, SYMM_DTYPE_U32,
                                      splits, so, j->ne, align, NULL));
  uint64_t at = 0;
  for (int e = 0; e < j->ne; e++) {
    const uint64_t start = (at + align - 1) / align * align;
    check_untouched(j, recv, at, start);
    at = start;
    for (int p = 0; p < j->w; p++) {
      const uint64_t n = rows(j, p, j->me, e);
      const size_t i = (size_t)e * (size_t)j->w + (size_t)p;
      ASSERT_MSG(so[i] == (int64_t)n && so[chunks + i] == (int64_t)at,
                 "seed %u: out_splits_offsets of expert %d from rank %d: %lld at %lld, want "
                 "%llu at %llu", j->seed, e, p, (long long)so[i], (long long)so[chunks + i],
                 (unsigned long long)n, (unsigned long long)at);
      check_chunk(j, recv, at, p, e, n);
      at += n;
    }
  }
  check_untouched(j, recv, at, *cap);
  free(splits);
  *send_out = send, *send_rows = srows, *recv_out = recv, *so_out = so;
}

/* The 2-D dispatch, then its combine: every rank gets its input back. */
static void moe_round(symm_comm_t *comm, const job_t *j, size_t align) {
  uint32_t *send, *recv;
  uint64_t srows, cap;
  int64_t *so;
  dispatch_round(comm, j, align, &send, &srows, &recv, &cap, &so);
  const size_t chunks = (size_t)j->w * (size_t)j->ne;
  int64_t *back = calloc(2 * chunks, sizeof *back);
  uint32_t *out = sentinel_buf((srows + 2) * j->row);
  ASSERT_OK(symm_all_to_all_vdev_2d_combine(comm, recv, cap, out, srows + 2, j->row,
                                            SYMM_DTYPE_U32, so, back, j->ne, NULL));
  ASSERT_MSG(memcmp(out, send, srows * j->row * sizeof *out) == 0,
             "seed %u: the combine did not give the dispatch's input back", j->seed);
  check_untouched(j, out, srows, srows + 2);
  int64_t at = 0;
  for (size_t i = 0; i < chunks; i++) {
    const int64_t n = (int64_t)rows(j, j->me, (int)(i / (size_t)j->ne), (int)(i % (size_t)j->ne));
    ASSERT_MSG(back[i] == n && back[chunks + i] == at, "combine's out_splits_offsets[%zu]: %lld "
               "at %lld, want %lld at %lld", i, (long long)back[i], (long long)back[chunks + i],
               (long long)n, (long long)at);
    at += n;
  }
  buf_free(send), buf_free(recv), free(so), free(back), buf_free(out);
}

static void vdev_round(symm_comm_t *comm, const job_t *j) {
  uint32_t *send, *recv;
  uint64_t srows, cap;
  int64_t *so;
  dispatch_round(comm, j, 1, &send, &srows, &recv, &cap, &so);
  buf_free(send), buf_free(recv), free(so);
}

/* Every form over seeds, uniform and skewed. */
static int forms_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  for (unsigned seed = 1; seed <= 6; seed++) {
    const int skew = seed > 3 ? 8 : 1;
    job_t j = {size, rank, 1, skew, seed, 1};
    host_round(comm, &j, true);
    host_round(comm, &j, false);
    j.row = 3;
    vdev_round(comm, &j);
    j.ne = seed % 3 + 1;
    moe_round(comm, &j, 1);
    moe_round(comm, &j, seed & 1 ? 8 : 16);
  }
  symm_comm_destroy(comm);
  return 0;
}

#define FORMS_TEST(n, timeout)                                                \
  TEST_IMPL(coll_a2av_##n) {                                                  \
    ASSERT_EQ(test_run_ranks(n, forms_rank, NULL), 0);                        \
    return 0;                                                                 \
  }
FORMS_TEST(2, 60)
FORMS_TEST(3, 60)
FORMS_TEST(5, 90)
FORMS_TEST(8, 120)

/* ------------------------------------------------------------------ faults */

/* A good call after a fault: the communicator is usable. */
static void check_recovers(symm_comm_t *comm, int rank, int size) {
  job_t j = {size, rank, 1, 1, 2, 3};
  vdev_round(comm, &j);
}

/* Every rank's buffers for one dispatch of job j (ne 1, row 3). */
typedef struct {
  int64_t splits[MAX_W], so[2 * MAX_W];
  uint32_t *send, *recv;
  uint64_t srows, cap;
} vbufs_t;

static void vbufs(const job_t *j, vbufs_t *b) {
  memset(b, 0, sizeof *b);
  b->send = sentinel_buf(9 * (size_t)j->w * j->row);
  b->srows = fill_send(j, b->send, b->splits);
  b->cap = recv_total(j, 1);
  b->recv = sentinel_buf((b->cap + 1) * j->row);
}

static symm_result_t vdev(symm_comm_t *comm, const job_t *j, vbufs_t *b) {
  return symm_all_to_all_vdev(comm, b->send, b->srows, b->recv, b->cap, j->row, SYMM_DTYPE_U32,
                              b->splits, b->so, NULL);
}

/* The call failed with res on every rank, message containing want, and
 * wrote nothing. */
static void check_refused(const job_t *j, vbufs_t *b, symm_result_t res, symm_result_t code,
                          const char *want) {
  ASSERT_RES(res, code);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  check_untouched(j, b->recv, 0, b->cap + 1);
  free(b->send), free(b->recv);
}

static int faults_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  const job_t j = {size, rank, 1, 1, 4, 3};
  vbufs_t b;
  /* Rank 1 has room for one row less than it gets. */
  vbufs(&j, &b);
  if (rank == 1) b.cap--;
  check_refused(&j, &b, vdev(comm, &j, &b), SYMM_ERR_INVALID_ARG, "rank 1 would receive up to");
  check_recovers(comm, rank, size);
  /* Rank 0 sends a negative count. */
  vbufs(&j, &b);
  if (rank == 0) b.splits[1] = -3;
  check_refused(&j, &b, vdev(comm, &j, &b), SYMM_ERR_INVALID_ARG,
                "rank 0's splits entry 1 is -3");
  check_recovers(comm, rank, size);
  /* Rank 2's splits reach past its send buffer. */
  vbufs(&j, &b);
  if (rank == 2) b.srows--;
  check_refused(&j, &b, vdev(comm, &j, &b), SYMM_ERR_INVALID_ARG, "rank 2's splits reach row");
  check_recovers(comm, rank, size);
  /* The ranks pass different row lengths. */
  vbufs(&j, &b);
  job_t odd = j;
  odd.row = rank == 1 ? 2 : 3;
  check_refused(&j, &b, vdev(comm, &odd, &b), SYMM_ERR_MISMATCH, "symm_all_to_all_v(count ");
  check_recovers(comm, rank, size);
  /* Rank 2 makes a plain all-to-all where the others make a vdev. */
  vbufs(&j, &b);
  symm_result_t res = rank == 2 ? symm_all_to_all(comm, b.send, b.recv, 1, SYMM_DTYPE_U32, NULL)
                                : vdev(comm, &j, &b);
  check_refused(&j, &b, res, SYMM_ERR_MISMATCH, "rank 2 called symm_all_to_all(count 1");
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_a2av_faults) {
  ASSERT_EQ(test_run_ranks(3, faults_rank, NULL), 0);
  return 0;
}

/* Host counts that do not add up, receive ranges that overlap, and what
 * each rank refuses by itself. */
static int host_faults_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  size_t sc[MAX_W], rc[MAX_W], rd[MAX_W];
  uint32_t send[64], recv[64];
  for (int p = 0; p < size; p++) sc[p] = rc[p] = 2, rd[p] = 2 * (size_t)p;
  memset(recv, 0xA5, sizeof recv);
  if (rank == 1) rc[0] = 3, rd[1] = 3, rd[2] = 5;
  ASSERT_RES(symm_all_to_all_v(comm, send, sc, NULL, recv, rc, rd, SYMM_DTYPE_U32, NULL),
             SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 0 sends 2 elements to rank 1, whose "
                      "recv_counts[0] is 3");
  for (int i = 0; i < 64; i++) ASSERT_EQ(recv[i], SENTINEL);
  /* Rank 0's ranges overlap: refused there, a mismatch on the others. */
  for (int p = 0; p < size; p++) rc[p] = 2, rd[p] = 2 * (size_t)p;
  if (rank == 0) rd[1] = 1;
  symm_result_t res = symm_all_to_all_v(comm, send, sc, NULL, recv, rc, rd, SYMM_DTYPE_U32, NULL);
  ASSERT_RES(res, rank == 0 ? SYMM_ERR_INVALID_ARG : SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), rank == 0 ? "overlap" : "rank 0's symm_all_to_all_v "
                                                                 "failed its argument checks");
  /* Refused on every rank alike: no counts, no splits, no experts. */
  int64_t sp[2 * MAX_W] = {0}, so[2 * MAX_W];
  ASSERT_RES(symm_all_to_all_v(comm, send, NULL, NULL, recv, rc, NULL, SYMM_DTYPE_U32, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_to_all_vdev(comm, send, 4, recv, 4, 1, SYMM_DTYPE_U32, NULL, so, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_to_all_vdev(comm, send, 4, recv, 4, 0, SYMM_DTYPE_U32, sp, so, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_to_all_vdev_2d(comm, send, 4, recv, 4, 1, SYMM_DTYPE_U32, sp, so, 0, 1,
                                     NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_to_all_vdev(comm, NULL, 4, recv, 4, 1, SYMM_DTYPE_U32, sp, so, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_to_all_v(NULL, send, sc, NULL, recv, rc, NULL, SYMM_DTYPE_U32, NULL),
             SYMM_ERR_INVALID_ARG);
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_a2av_host_faults) {
  ASSERT_EQ(test_run_ranks(3, host_faults_rank, NULL), 0);
  return 0;
}

/* Rows of 4 KiB, rank 0 getting 8 times the others' share: the calls need
 * more than the 64 KiB scratch, rank 0 most of all, and grow it together. */
static int grow_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  setenv("SYMM_HOST_CMA", "off", 1); /* else large senders are read in their processes */
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size); /* a small scratch first */
  const symm_tensor_t *before = symm_comm_scratch_current(comm);
  const size_t small = before ? symm_tensor_nbytes(before) : 0;
  for (unsigned seed = 3; seed <= 4; seed++) {
    job_t j = {size, rank, 2, 8, seed, 1024};
    moe_round(comm, &j, 4);
  }
  const symm_tensor_t *after = symm_comm_scratch_current(comm);
  ASSERT_MSG(after && symm_tensor_nbytes(after) > small, "the scratch did not grow (%zu bytes)",
             small);
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_a2av_grow) {
  ASSERT_EQ(test_run_ranks(3, grow_rank, NULL), 0);
  return 0;
}

/* Zero copy: buffers in a symmetric tensor, rows of 2800 bytes, 3 ranks,
 * a 64 KiB scratch.  Rounds where every rank's buffers are symmetric read
 * the senders' buffers in place; rounds where one rank's are malloc'd make
 * the others stage late (growing the scratch the first time).  Every
 * element and out_splits_offsets checked; each rank's log (SYMM_DEBUG=
 * TRACE) shows that both paths ran. */
static int zero_copy_rank(int rank, int size, void *arg) {
  const char *dir = arg;
  char log[256];
  test_log_coll_to(dir, "a2av", rank, "TRACE", log, sizeof log);
  setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  symm_comm_t *comm = init_comm();
  int64_t n = 16 << 20;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  for (unsigned seed = 1; seed <= 8; seed++) {
    const bool symmetric = seed <= 4 || rank != (int)seed % size;
    arena.base = arena.at = symmetric ? symm_tensor_data(t) : NULL;
    arena.end = arena.base ? arena.base + n : NULL;
    job_t j = {size, rank, 1, seed & 1 ? 8 : 1, seed, 700};
    vdev_round(comm, &j);
    j.ne = seed % 3 + 1;
    moe_round(comm, &j, seed & 2 ? 8 : 1);
  }
  arena.base = arena.at = arena.end = NULL;
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  FILE *f = fopen(log, "r");
  ASSERT(f);
  char line[512];
  int zero_copy = 0, late = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "symm_all_to_all_v #")) continue;
    zero_copy += strstr(line, ": zero copy") != NULL;
    late += strstr(line, ": staged late") != NULL;
  }
  fclose(f);
  ASSERT_MSG(zero_copy >= 8 && late >= 4, "rank %d: %d calls read in place, %d staged late", rank,
             zero_copy, late);
  return 0;
}

TEST_IMPL(coll_a2av_zero_copy) {
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, zero_copy_rank, NULL), 0);
  return 0;
}
