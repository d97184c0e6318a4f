/* A symmem job under mpirun with no store, no token and no port, as
 * tests/run-mpi.sh runs it with Open MPI and MPICH:
 *  - built with SYMM_JOB_MPI (by an MPI's mpicc): through
 *    include/symmem_mpi.h's callbacks on MPI_COMM_WORLD;
 *  - built without (a plain symmem program, no MPI in it): through the
 *    launcher's PMIx server, which SYMM_BOOTSTRAP=auto finds.
 * Each rank checks that init opened no listening TCP socket, then uses the
 * communicator (a symmetric tensor written by the left neighbour,
 * all-reduce, all-to-all-v, a group from a split) and checks every result;
 * it prints "mpi_job: rank R of N ok", or FAIL and exits non-zero.
 * With SYMM_JOB_INIT_FAILS_ON it checks a failing init instead (below). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* readlink (listening.h) */
#endif
#ifdef SYMM_JOB_MPI
#include <mpi.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "symmem.h"
#ifdef SYMM_JOB_MPI
#include "symmem_mpi.h"
#define JOB_ABORT() MPI_Abort(MPI_COMM_WORLD, 1)
#else
#define JOB_ABORT() exit(1)
#endif
#include "../listening.h"

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "mpi_job: FAIL rank %d: ", rank);                       \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, " (%s)\n", symm_last_error());                          \
      JOB_ABORT();                                                            \
    }                                                                         \
  } while (0)

static int rank;

/* Every rank sends rank + p + 1 elements to rank p, each (rank << 16 | i). */
static void check_a2av(symm_comm_t *comm, int me, int n) {
  size_t sc[64] = {0}, rc[64] = {0}, at = 0, rat = 0;
  for (int p = 0; p < n; p++) sc[p] = (size_t)(me + p + 1), rc[p] = (size_t)(p + me + 1);
  for (int p = 0; p < n; p++) at += sc[p], rat += rc[p];
  int32_t *send = calloc(at, sizeof *send), *recv = calloc(rat, sizeof *recv);
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

#ifdef SYMM_JOB_MPI
static symm_bootstrap_callbacks_t cb;

/* *before: listening sockets before symmem's init (MPI's own are there). */
static symm_result_t job_init(int *argc, char ***argv, symm_comm_t **comm, int *before) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  *before = symm_test_listening_sockets();
  CHECK(symm_mpi_bootstrap(MPI_COMM_WORLD, &cb) == 0, "symm_mpi_bootstrap");
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = &cb;
  return symm_comm_init(&cfg, comm);
}

static void job_fini(void) {
  symm_mpi_bootstrap_free(&cb);
  MPI_Finalize();
}
#else
static symm_result_t job_init(int *argc, char ***argv, symm_comm_t **comm, int *before) {
  (void)argc, (void)argv;
  *before = symm_test_listening_sockets();
  const char *r = getenv("PMIX_RANK");
  rank = r ? atoi(r) : -1;
  return symm_comm_init(NULL, comm);
}

static void job_fini(void) {}
#endif

/* SYMM_JOB_INIT_FAILS_ON=r (the backend made to fail on rank r, as the
 * fake NCCL's FAKENCCL_INIT_FAIL_RANK does): init must fail on every rank,
 * each naming rank r, within half of SYMM_TIMEOUT_MS: the peers that wait
 * in the backend learn of it through the bootstrap's notes. */
static int expect_init_failure(int *argc, char ***argv, int on) {
  const char *t = getenv("SYMM_TIMEOUT_MS");
  const double limit = (t ? atoi(t) : 60000) / 2000.0;
  char want[32];
  int before = -1;
  symm_comm_t *comm = NULL;
  const time_t start = time(NULL);
  symm_result_t res = job_init(argc, argv, &comm, &before);
  const double took = difftime(time(NULL), start);
  snprintf(want, sizeof want, "rank %d", on);
  CHECK(res != SYMM_SUCCESS && !comm, "init succeeded");
  CHECK(strstr(symm_last_error(), want), "init failed (%s) without naming %s",
        symm_strerror(res), want);
  CHECK(took <= limit, "init failed after %.0f s, more than %.0f s", took, limit);
  printf("mpi_job: rank %d ok (init failed as rank %d's did: %s)\n", rank, on,
         symm_last_error());
  job_fini();
  return 0;
}

int main(int argc, char **argv) {
  const char *fails_on = getenv("SYMM_JOB_INIT_FAILS_ON");
  if (fails_on && *fails_on) return expect_init_failure(&argc, &argv, atoi(fails_on));
  int before = -1;
  symm_comm_t *comm = NULL;
  CHECK(job_init(&argc, &argv, &comm, &before) == SYMM_SUCCESS, "symm_comm_init");
  const int after = symm_test_listening_sockets();
  CHECK(after == before, "%d listening TCP sockets after init, %d before", after, before);
  const int size = symm_comm_size(comm);
  CHECK(symm_comm_rank(comm) == rank, "rank %d, the launcher's %d", symm_comm_rank(comm), rank);
  CHECK(symm_comm_local_size(comm) >= 1, "local size %d", symm_comm_local_size(comm));
  check_comm(comm);
  symm_comm_t *half = NULL;
  CHECK(symm_comm_split(comm, rank % 2, rank, &half) == SYMM_SUCCESS, "split");
  check_comm(half);
  symm_comm_destroy(half);
  symm_comm_destroy(comm);
  printf("mpi_job: rank %d of %d ok (%d listening sockets before and after init)\n", rank, size,
         before);
  job_fini();
  return 0;
}
