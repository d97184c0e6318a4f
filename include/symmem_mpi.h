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
 * non-blocking split).  Notes (a rank's failure its peers must learn
 * while they wait outside these collectives) are point-to-point messages
 * on a second duplicate: MPI_Isend to every other rank, MPI_Iprobe and
 * MPI_Recv when a rank looks; there is no lost_rank (MPI cannot tell a
 * rank gone: under mpirun the launcher ends the whole job when one rank
 * dies).  local_rank and local_size come from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).  Needs MPI 3.0; the calls
 * come from the thread that calls into symmem (MPI_THREAD_FUNNELED is
 * enough when that is the main thread, else MPI_THREAD_SERIALIZED).
 */
#ifndef SYMMEM_MPI_H
#define SYMMEM_MPI_H

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "symmem.h"

#ifndef MPI_VERSION
#error "include <mpi.h> before symmem_mpi.h"
#endif

/* A note this rank put or heard: "key\0value\0" in text; the requests
 * of its sends to the other ranks when this rank put it. */
typedef struct symm_mpi_note {
  struct symm_mpi_note *next;
  char *text;
  int len, nreq;
  MPI_Request *req;
} symm_mpi_note_t;

#define SYMM_MPI_NOTE_TAG 1

/* The callbacks' context: the duplicate communicator, and a second one
 * for notes (point-to-point messages that never meet the collectives). */
typedef struct symm_mpi_channel {
  MPI_Comm comm, notes;
  symm_mpi_note_t *heard; /* in arrival order: the first of a key holds */
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

static inline symm_mpi_note_t *symm_mpi_find_note_(symm_mpi_channel_t *ch, const char *key) {
  for (symm_mpi_note_t *n = ch->heard; n; n = n->next)
    if (strcmp(n->text, key) == 0) return n;
  return NULL;
}

/* Keeps text (malloc'd, len bytes, "key\0value\0") unless its key is
 * known; NULL when it was not kept (and freed). */
static inline symm_mpi_note_t *symm_mpi_keep_note_(symm_mpi_channel_t *ch, char *text, int len) {
  symm_mpi_note_t *n = NULL, **end = &ch->heard;
  if (len < 2 || text[len - 1] != 0 || memchr(text, 0, (size_t)len - 1) == NULL ||
      symm_mpi_find_note_(ch, text) || !(n = (symm_mpi_note_t *)calloc(1, sizeof *n))) {
    free(text);
    return NULL;
  }
  n->text = text;
  n->len = len;
  while (*end) end = &(*end)->next;
  *end = n;
  return n;
}

/* Receives every note that has arrived. */
static inline void symm_mpi_drain_notes_(symm_mpi_channel_t *ch) {
  for (;;) {
    int arrived = 0, len = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, SYMM_MPI_NOTE_TAG, ch->notes, &arrived, &st) != MPI_SUCCESS ||
        !arrived || MPI_Get_count(&st, MPI_CHAR, &len) != MPI_SUCCESS)
      return;
    char *text = (char *)malloc((size_t)len + 1);
    if (!text) return;
    MPI_Recv(text, len, MPI_CHAR, st.MPI_SOURCE, SYMM_MPI_NOTE_TAG, ch->notes, MPI_STATUS_IGNORE);
    symm_mpi_keep_note_(ch, text, len);
  }
}

/* A note goes to every other rank at once (MPI_Isend; its text stays
 * until the channel is released). */
static inline int symm_mpi_note_put_(void *ctx, const char *key, const char *value) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  const size_t kl = strlen(key) + 1, vl = strlen(value) + 1;
  int rank, size;
  symm_mpi_drain_notes_(ch);
  if (kl + vl > INT_MAX) return SYMM_ERR_INVALID_ARG;
  if (symm_mpi_find_note_(ch, key)) return 0; /* the first value holds */
  char *text = (char *)malloc(kl + vl);
  if (!text) return SYMM_ERR_NO_MEMORY;
  memcpy(text, key, kl);
  memcpy(text + kl, value, vl);
  symm_mpi_note_t *n = symm_mpi_keep_note_(ch, text, (int)(kl + vl));
  if (!n) return SYMM_ERR_NO_MEMORY;
  MPI_Comm_rank(ch->notes, &rank);
  MPI_Comm_size(ch->notes, &size);
  if (!(n->req = (MPI_Request *)calloc((size_t)size, sizeof *n->req))) return SYMM_ERR_NO_MEMORY;
  for (int r = 0; r < size; r++)
    if (r != rank && MPI_Isend(n->text, n->len, MPI_CHAR, r, SYMM_MPI_NOTE_TAG, ch->notes,
                               &n->req[n->nreq++]) != MPI_SUCCESS)
      return SYMM_ERR_BACKEND;
  return 0;
}

static inline int symm_mpi_note_get_(void *ctx, const char *key, char *value, size_t cap,
                                     int *found) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  symm_mpi_drain_notes_(ch);
  const symm_mpi_note_t *n = symm_mpi_find_note_(ch, key);
  *found = n != NULL;
  if (n && cap) {
    const char *v = n->text + strlen(n->text) + 1;
    size_t vl = strlen(v);
    if (vl >= cap) vl = cap - 1;
    memcpy(value, v, vl);
    value[vl] = 0;
  }
  return 0;
}

/* A send not yet done keeps its text (a few hundred bytes, after a
 * failure only): MPI may still read it. */
static inline void symm_mpi_free_notes_(symm_mpi_channel_t *ch) {
  symm_mpi_drain_notes_(ch);
  for (symm_mpi_note_t *n = ch->heard, *next; n; n = next) {
    int done = 1;
    next = n->next;
    for (int i = 0; i < n->nreq; i++) {
      int sent = 0;
      if (n->req[i] != MPI_REQUEST_NULL) MPI_Test(&n->req[i], &sent, MPI_STATUS_IGNORE);
      if (n->req[i] != MPI_REQUEST_NULL) MPI_Request_free(&n->req[i]), done = 0;
    }
    if (done) free(n->text);
    free(n->req);
    free(n);
  }
  ch->heard = NULL;
}

static inline void symm_mpi_release_(void *ctx) {
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)ctx;
  if (ch->notes != MPI_COMM_NULL) {
    symm_mpi_free_notes_(ch);
    MPI_Comm_free(&ch->notes);
  }
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
  symm_mpi_channel_t *ch = (symm_mpi_channel_t *)calloc(1, sizeof *ch);
  MPI_Comm local = MPI_COMM_NULL;
  int rank, size, local_rank = -1, local_size = -1;
  if (!ch) {
    MPI_Comm_free(&dup);
    return SYMM_ERR_NO_MEMORY;
  }
  ch->comm = dup;
  ch->notes = MPI_COMM_NULL;
  if (MPI_Comm_dup(dup, &ch->notes) != MPI_SUCCESS) ch->notes = MPI_COMM_NULL;
  if (ch->notes == MPI_COMM_NULL || MPI_Comm_rank(dup, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(dup, &size) != MPI_SUCCESS) {
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
  cb->note_put = symm_mpi_note_put_;
  cb->note_get = symm_mpi_note_get_;
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
