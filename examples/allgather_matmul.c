/* All-gather overlapped with a matrix product, chunk by chunk, with the
 * signal pads (host backend): every rank holds M rows of A and all of B
 * and wants C = A_all * B, where A_all stacks every rank's rows.  Each rank
 * writes its rows into slot `rank` of every peer's gather buffer and
 * signals that peer; it multiplies its own rows at once and each peer's as
 * soon as that peer's signal arrives, instead of waiting for the whole
 * gather.  Checked against the plain way (symm_all_gather, then one
 * product).  Run: SYMM_BACKEND=host symmem-run -n 4 -- ./allgather_matmul */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_check.h"
#include "symmem.h"


enum { M = 64, K = 96, N = 48 }; /* rows per rank, inner and outer sizes */

/* c[M][N] = a[M][K] * b[K][N] */
static void matmul(const float *a, const float *b, float *c) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = 0;
      for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];
      c[i * N + j] = s;
    }
}

int main(void) {
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (symm_comm_device(comm) >= 0) {
    if (rank == 0) fprintf(stderr, "allgather_matmul computes on the CPU: SYMM_BACKEND=host\n");
    symm_comm_destroy(comm);
    return 1;
  }
  /* The gather buffer: one slot of M x K per rank. */
  const int64_t sizes[3] = {size, M, K};
  symm_tensor_t *gather;
  CHECK(symm_tensor_alloc(comm, sizes, 3, SYMM_DTYPE_F32, &gather));
  CHECK(symm_tensor_rendezvous(gather));
  void *const *peers;
  CHECK(symm_tensor_peer_ptrs(gather, &peers));

  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *c = malloc(sizeof(float) * (size_t)size * M * N);
  float *plain = malloc(sizeof(float) * (size_t)size * M * N);
  float *a_all = malloc(sizeof(float) * (size_t)size * M * K);
  for (int i = 0; i < M * K; i++) a[i] = (float)((rank * 7 + i) % 13) - 6.0f;
  for (int i = 0; i < K * N; i++) b[i] = (float)(i % 5) * 0.25f;

  /* Overlapped: scatter this rank's rows, signal each peer, then multiply
   * the chunks in the order they can be. */
  for (int p = 0; p < size; p++) {
    if (p == rank) continue;
    memcpy((float *)peers[p] + (size_t)rank * M * K, a, sizeof(float) * M * K);
    CHECK(symm_signal_put(gather, p, 0, NULL));
  }
  matmul(a, b, c + (size_t)rank * M * N);
  for (int step = 1; step < size; step++) {
    int p = (rank + size - step) % size; /* the left neighbour's first, as a ring would */
    CHECK(symm_signal_wait(gather, p, 0, NULL));
    matmul((const float *)peers[rank] + (size_t)p * M * K, b, c + (size_t)p * M * N);
  }
  /* Nobody may write its slots again before every rank has read them. */
  CHECK(symm_signal_barrier(gather, 1, NULL));

  /* The plain way: the whole all-gather first, then one product. */
  CHECK(symm_all_gather(comm, a, a_all, (size_t)M * K, SYMM_DTYPE_F32, NULL));
  for (int p = 0; p < size; p++)
    matmul(a_all + (size_t)p * M * K, b, plain + (size_t)p * M * N);
  size_t wrong = 0;
  for (size_t i = 0; i < (size_t)size * M * N; i++) wrong += fabsf(c[i] - plain[i]) > 1e-4f;
  printf("rank %d/%d: C = all-gather(A) x B, %d x %d, overlapped chunk by chunk: %s\n", rank,
         size, size * M, N, wrong ? "FAIL" : "OK");
  free(a), free(b), free(c), free(plain), free(a_all);
  CHECK(symm_tensor_free(gather));
  symm_comm_destroy(comm);
  return wrong ? 1 : 0;
}
