/* The contiguous view: every rank's buffer mapped back to back in one
 * virtual range, so that one array of shape [size, n] spans the job (host
 * backend; native maps one for GPU kernels the same way).  Each rank fills
 * its own buffer, then reduces across ranks by reading the view as one
 * array, and checks the sum against what every rank wrote.
 * Run: SYMM_BACKEND=host symmem-run -n 4 -- ./contiguous_view */
#include <stdio.h>
#include <stdlib.h>

#include "example_check.h"
#include "symmem.h"


int main(void) {
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  const int rank = symm_comm_rank(comm), size = symm_comm_size(comm);
  if (symm_comm_device(comm) >= 0) {
    if (rank == 0) fprintf(stderr, "contiguous_view reads with the CPU: SYMM_BACKEND=host\n");
    symm_comm_destroy(comm);
    return 1;
  }
  const int64_t n = 100000;
  symm_tensor_t *t;
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I64, &t));
  CHECK(symm_tensor_rendezvous(t));
  int64_t *mine = symm_tensor_data(t);
  for (int64_t i = 0; i < n; i++) mine[i] = (int64_t)(rank + 1) * 1000000 + i;
  CHECK(symm_comm_barrier(comm));

  symm_view_t all; /* sizes {size, n}; rank r's row starts strides[0] elements in */
  CHECK(symm_tensor_contiguous_view(t, &all));
  const int64_t *v = all.data;
  int64_t wrong = 0;
  const int64_t ranks_sum = (int64_t)size * (size + 1) / 2 * 1000000;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = 0;
    for (int r = 0; r < size; r++) s += v[r * all.strides[0] + i];
    wrong += s != ranks_sum + (int64_t)size * i;
  }
  /* Any pointer into the view is found, as the view's (rank -1). */
  symm_tensor_t *found;
  int where;
  size_t off;
  CHECK(symm_tensor_lookup(&v[(size - 1) * all.strides[0] + 5], &found, &where, &off));
  wrong += found != t || where != -1;
  printf("rank %d/%d: sum over ranks read through the contiguous view [%lld, %lld]: %s\n", rank,
         size, (long long)all.sizes[0], (long long)all.sizes[1], wrong ? "FAIL" : "OK");
  CHECK(symm_comm_barrier(comm)); /* nobody frees while a peer still reads */
  CHECK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return wrong ? 1 : 0;
}
