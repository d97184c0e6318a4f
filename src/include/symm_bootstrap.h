/*
 * Bootstrap: how the ranks of a communicator exchange small blobs before
 * they share memory.  Not installed.
 */
#ifndef SYMM_BOOTSTRAP_H
#define SYMM_BOOTSTRAP_H

#include "symm_error.h"

/* ------------------------------------------------------------- bootstrap */
typedef struct symm_bootstrap symm_bootstrap_t;
typedef struct symm_bootstrap_ops {
  int version; /* 1 */
  const char *name;
  /* Gathers `len` bytes from every rank into recv[rank * len].  Collective. */
  symm_result_t (*allgather)(symm_bootstrap_t *bs, const void *send, size_t len, void *recv);
  /* Copies root's buf to every rank.  Collective. */
  symm_result_t (*broadcast)(symm_bootstrap_t *bs, void *buf, size_t len, int root);
  /* (No barrier: symm_comm_barrier is a tagged all-gather, so that a rank
   * in a barrier and one in a rendezvous see a mismatch, not a match.) */
  void (*fini)(symm_bootstrap_t *bs);
  /* Gathers contributions of any length: values[r] (malloc'd, caller frees
   * each) and lens[r] for every rank.  Collective. */
  symm_result_t (*allgatherv)(symm_bootstrap_t *bs, const void *send, size_t len,
                              void **values, size_t *lens);
  /* members above: version 1 */
} symm_bootstrap_ops_t;

struct symm_bootstrap {
  const symm_bootstrap_ops_t *ops;
  int rank, size;
  int timeout_ms;
  void *state;
};

/* Bootstrap through a shared-memory segment, for ranks of one host; large
 * contributions go through `store` (keys under `prefix`).  pids[size] are
 * the ranks' processes (a vanished one is reported as lost).  Collective
 * over store_bs; SYMM_ERR_UNSUPPORTED when some rank cannot map the
 * segment (then every rank stays with store_bs). */
symm_result_t symm_bootstrap_shm_init(symm_bootstrap_t *store_bs, symm_store_t *store,
                                      const char *prefix, const char *job_id, int index,
                                      const int32_t *pids, symm_bootstrap_t **out);

/* Bootstrap over the job's key-value store; keys under `prefix`. */
symm_result_t symm_bootstrap_store_init(symm_store_t *store, const char *prefix,
                                        int rank, int size, int timeout_ms,
                                        symm_bootstrap_t **out);

#endif /* SYMM_BOOTSTRAP_H */
