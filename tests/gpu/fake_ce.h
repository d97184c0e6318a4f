/* Copy-engine collectives (SYMM_ALGO_CE) over the fake driver, for every
 * GPU backend's fake tests: what a call issues (the barriers, one copy per
 * rank into its scratch, the copies into recvbuf, in that order), the data
 * every rank receives (the fake runs copies and the copy-engine barrier at
 * once, in order, across processes), mismatches reported through the
 * asynchronous error, and the refusals.  Header-only: each fake-test
 * program includes it once. */
#ifndef SYMM_FAKE_CE_H
#define SYMM_FAKE_CE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_util.h"
#include "harness.h"
#include "kernels/coll_abi.h"
#include "symm_backend.h"
#include "symmem.h"

/* The fake's launch log. */
typedef struct fake_ce_log {
  long (*count)(void);
  bool (*get)(long, fakecuda_launch_t *);
} fake_ce_log_t;

static inline fake_ce_log_t fake_ce_log(void) {
  fake_ce_log_t g = {NULL, NULL};
  *(void **)&g.count = fake_sym("fakecuda_launch_count");
  *(void **)&g.get = fake_sym("fakecuda_launch_get");
  ASSERT_MSG(g.count && g.get, "the fake driver's launch log");
  return g;
}

/* Byte i of rank r's data for piece `piece`. */
static inline uint8_t fake_ce_byte(int r, int piece, size_t i) {
  return (uint8_t)(r * 37 + piece * 101 + (int)(i % 251) + 1);
}

/* Entry `at` of the log is a copy-engine barrier on the scratch's slots. */
static inline void fake_ce_expect_barrier(fake_ce_log_t log, long at, symm_comm_t *comm) {
  fakecuda_launch_t l;
  ASSERT_MSG(log.get(at, &l) && strcmp(l.name, "symm_signal_op") == 0, "entry %ld is %s", at,
             l.name);
  symm_signal_params_t p;
  memcpy(&p, l.params, sizeof p);
  ASSERT_EQ(l.grid, 1u);
  ASSERT_EQ(p.op, SYMM_SIGNAL_OP_CE);
  const int world = symm_comm_size(comm);
  symm_tensor_t *scratch = symm_comm_scratch_current(comm);
  ASSERT_MSG(scratch, "no scratch after a copy-engine call");
  for (int r = 0; r < world; r++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(scratch, r, &pad));
    ASSERT_EQ(p.pads[r], (uint64_t)(uintptr_t)pad + symm_coll_ce_off((unsigned)world));
    ASSERT_MSG(r == p.rank || (p.put_value[r] & 1u), "value %#x for rank %d", p.put_value[r], r);
  }
}

/* Entry `at` is a copy of n bytes from src to dst. */
static inline void fake_ce_expect_copy(fake_ce_log_t log, long at, const void *dst,
                                       const void *src, uint64_t n) {
  fakecuda_launch_t l;
  ASSERT_MSG(log.get(at, &l) && strcmp(l.name, "cuMemcpyAsync") == 0, "entry %ld is %s", at,
             l.name);
  uint64_t a[3];
  memcpy(a, l.params, sizeof a);
  ASSERT_MSG(a[0] == (uint64_t)(uintptr_t)dst && a[1] == (uint64_t)(uintptr_t)src && a[2] == n,
             "entry %ld copies %#llx <- %#llx, %llu bytes; expected %p <- %p, %llu", at,
             (unsigned long long)a[0], (unsigned long long)a[1], (unsigned long long)a[2], dst,
             src, (unsigned long long)n);
}

/* Rank r's staging in the scratch, as mapped here. */
static inline char *fake_ce_stage(symm_comm_t *comm, int r) {
  void *const *data = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(symm_comm_scratch_current(comm), &data));
  return (char *)data[r] + SYMM_COLL_STAGE_OFF;
}

/* An all-gather of n bytes a rank, out of place or in place: barrier, a
 * copy to every rank (the next rank first), barrier, one copy into recv,
 * barrier (every rank's staging read: the next collective may push into
 * it); every rank's piece in recv. */
static inline void fake_ce_all_gather(symm_comm_t *comm, size_t n, bool in_place) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  fake_ce_log_t log = fake_ce_log();
  uint8_t *recv = malloc(n * (size_t)W + 1), *send = in_place ? recv + n * (size_t)rank
                                                              : malloc(n + 1);
  ASSERT_MSG(recv && send, "out of memory");
  memset(recv, 0xEE, n * (size_t)W + 1);
  for (size_t i = 0; i < n; i++) send[i] = fake_ce_byte(rank, 0, i);
  const long before = log.count();
  ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
  ASSERT_OK(symm_comm_check_async_error(comm));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++) ASSERT_EQ(recv[(size_t)r * n + i], fake_ce_byte(r, 0, i));
  ASSERT_EQ(recv[n * (size_t)W], 0xEE);
  const long copies = n ? W + 1 : 0;
  ASSERT_EQ(log.count(), before + 3 + copies);
  fake_ce_expect_barrier(log, before, comm);
  for (int k = 1; n && k <= W; k++) {
    const int p = (rank + k) % W;
    fake_ce_expect_copy(log, before + k, fake_ce_stage(comm, p) + (size_t)rank * n, send, n);
  }
  fake_ce_expect_barrier(log, before + 1 + (n ? W : 0), comm);
  if (n) fake_ce_expect_copy(log, before + 2 + W, recv, fake_ce_stage(comm, rank), n * (size_t)W);
  fake_ce_expect_barrier(log, before + 2 + copies, comm);
  if (!in_place) free(send);
  free(recv);
}

/* All-to-all of n bytes a pair, and a broadcast of n bytes from the last
 * rank (whose sendbuf alone is read): the data every rank receives. */
static inline void fake_ce_all_to_all_broadcast(symm_comm_t *comm, size_t n) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  uint8_t *send = malloc(n * (size_t)W), *recv = malloc(n * (size_t)W);
  ASSERT_MSG(send && recv, "out of memory");
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < n; i++) send[(size_t)p * n + i] = fake_ce_byte(rank, p, i);
  ASSERT_OK(symm_all_to_all(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++) ASSERT_EQ(recv[(size_t)r * n + i], fake_ce_byte(r, rank, i));
  memset(recv, 0, n);
  const int root = W - 1;
  ASSERT_OK(symm_broadcast(comm, rank == root ? send : NULL, recv, n, SYMM_DTYPE_U8, root,
                           NULL));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(recv[i], fake_ce_byte(root, 0, i));
  ASSERT_OK(symm_comm_check_async_error(comm));
  free(send);
  free(recv);
}

/* All-to-all-v with host counts: rank r sends (r + p) % 3 + 1 + extra[p]
 * bytes to rank p, packed; receives in reverse rank order.  One copy per
 * rank with data each way. */
static inline void fake_ce_all_to_all_v(symm_comm_t *comm, uint8_t *send_at, uint8_t *recv_at) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  size_t sc[SYMM_COLL_MAX_WORLD], rc[SYMM_COLL_MAX_WORLD], rd[SYMM_COLL_MAX_WORLD];
  size_t total_s = 0, total_r = 0;
  for (int p = 0; p < W; p++) {
    sc[p] = (size_t)((rank + p) % 3 + 1) * 1000;
    rc[p] = (size_t)((p + rank) % 3 + 1) * 1000;
    total_s += sc[p];
    total_r += rc[p];
  }
  for (int p = W - 1, at = 0; p >= 0; p--) { /* packed from the last source */
    rd[p] = (size_t)at;
    at += (int)rc[p];
  }
  uint8_t *send = send_at ? send_at : malloc(total_s), *recv = recv_at ? recv_at
                                                                         : malloc(total_r);
  ASSERT_MSG(send && recv, "out of memory");
  for (int p = 0, at = 0; p < W; at += (int)sc[p], p++)
    for (size_t i = 0; i < sc[p]; i++) send[(size_t)at + i] = fake_ce_byte(rank, p, i);
  fake_ce_log_t log = fake_ce_log();
  const long before = log.count();
  ASSERT_OK(symm_all_to_all_v(comm, send, sc, NULL, recv, rc, rd, SYMM_DTYPE_U8, NULL));
  ASSERT_OK(symm_comm_check_async_error(comm));
  ASSERT_EQ(log.count(), before + 3 + 2 * W);
  fake_ce_expect_barrier(log, before, comm);
  fake_ce_expect_barrier(log, before + 1 + W, comm);
  fake_ce_expect_barrier(log, before + 2 + 2 * W, comm);
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < rc[p]; i++) ASSERT_EQ(recv[rd[p] + i], fake_ce_byte(p, rank, i));
  if (!send_at) free(send);
  if (!recv_at) free(recv);
}

/* A rendezvoused tensor of `bytes` for the direct path: this rank's
 * data and every rank's mapping of it. */
typedef struct fake_ce_symm {
  symm_tensor_t *t;
  uint8_t *mine;
  uint8_t *peer[SYMM_COLL_MAX_WORLD];
  size_t bytes;
} fake_ce_symm_t;

static inline fake_ce_symm_t fake_ce_symm_make(symm_comm_t *comm, size_t bytes) {
  fake_ce_symm_t s;
  memset(&s, 0, sizeof s);
  int64_t n = (int64_t)bytes;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &s.t));
  ASSERT_OK(symm_tensor_rendezvous(s.t));
  void *const *data = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(s.t, &data));
  for (int r = 0; r < symm_comm_size(comm); r++) s.peer[r] = data[r];
  s.mine = symm_tensor_data(s.t);
  s.bytes = bytes;
  return s;
}

/* Entries [at, at + n) of the log are the direct path's copies, in
 * order: into dst[k] from src[k], len bytes each. */
static inline void fake_ce_expect_pulls(fake_ce_log_t log, long at, int n, uint8_t *const *dst,
                                        uint8_t *const *src, size_t len) {
  for (int k = 0; k < n; k++) fake_ce_expect_copy(log, at + k, dst[k], src[k], len);
}

/* A direct all-gather of n bytes a rank into recvbuf at `off` of s (in
 * place or from ordinary memory): the own piece copied into its slot
 * (out of place only), a barrier, one copy from every peer's slot of its
 * recvbuf (the next rank first), two barriers, and nothing else. */
static inline void fake_ce_direct_gather(symm_comm_t *comm, fake_ce_symm_t *s, size_t off,
                                         size_t n, bool in_place) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  fake_ce_log_t log = fake_ce_log();
  uint8_t *recv = s->mine + off, *send = in_place ? recv + n * (size_t)rank : malloc(n);
  ASSERT_MSG(send, "out of memory");
  memset(recv, 0xEE, n * (size_t)W);
  for (size_t i = 0; i < n; i++) send[i] = fake_ce_byte(rank, 0, i);
  ASSERT_OK(symm_comm_barrier(comm)); /* no peer reads before this rank's input is there */
  const long before = log.count();
  ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
  ASSERT_OK(symm_comm_check_async_error(comm));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++) ASSERT_EQ(recv[(size_t)r * n + i], fake_ce_byte(r, 0, i));
  const long pre = in_place ? 0 : 1;
  ASSERT_EQ(log.count(), before + pre + 3 + (W - 1));
  if (pre) fake_ce_expect_copy(log, before, recv + (size_t)rank * n, send, n);
  fake_ce_expect_barrier(log, before + pre, comm);
  uint8_t *dst[SYMM_COLL_MAX_WORLD], *src[SYMM_COLL_MAX_WORLD];
  for (int k = 1; k < W; k++) {
    const int p = (rank + k) % W;
    dst[k - 1] = recv + (size_t)p * n;
    src[k - 1] = s->peer[p] + off + (size_t)p * n;
  }
  fake_ce_expect_pulls(log, before + pre + 1, W - 1, dst, src, n);
  fake_ce_expect_barrier(log, before + pre + W, comm);
  fake_ce_expect_barrier(log, before + pre + W + 1, comm);
  if (!in_place) free(send);
  ASSERT_OK(symm_comm_barrier(comm)); /* every peer read this rank's recvbuf */
}

/* Direct calls that read the peers' sendbuf (all-gather whose recvbuf is
 * ordinary memory, all-to-all): a barrier, one copy per rank (its own
 * last) straight into recvbuf, two barriers (the third every call meets). */
static inline void fake_ce_direct_from_send(symm_comm_t *comm, fake_ce_symm_t *s, size_t n,
                                            bool a2a) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  fake_ce_log_t log = fake_ce_log();
  const size_t pieces = a2a ? (size_t)W : 1;
  uint8_t *send = s->mine + 256, *recv = malloc(n * (size_t)W);
  ASSERT_MSG(recv, "out of memory");
  for (size_t q = 0; q < pieces; q++)
    for (size_t i = 0; i < n; i++) send[q * n + i] = fake_ce_byte(rank, (int)q, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const long before = log.count();
  if (a2a) ASSERT_OK(symm_all_to_all(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
  else ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
  ASSERT_OK(symm_comm_check_async_error(comm));
  for (int r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(recv[(size_t)r * n + i], fake_ce_byte(r, a2a ? rank : 0, i));
  ASSERT_EQ(log.count(), before + 3 + W);
  fake_ce_expect_barrier(log, before, comm);
  uint8_t *dst[SYMM_COLL_MAX_WORLD], *src[SYMM_COLL_MAX_WORLD];
  for (int k = 1; k <= W; k++) {
    const int p = (rank + k) % W;
    dst[k - 1] = recv + (size_t)p * n;
    src[k - 1] = s->peer[p] + 256 + (a2a ? (size_t)rank * n : 0);
  }
  fake_ce_expect_pulls(log, before + 1, W, dst, src, n);
  fake_ce_expect_barrier(log, before + 1 + W, comm);
  fake_ce_expect_barrier(log, before + 2 + W, comm);
  free(recv);
  ASSERT_OK(symm_comm_barrier(comm));
}

/* A direct broadcast of n bytes from the last rank into recvbuf in s:
 * the root copies its sendbuf into its recvbuf (out of place) and meets
 * three barriers; every other rank copies once, from the root's recvbuf. */
static inline void fake_ce_direct_bcast(symm_comm_t *comm, fake_ce_symm_t *s, size_t n,
                                        bool in_place) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm), root = W - 1;
  fake_ce_log_t log = fake_ce_log();
  uint8_t *recv = s->mine + 512, *send = in_place ? recv : malloc(n);
  ASSERT_MSG(send, "out of memory");
  memset(recv, 0xEE, n);
  for (size_t i = 0; rank == root && i < n; i++) send[i] = fake_ce_byte(root, 3, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const long before = log.count();
  ASSERT_OK(symm_broadcast(comm, rank == root ? send : NULL, recv, n, SYMM_DTYPE_U8, root,
                           NULL));
  ASSERT_OK(symm_comm_check_async_error(comm));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(recv[i], fake_ce_byte(root, 3, i));
  const long pre = rank == root && !in_place ? 1 : 0, pulls = rank == root ? 0 : 1;
  ASSERT_EQ(log.count(), before + pre + 3 + pulls);
  if (pre) fake_ce_expect_copy(log, before, recv, send, n);
  fake_ce_expect_barrier(log, before + pre, comm);
  if (pulls) fake_ce_expect_copy(log, before + 1, recv, s->peer[root] + 512, n);
  fake_ce_expect_barrier(log, before + pre + 1 + pulls, comm);
  fake_ce_expect_barrier(log, before + pre + 2 + pulls, comm);
  if (!in_place) free(send);
  ASSERT_OK(symm_comm_barrier(comm));
}

/* Ranks that disagree on the direct path (rank 0's recvbuf in the tensor,
 * the others' in ordinary memory; then the tensor at offsets that differ
 * by rank): every rank records SYMM_ERR_MISMATCH, and no rank's tensor is
 * written outside its own recvbuf (the pulls write only their own). */
static inline void fake_ce_direct_disagree(symm_comm_t *comm, fake_ce_symm_t *s) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  const size_t n = 1000, off = (size_t)rank * 256;
  uint8_t *plain = malloc(n * (size_t)W), send[1000];
  ASSERT_MSG(plain, "out of memory");
  memset(send, rank + 1, n);
  for (int layout = 0; layout < 2; layout++) {
    memset(s->mine, 0xAB, s->bytes);
    ASSERT_OK(symm_comm_barrier(comm));
    uint8_t *recv = layout == 0 ? (rank == 0 ? s->mine : plain) : s->mine + off;
    ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_U8, NULL));
    ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(), "symmetric tensor");
    ASSERT_OK(symm_comm_barrier(comm)); /* every rank's copies are done */
    const uint8_t *lo = recv, *hi = recv + n * (size_t)W;
    for (size_t i = 0; i < s->bytes; i++)
      if (s->mine + i < lo || s->mine + i >= hi) ASSERT_EQ(s->mine[i], 0xAB);
  }
  free(plain);
}

/* The direct path at every size class, in place and out of place, above
 * the scratch's size without growing it, allocating nothing; all-to-all-v
 * on symmetric buffers stays staged and right; disagreeing ranks. */
static inline void fake_ce_direct(symm_comm_t *comm) {
  const int W = symm_comm_size(comm);
  symm_tensor_t *scratch = symm_comm_scratch_current(comm);
  ASSERT_MSG(scratch, "no scratch after copy-engine calls");
  const size_t S = symm_tensor_nbytes(scratch), big = S / (size_t)W + 4099;
  fake_ce_symm_t s = fake_ce_symm_make(comm, big * (size_t)W + 4096);
  static const size_t sizes[] = {1, 7, 4099, (size_t)1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int ip = 0; ip < 2; ip++) {
      fake_ce_direct_gather(comm, &s, ip ? 0 : 768, sizes[k], ip);
      fake_ce_direct_bcast(comm, &s, sizes[k], ip);
    }
  fake_ce_direct_from_send(comm, &s, 4099, false);
  fake_ce_direct_from_send(comm, &s, 4099, true);
  const fakecuda_stats_t a = fake_stats();
  fake_ce_direct_gather(comm, &s, 0, big, true); /* W x big bytes: more than the scratch */
  fake_ce_direct_gather(comm, &s, 0, big, false);
  fake_ce_direct_from_send(comm, &s, big - 256 / (size_t)W - 1, true);
  const fakecuda_stats_t b = fake_stats();
  ASSERT_EQ(b.handles, a.handles);
  ASSERT_EQ(b.mappings, a.mappings);
  ASSERT_EQ(b.devallocs, a.devallocs);
  ASSERT_MSG(symm_comm_scratch_current(comm) == scratch &&
             symm_tensor_nbytes(scratch) == S, "the direct path grew the scratch");
  fake_ce_all_to_all_v(comm, s.mine, s.mine + s.bytes / 2);
  fake_ce_direct_disagree(comm, &s);
  fake_ce_direct_gather(comm, &s, 0, 33, false); /* the next agreeing call runs */
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(s.t);
}

/* Ranks whose calls differ: every rank's barrier sees another value and
 * records SYMM_ERR_MISMATCH; the barriers stay in step, so the next call
 * runs.  All-to-all-v: the receiver of a count its sender does not send
 * reports it. */
static inline void fake_ce_mismatch(symm_comm_t *comm) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  uint8_t send[64] = {0}, recv[64 * SYMM_COLL_MAX_WORLD];
  ASSERT_OK(symm_all_gather(comm, send, recv, rank == 0 ? 8 : 9, SYMM_DTYPE_U8, NULL));
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "copy-engine collective");
  size_t sc[SYMM_COLL_MAX_WORLD], rc[SYMM_COLL_MAX_WORLD];
  for (int p = 0; p < W; p++) sc[p] = rc[p] = 2;
  if (rank == 0) sc[1] = 3; /* rank 1 expects 2 */
  ASSERT_OK(symm_all_to_all_v(comm, send, sc, NULL, recv, rc, NULL, SYMM_DTYPE_U8, NULL));
  ASSERT_RES(symm_comm_check_async_error(comm), rank == 1 ? SYMM_ERR_MISMATCH : SYMM_SUCCESS);
  fake_ce_all_gather(comm, 5, false);
}

/* What CE refuses, naming why, and what it maps: the device-split forms,
 * an all-reduce, algorithms that are not copies; a refused all-to-all-v
 * chunk fails every rank (the others through the asynchronous error). */
static inline void fake_ce_refusals(symm_comm_t *comm) {
  const int rank = symm_comm_rank(comm);
  ASSERT_RES(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_CE), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "only copy");
  ASSERT_RES(symm_comm_set_copy_algo(comm, SYMM_ALGO_LL), SYMM_ERR_INVALID_ARG);
  symm_algo_t algo;
  ASSERT_OK(symm_comm_copy_algo(comm, &algo));
  ASSERT_EQ(algo, SYMM_ALGO_CE);
  int64_t splits[SYMM_COLL_MAX_WORLD] = {0}, out[2 * SYMM_COLL_MAX_WORLD];
  uint8_t buf[64];
  ASSERT_RES(symm_all_to_all_vdev(comm, buf, 8, buf, 8, 1, SYMM_DTYPE_U8, splits, out, NULL),
             SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "device memory");
  (void)symm_comm_check_async_error(comm); /* the refusing ranks met as refused */
  /* A chunk larger than a pair's slot: refused on the sender, a mismatch
   * on its peers. */
  const size_t S = symm_tensor_nbytes(symm_comm_scratch_current(comm));
  const size_t half = ((S - SYMM_COLL_STAGE_OFF) / 2) & ~(size_t)255;
  const size_t big = (2 * half / (size_t)symm_comm_size(comm) & ~(size_t)255) + 1;
  uint8_t *send = calloc(1, big);
  size_t sc[SYMM_COLL_MAX_WORLD] = {0}, rc[SYMM_COLL_MAX_WORLD] = {0};
  if (rank == 0) sc[1] = big;
  if (rank == 1) rc[0] = big;
  ASSERT_MSG(send, "out of memory");
  symm_result_t res = symm_all_to_all_v(comm, send, sc, NULL, send, rc, NULL, SYMM_DTYPE_U8,
                                        NULL);
  ASSERT_RES(res, rank <= 1 ? SYMM_ERR_STATE : SYMM_SUCCESS);
  if (rank <= 1) ASSERT_STR_CONTAINS(symm_last_error(), "slot");
  ASSERT_RES(symm_comm_check_async_error(comm), SYMM_ERR_MISMATCH);
  free(send);
}

/* Once the scratch is there, a call allocates, maps and frees nothing
 * (what a CUDA graph capture needs; the fake has no capture itself). */
static inline void fake_ce_no_allocation(symm_comm_t *comm) {
  const fakecuda_stats_t a = fake_stats();
  ASSERT_MSG(a.handles >= 0, "fakecuda_stats");
  fake_ce_all_gather(comm, 1000, false);
  fake_ce_all_to_all_v(comm, NULL, NULL);
  const fakecuda_stats_t b = fake_stats();
  ASSERT_EQ(b.handles, a.handles);
  ASSERT_EQ(b.mappings, a.mappings);
  ASSERT_EQ(b.devallocs, a.devallocs);
  ASSERT_EQ(b.streams, a.streams);
}

/* One rank's part of the copy-engine tests (any GPU backend, >= 2 ranks). */
static inline int fake_ce_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  setenv("SYMM_COPY_ALGO", "ce", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  static const size_t sizes[] = {0, 1, 7, 4099, (size_t)1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    fake_ce_all_gather(comm, sizes[k], false);
    fake_ce_all_gather(comm, sizes[k], true);
    fake_ce_all_to_all_broadcast(comm, sizes[k]);
  }
  fake_ce_all_to_all_v(comm, NULL, NULL);
  fake_ce_no_allocation(comm);
  fake_ce_direct(comm);
  fake_ce_mismatch(comm);
  fake_ce_refusals(comm);
  fake_ce_all_gather(comm, 33, false);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

#endif
