/* The main job of `make run`: every rank allocates a symmetric tensor on the
 * default backend, writes a pattern into its right neighbour's buffer through
 * the remote view, synchronises, and checks what its left neighbour wrote.
 * CPU memory (host backend) is written directly; GPU backends would use
 * kernels or cudaMemcpy on the same views. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    symm_result_t r_ = (call);                                                 \
    if (r_ != SYMM_SUCCESS) {                                                  \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, symm_strerror(r_),        \
              symm_last_error());                                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static uint64_t pattern(int writer, int64_t i) {
  return ((uint64_t)(writer + 1) << 40) ^ (uint64_t)i * 2654435761u;
}

int main(void) {
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (symm_comm_device(comm) >= 0) {
    if (rank == 0)
      fprintf(stderr, "neighbor_exchange writes with the CPU; run it with SYMM_BACKEND=host\n");
    symm_comm_destroy(comm);
    return 1;
  }

  const int64_t n = 1 << 20; /* 8 MiB of u64 per rank */
  symm_tensor_t *t;
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U64, &t));
  CHECK(symm_tensor_rendezvous(t));

  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  symm_view_t dst;
  CHECK(symm_tensor_remote_view(t, right, &dst));
  uint64_t *out = dst.data;
  for (int64_t i = 0; i < n; i++) out[i] = pattern(rank, i);
  CHECK(symm_comm_barrier(comm));

  const uint64_t *in = symm_tensor_data(t);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++) wrong += in[i] != pattern(left, i);

  /* Print one table, in rank order, from rank 0 via the store. */
  char line[160];
  snprintf(line, sizeof line, "%4d  %-7s %5d %6d  %10zu  %9" PRId64 "  %s", rank,
           symm_backend_name(symm_comm_backend(comm)), right, left, symm_tensor_nbytes(t),
           wrong, wrong ? "FAIL" : "OK");
  char key[32];
  snprintf(key, sizeof key, "example/line/%d", rank);
  symm_store_t *store = symm_comm_store(comm);
  CHECK(symm_store_set(store, key, line, strlen(line) + 1));
  if (rank == 0) {
    printf("# neighbor exchange: %d ranks, each writes its right neighbour's buffer\n", size);
    printf("rank  backend wrote  from       bytes      wrong  check\n");
    for (int r = 0; r < size; r++) {
      char buf[160];
      size_t len;
      snprintf(key, sizeof key, "example/line/%d", r);
      CHECK(symm_store_get(store, key, buf, sizeof buf, &len, -1));
      printf("%s\n", buf);
    }
  }
  CHECK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return wrong ? 1 : 0;
}
