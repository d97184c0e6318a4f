/* All-to-all-v over the fake driver, for every GPU backend's fake tests:
 * the launches of symm_all_to_all_v and the vdev forms, checked from the
 * fake's launch record (the kernel does not run there).  Header-only: each
 * fake-test program includes it once. */
#ifndef SYMM_FAKE_A2AV_H
#define SYMM_FAKE_A2AV_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fake_util.h"
#include "harness.h"
#include "kernels/coll_abi.h"
#include "symm_backend.h"
#include "symmem.h"

/* The last launch of this process; false (name empty) when there is none. */
static inline bool fake_a2av_last_launch(fakecuda_launch_t *l) {
  memset(l, 0, sizeof *l);
  long (*count)(void) = NULL;
  bool (*get)(long, fakecuda_launch_t *) = NULL;
  *(void **)&count = fake_sym("fakecuda_launch_count");
  *(void **)&get = fake_sym("fakecuda_launch_get");
  return count && get && get(count() - 1, l);
}

/* The parameters of the last launch, which must be all-to-all-v's. */
static inline symm_coll_params_t fake_a2av_params(void) {
  fakecuda_launch_t l;
  symm_coll_params_t p;
  ASSERT_MSG(fake_a2av_last_launch(&l) && strcmp(l.name, "symm_coll_all_to_all_v") == 0,
             "launched %s, not symm_coll_all_to_all_v", l.name);
  ASSERT_MSG(l.block == SYMM_COLL_THREADS && l.grid >= 1 && l.grid <= SYMM_COLL_MAX_CHANNELS,
             "grid %u of %u threads", l.grid, l.block);
  memcpy(&p, l.params, sizeof p);
  ASSERT_MSG(p.kind == SYMM_COLL_KERNEL_ALL_TO_ALL_V && (unsigned)p.channels >= l.grid,
             "kind %d, %d channels, %u blocks", p.kind, p.channels, l.grid);
  return p;
}

/* Every rank's x equal?  board: a symmetric tensor of >= 1 u64 whose
 * memory this process reads directly (fake device memory is host memory). */
static inline bool fake_a2av_same(symm_comm_t *comm, symm_tensor_t *board, uint64_t x) {
  void *const *ptrs = NULL;
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (symm_tensor_peer_ptrs(board, &ptrs) != SYMM_SUCCESS) return false;
  ((volatile uint64_t *)ptrs[rank])[0] = x;
  symm_comm_barrier(comm);
  bool same = true;
  for (int r = 0; r < size; r++) same &= ((volatile uint64_t *)ptrs[r])[0] == x;
  symm_comm_barrier(comm);
  return same;
}

/* The device modes' launch: pointers, capacities (this rank's own: they
 * differ by rank), row bytes, experts and alignment as they run. */
static inline void fake_a2av_expect_dev(const symm_coll_params_t *p, int mode, const void *send,
                                        size_t send_rows, const void *recv, size_t recv_rows,
                                        size_t row_bytes, const int64_t *in, const int64_t *out,
                                        int ne, size_t align) {
  ASSERT_MSG(p->v.mode == mode && p->root == mode && p->v.n_experts == ne &&
                 p->v.major_align == align && p->v.row_bytes == row_bytes,
             "mode %d (want %d), %d experts (%d), align %llu (%zu), row %llu bytes (%zu)",
             p->v.mode, mode, p->v.n_experts, ne, (unsigned long long)p->v.major_align, align,
             (unsigned long long)p->v.row_bytes, row_bytes);
  ASSERT_MSG(p->send == (uint64_t)(uintptr_t)send && p->recv == (uint64_t)(uintptr_t)recv &&
                 p->v.in_splits == (uint64_t)(uintptr_t)in &&
                 p->v.out_splits == (uint64_t)(uintptr_t)out,
             "buffers or splits not passed as given");
  ASSERT_MSG(p->v.send_rows == send_rows && p->v.recv_rows == recv_rows,
             "capacities %llu, %llu (want %zu, %zu)", (unsigned long long)p->v.send_rows,
             (unsigned long long)p->v.recv_rows, send_rows, recv_rows);
  ASSERT_MSG(p->v.refused == 0 && p->v.data_off >= p->v.table_bytes && p->v.table_bytes > 0 &&
                 p->stage_half >= p->v.data_off + send_rows * row_bytes,
             "refused %d, data at %llu, staging half %llu", p->v.refused,
             (unsigned long long)p->v.data_off, (unsigned long long)p->stage_half);
}

/*
 * On a live communicator of any GPU backend: symm_all_to_all_vdev and
 * symm_all_to_all_v (host counts, packed displacements filled in) each
 * launch the all-to-all-v kernel once with the call's parameters; the
 * signature and grid are the same on every rank although the capacities
 * and counts differ by rank.  buf: a rendezvoused symmetric tensor of at
 * least 64 KiB; board: one of at least one u64 (fake_a2av_same).
 */
static inline int fake_a2av_launches(symm_comm_t *comm, symm_tensor_t *buf,
                                     symm_tensor_t *board) {
  const int rank = symm_comm_rank(comm), W = symm_comm_size(comm);
  ASSERT_MSG(W <= 8 && symm_tensor_nbytes(buf) >= (64 << 10), "%d ranks, %zu bytes", W,
             symm_tensor_nbytes(buf));
  char *base = symm_tensor_data(buf);
  int64_t *in = (int64_t *)base, *out = in + 64;
  char *send = base + 4096, *recv = base + (32 << 10);
  const size_t send_rows = 100 + (size_t)rank, recv_rows = 200 + 3 * (size_t)rank;
  ASSERT_OK(symm_all_to_all_vdev(comm, send, send_rows, recv, recv_rows, 8, SYMM_DTYPE_BF16, in,
                                 out, NULL));
  symm_coll_params_t p = fake_a2av_params();
  fake_a2av_expect_dev(&p, SYMM_V_DEV, send, send_rows, recv, recv_rows, 16, in, out, 1, 1);
  ASSERT_MSG(p.vec == 1 && p.v.ordered == 0, "vec %d ordered %d", p.vec, p.v.ordered);
  fakecuda_launch_t l;
  fake_a2av_last_launch(&l);
  ASSERT_MSG(fake_a2av_same(comm, board, (uint64_t)p.sig << 32 | l.grid),
             "vdev: signature or grid differs by rank");
  /* Host counts: rank r sends r + q + 1 i32 to rank q. */
  size_t sc[8], rc[8];
  size_t sum_s = 0, sum_r = 0;
  for (int q = 0; q < W; q++) {
    sc[q] = (size_t)(rank + q + 1);
    rc[q] = (size_t)(q + rank + 1);
    sum_s += sc[q];
    sum_r += rc[q];
  }
  ASSERT_OK(symm_all_to_all_v(comm, send, sc, NULL, recv, rc, NULL, SYMM_DTYPE_I32, NULL));
  p = fake_a2av_params();
  ASSERT_MSG(p.v.mode == SYMM_V_HOST && p.v.row_bytes == 4 && p.v.n_experts == 1 &&
                 p.v.send_rows == sum_s && p.v.recv_rows == sum_r && p.v.in_splits == 0,
             "host counts: mode %d, row %llu bytes, capacities %llu %llu", p.v.mode,
             (unsigned long long)p.v.row_bytes, (unsigned long long)p.v.send_rows,
             (unsigned long long)p.v.recv_rows);
  size_t sd = 0, rd = 0;
  for (int q = 0; q < W; q++) {
    ASSERT_MSG(p.v.send_counts[q] == sc[q] && p.v.recv_counts[q] == rc[q] &&
                   p.v.send_displs[q] == sd && p.v.recv_displs[q] == rd,
               "host counts for rank %d not copied into the launch", q);
    sd += sc[q];
    rd += rc[q];
  }
  fake_a2av_last_launch(&l);
  ASSERT_MSG(fake_a2av_same(comm, board, (uint64_t)p.sig << 32 | l.grid),
             "host counts: signature or grid differs by rank");
  return 0;
}

#endif /* SYMM_FAKE_A2AV_H */
