/* A symmem job under mpirun through include/symmem_mpi.h: no store, no
 * token, no port.  Each rank checks that init opened no listening TCP
 * socket, then uses the communicator (a symmetric tensor written by the
 * left neighbour, all-reduce, all-to-all-v, groups from MPI_Comm_split)
 * and checks every result; it prints "mpi_job: rank R of N ok", or FAIL
 * and exits non-zero.  Run by tests/run-mpi.sh with Open MPI and MPICH. */
#define _GNU_SOURCE /* readlink (listening.h) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "symmem.h"
#include "symmem_mpi.h"
#include "../listening.h"

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "mpi_job: FAIL rank %d: ", rank);                       \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, " (%s)\n", symm_last_error());                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                           \
    }                                                                         \
  } while (0)

static int rank;

/* Every rank sends rank + p + 1 elements to rank p, each (rank << 16 | i). */
static void check_a2av(symm_comm_t *comm, int me, int n) {
  size_t sc[64], rc[64], at = 0, rat = 0;
  for (int p = 0; p < n; p++) sc[p] = (size_t)(me + p + 1), rc[p] = (size_t)(p + me + 1);
  for (int p = 0; p < n; p++) at += sc[p], rat += rc[p];
  int32_t *send = malloc(at * sizeof *send), *recv = malloc(rat * sizeof *recv);
  CHECK(send && recv, "out of memory");
  at = 0;
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < sc[p]; i++) send[at++] = me << 16 | (int32_t)i;
  CHECK(symm_all_to_all_v(comm, send, sc, NULL, recv, rc, NULL, SYMM_DTYPE_I32, NULL) ==
            SYMM_SUCCESS, "all_to_all_v");
  rat = 0;
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < rc[p]; i++, rat++)
      CHECK(recv[rat] == (p << 16 | (int32_t)i), "all_to_all_v element %zu from rank %d", i, p);
  free(send);
  free(recv);
}

static void check_comm(symm_comm_t *comm) {
  const int me = symm_comm_rank(comm), n = symm_comm_size(comm);
  int64_t len = 16;
  symm_tensor_t *t = NULL;
  CHECK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_I64, &t) == SYMM_SUCCESS, "alloc");
  CHECK(symm_tensor_rendezvous(t) == SYMM_SUCCESS, "rendezvous");
  void *const *ptrs = NULL;
  CHECK(symm_tensor_peer_ptrs(t, &ptrs) == SYMM_SUCCESS, "peer pointers");
  ((volatile int64_t *)ptrs[(me + 1) % n])[0] = 100 + me;
  CHECK(symm_comm_barrier(comm) == SYMM_SUCCESS, "barrier");
  CHECK(((volatile int64_t *)ptrs[me])[0] == 100 + (me + n - 1) % n, "neighbour's store");
  int64_t x = me + 1;
  CHECK(symm_all_reduce(comm, &x, &x, 1, SYMM_DTYPE_I64, SYMM_REDUCE_SUM, NULL) == SYMM_SUCCESS,
        "all_reduce");
  CHECK(x == (int64_t)n * (n + 1) / 2, "all_reduce gave %lld", (long long)x);
  check_a2av(comm, me, n);
  CHECK(symm_tensor_free(t) == SYMM_SUCCESS, "free");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int before = symm_test_listening_sockets();
  symm_bootstrap_callbacks_t cb;
  CHECK(symm_mpi_bootstrap(MPI_COMM_WORLD, &cb) == 0, "symm_mpi_bootstrap");
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = &cb;
  symm_comm_t *comm = NULL;
  CHECK(symm_comm_init(&cfg, &comm) == SYMM_SUCCESS, "symm_comm_init");
  const int after = symm_test_listening_sockets();
  CHECK(after == before, "%d listening TCP sockets after init, %d before", after, before);
  CHECK(symm_comm_rank(comm) == rank && symm_comm_size(comm) == size, "identity");
  CHECK(symm_comm_local_size(comm) == cb.local_size && cb.local_size >= 1, "local size %d",
        cb.local_size);
  check_comm(comm);
  symm_comm_t *half = NULL;
  CHECK(symm_comm_split(comm, rank % 2, rank, &half) == SYMM_SUCCESS, "split");
  check_comm(half);
  symm_comm_destroy(half);
  symm_comm_destroy(comm);
  symm_mpi_bootstrap_free(&cb);
  printf("mpi_job: rank %d of %d ok (%d listening sockets before and after init)\n", rank, size,
         before);
  MPI_Finalize();
  return 0;
}
