/*
 * A rank of tests/test-hosts.c's job under Open MPI's mpirun across
 * namespace hosts (hosts_pmix): a plain symmem program, no MPI in it, that
 * meets its peers through the PMIx server of its own host's Open MPI
 * daemon, with no store.  Run as
 *
 *   mpirun ... symm-hosts-job HOST...
 *
 * HOST...: the job's host names.  Each rank
 *  - inits with the host backend: refused (SYMM_ERR_UNSUPPORTED) with a
 *    message naming every host and this rank's, which it can only do if
 *    the ranks' records reached each other across the hosts;
 *  - inits with the tests' arena backend by hosts (ARENA_UNREACHABLE=hosts,
 *    tests/arena_backend.c): every peer's host is one of HOST..., the
 *    communicator is not on one host, its local rank and size are the
 *    launcher's (OMPI_COMM_WORLD_LOCAL_RANK / _SIZE) and this rank's place
 *    among its host's ranks by name, and the peers of this host, and only
 *    they, are mapped and written; three times, one communicator after
 *    another;
 * then prints "hosts_job: rank R of N on HOST: local L of S ok".  A failed
 * check prints FAIL (tests/harness.h) and aborts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena_backend.h"
#include "harness.h"
#include "symm_test_access.h"

static void check_refused(int rank, char **hosts, int nhosts, const char *mine) {
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_UNSUPPORTED);
  printf("hosts_job: rank %d, host backend: %s\n", rank, symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(), "it shares the memory of one host only");
  for (int h = 0; h < nhosts; h++) ASSERT_STR_CONTAINS(symm_last_error(), hosts[h]);
  char want[128];
  snprintf(want, sizeof want, "this rank (%d) on %s", rank, mine);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
}

/* Every peer on one of the job's hosts; same-host peers by name. */
static void check_peers(symm_comm_t *comm, char **hosts, int nhosts, const char *mine) {
  const int n = symm_comm_size(comm);
  for (int r = 0; r < n; r++) {
    const char *theirs = symm_comm_peer_host(comm, r);
    ASSERT(theirs != NULL);
    int h = 0;
    while (h < nhosts && strcmp(hosts[h], theirs) != 0) h++;
    ASSERT_MSG(h < nhosts, "rank %d's host %s is none of the job's", r, theirs);
    ASSERT_EQ(symm_comm_peer_same_host(comm, r), strcmp(theirs, mine) == 0);
  }
  ASSERT(!symm_test_comm_single_host(comm));
}

/* The launcher's local rank and size (PMIx's, which init took) are this
 * rank's place among the ranks of its host by name, and their number. */
static void check_local(symm_comm_t *comm, int launcher_rank, int launcher_size) {
  const int me = symm_comm_rank(comm);
  int below = 0, here = 0;
  for (int r = 0; r < symm_comm_size(comm); r++) {
    below += symm_comm_peer_same_host(comm, r) && r < me;
    here += symm_comm_peer_same_host(comm, r);
  }
  ASSERT_EQ(symm_comm_local_rank(comm), launcher_rank);
  ASSERT_EQ(symm_comm_local_size(comm), launcher_size);
  ASSERT_EQ(below, launcher_rank);
  ASSERT_EQ(here, launcher_size);
}

static void check_memory(symm_comm_t *comm) {
  const int me = symm_comm_rank(comm), n = symm_comm_size(comm);
  int64_t len = n;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(ptrs[r] != NULL, symm_comm_peer_same_host(comm, r));
    if (ptrs[r]) ((volatile int64_t *)ptrs[r])[me] = 1000 + me;
  }
  ASSERT_OK(symm_comm_barrier(comm));
  const volatile int64_t *mine = symm_tensor_data(t);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(mine[r], symm_comm_peer_same_host(comm, r) ? 1000 + r : 0);
  ASSERT_OK(symm_tensor_free(t));
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *r = getenv("PMIX_RANK"), *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"),
             *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (argc < 2 || !r || !lr || !ls) {
    fprintf(stderr, "usage: mpirun ... symm-hosts-job HOST... (under Open MPI's mpirun)\n");
    return 2;
  }
  const int rank = atoi(r);
  char mine[128] = "";
  gethostname(mine, sizeof mine - 1);
  arena_backends_register();
  check_refused(rank, argv + 1, argc - 1, mine);
  setenv("SYMM_BACKEND", "arena", 1);
  setenv("ARENA_UNREACHABLE", "hosts", 1);
  /* Communicators one after another, as a program may make them: each
   * meets through the same PMIx session. */
  for (int round = 0; round < 3; round++) {
    symm_comm_t *comm = NULL;
    ASSERT_OK(symm_comm_init(NULL, &comm));
    ASSERT_EQ(symm_comm_rank(comm), rank);
    check_peers(comm, argv + 1, argc - 1, mine);
    check_local(comm, atoi(lr), atoi(ls));
    check_memory(comm);
    if (round == 2)
      printf("hosts_job: rank %d of %d on %s: local %d of %d ok\n", rank, symm_comm_size(comm),
             mine, symm_comm_local_rank(comm), symm_comm_local_size(comm));
    symm_comm_destroy(comm);
  }
  return 0;
}
