/*
 * symmem over MPI: bootstrap callbacks (symm_bootstrap_callbacks_t) built
 * from an MPI communicator, in the caller's own compilation unit, so that
 * libsymmem links no MPI and works with Open MPI, MPICH and their
 * relatives alike.  Include it after <mpi.h>:
 *
 *   MPI_Init(&argc, &argv);
 *   symm_bootstrap_callbacks_t cb;
 *   if (symm_mpi_bootstrap(MPI_COMM_WORLD, &cb) != 0) MPI_Abort(...);
 *   symm_config_t cfg = SYMM_CONFIG_INIT;
 *   cfg.bootstrap = &cb;
 *   symm_comm_init(&cfg, &comm);      // no store, no token, no open port
 *   ...
 *   symm_comm_destroy(comm);
 *   symm_mpi_bootstrap_free(&cb);     // before MPI_Finalize
 *
 * The callbacks work on a duplicate of the communicator (symmem's
 * messages never match the program's), with non-blocking collectives
 * (MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) polled until symmem's
 * deadline: a rank that never comes makes the others return
 * SYMM_ERR_TIMEOUT instead of hanging in MPI.  The request then stays
 * pending and the duplicate is unusable: destroy the communicator (the
 * program's own MPI communicator is not affected).  The groups of
 * symm_comm_split come from MPI_Comm_split, which blocks (MPI has no
 * non-blocking split).  local_rank and local_size come from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).  Needs MPI 3.0; the calls
 * come from the thread that calls into symmem (MPI_THREAD_FUNNELED is
 * enough when that is the main thread, else MPI_THREAD_SERIALIZED).
 */
#ifndef SYMMEM_MPI_H
#define SYMMEM_MPI_H

#include <limits.h>
#include <sched.h>
#include <stdlib.h>

#include "symmem.h"

#ifndef MPI_VERSION
#error "include <mpi.h> before symmem_mpi.h"
#endif

/* The callbacks' context: the duplicate communicator. */
typedef struct symm_mpi_channel {
  MPI_Comm comm;
} symm_mpi_channel_t;

/* Polls req until it completes (0) or timeout_ms passes
 * (SYMM_ERR_TIMEOUT), yielding the CPU between polls (ranks may
 * outnumber cores); an MPI error is SYMM_ERR_BACKEND. */
static inline int symm_mpi_wait_(MPI_Request *req, int timeout_ms) {
  const double end = MPI_Wtime() + timeout_ms / 1000.0;
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return SYMM_ERR_BACKEND;
    if (done) return 0;
    if (MPI_Wtime() >= end) return SYMM_ERR_TIMEOUT;
    sched_yield();
  }
}

static inline int symm_mpi_allgather_(void *ctx, const void *send, void *recv, size_t len,
                                      int timeout_ms) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  if (len > INT_MAX) return SYMM_ERR_INVALID_ARG;
  MPI_Request req;
  if (MPI_Iallgather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, ch->comm, &req) !=
      MPI_SUCCESS)
    return SYMM_ERR_BACKEND;
  return symm_mpi_wait_(&req, timeout_ms);
}

static inline int symm_mpi_broadcast_(void *ctx, void *buf, size_t len, int root,
                                      int timeout_ms) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  if (len > INT_MAX) return SYMM_ERR_INVALID_ARG;
  MPI_Request req;
  if (MPI_Ibcast(buf, (int)len, MPI_BYTE, root, ch->comm, &req) != MPI_SUCCESS)
    return SYMM_ERR_BACKEND;
  return symm_mpi_wait_(&req, timeout_ms);
}

static inline int symm_mpi_barrier_(void *ctx, int timeout_ms) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  MPI_Request req;
  if (MPI_Ibarrier(ch->comm, &req) != MPI_SUCCESS) return SYMM_ERR_BACKEND;
  return symm_mpi_wait_(&req, timeout_ms);
}

static inline void symm_mpi_release_(void *ctx) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  if (ch->comm != MPI_COMM_NULL) MPI_Comm_free(&ch->comm);
  free(ch);
}

static inline int symm_mpi_fill_(MPI_Comm dup, symm_bootstrap_callbacks_t *cb);

static inline int symm_mpi_split_(void *ctx, int color, int key,
                                  symm_bootstrap_callbacks_t *child, int timeout_ms) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  MPI_Comm sub = MPI_COMM_NULL;
  (void)timeout_ms; /* MPI_Comm_split blocks */
  if (MPI_Comm_split(ch->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub) != MPI_SUCCESS)
    return SYMM_ERR_BACKEND;
  if (color < 0) return 0;
  return symm_mpi_fill_(sub, child);
}

/* The callbacks on `dup` (which they own from now on). */
static inline int symm_mpi_fill_(MPI_Comm dup, symm_bootstrap_callbacks_t *cb) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)malloc(sizeof *ch);
  MPI_Comm local = MPI_COMM_NULL;
  int rank, size, local_rank = -1, local_size = -1;
  if (!ch) {
    MPI_Comm_free(&dup);
    return SYMM_ERR_NO_MEMORY;
  }
  ch->comm = dup;
  if (MPI_Comm_rank(dup, &rank) != MPI_SUCCESS || MPI_Comm_size(dup, &size) != MPI_SUCCESS) {
    symm_mpi_release_(ch);
    return SYMM_ERR_BACKEND;
  }
  if (MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
  }
  symm_bootstrap_callbacks_t init = SYMM_BOOTSTRAP_CALLBACKS_INIT;
  *cb = init;
  cb->rank = rank;
  cb->world_size = size;
  cb->local_rank = local_rank;
  cb->local_size = local_size;
  cb->ctx = ch;
  cb->allgather = symm_mpi_allgather_;
  cb->broadcast = symm_mpi_broadcast_;
  cb->barrier = symm_mpi_barrier_;
  cb->split = symm_mpi_split_;
  cb->release = symm_mpi_release_;
  return 0;
}

/* Fills *cb with callbacks over a duplicate of comm.  Collective over
 * comm (MPI_Comm_dup).  Returns 0, or SYMM_ERR_NO_MEMORY /
 * SYMM_ERR_BACKEND (an MPI call failed). */
static inline int symm_mpi_bootstrap(MPI_Comm comm, symm_bootstrap_callbacks_t *cb) {
  MPI_Comm dup;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return SYMM_ERR_BACKEND;
  return symm_mpi_fill_(dup, cb);
}

/* Frees what symm_mpi_bootstrap made (collective over its communicator:
 * MPI_Comm_free), after symm_comm_destroy of every communicator made on
 * it and before MPI_Finalize. */
static inline void symm_mpi_bootstrap_free(symm_bootstrap_callbacks_t *cb) {
  if (cb->ctx) symm_mpi_release_(cb->ctx);
  cb->ctx = NULL;
}

#endif /* SYMMEM_MPI_H */
