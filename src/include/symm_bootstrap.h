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
  int version; /* 2 */
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
  /* Notes: what one rank tells its peers while they wait outside the
   * bootstrap's rounds (a failed NCCL call, a peer seen gone).  Not
   * collective; they return at once, never waiting for peers.  `key` is
   * whole (the communicator's prefix in it), a value a short string.
   * Optional: NULL where the bootstrap has no such channel (its callers
   * then learn at their own deadline).  note_put: the key's first value
   * stays.  note_get: *found false when no rank put the key yet. */
  symm_result_t (*note_put)(symm_bootstrap_t *bs, const char *key, const char *value);
  symm_result_t (*note_get)(symm_bootstrap_t *bs, const char *key, char *value, size_t cap,
                            bool *found);
  /* Optional: a rank that the bootstrap's server or launcher saw gone,
   * or -1 (none, or it cannot say now). */
  int (*lost_rank)(symm_bootstrap_t *bs);
  /* members above: version 2 */
} symm_bootstrap_ops_t;

struct symm_bootstrap {
  const symm_bootstrap_ops_t *ops;
  int rank, size;
  int timeout_ms;
  void *state;
};

/* ------------------------------------------------ bootstrap implementations */
/* What the ranks know when a bootstrap is chosen.  The bootstrap of first
 * contact sees only the first group; a layered one is chosen after the
 * ranks agreed on who they are, through `over`, and sees the rest too. */
typedef struct symm_bootstrap_env {
  symm_store_t *store;    /* the job's store connection, NULL if none */
  const symm_bootstrap_callbacks_t *callbacks; /* the caller's, NULL if none */
  const char *prefix;     /* store keys of this communicator */
  int rank, size, timeout_ms;
  /* Known after the identity agreement (NULL / 0 before it): */
  symm_bootstrap_t *over; /* the bootstrap the ranks agreed through */
  const char *job_id;     /* same on every rank */
  int index;              /* the communicator's index in this process */
  const int32_t *pids;    /* [size]; 0 where a rank's pid cannot be watched */
  bool single_host;       /* every rank runs on this host */
} symm_bootstrap_env_t;

/* One entry of the table in bootstrap.c.  Entries are chosen in the
 * table's order: the first usable layered one replaces the bootstrap of
 * first contact, which is the first usable one that is not layered. */
typedef struct symm_bootstrap_impl {
  const char *name;
  const char *what; /* for messages: "the store", "shared memory" */
  bool layered;     /* set up through env->over, once the ranks know each other */
  /* Whether it can serve these ranks; false with the reason in why.  Must
   * answer alike on every rank (from agreed facts and the job's settings),
   * because init is collective. */
  bool (*usable)(const symm_bootstrap_env_t *env, char *why, size_t cap);
  /* Collective (over env->over when layered).  SYMM_ERR_UNSUPPORTED: some
   * rank cannot use it, and every rank keeps what it has. */
  symm_result_t (*init)(const symm_bootstrap_env_t *env, symm_bootstrap_t **out);
} symm_bootstrap_impl_t;

extern const symm_bootstrap_impl_t symm_bootstrap_store_impl;
extern const symm_bootstrap_impl_t symm_bootstrap_cb_impl;
extern const symm_bootstrap_impl_t symm_bootstrap_shm_impl;

/* The table, in preference order. */
const symm_bootstrap_impl_t *const *symm_bootstrap_list(size_t *count);
/* The bootstrap of first contact: the first usable entry that is not
 * layered.  Collective.  SYMM_ERR_UNSUPPORTED when none is usable. */
symm_result_t symm_bootstrap_open(const symm_bootstrap_env_t *env, symm_bootstrap_t **out);
/* After the identity agreement: sets up the first usable layered entry
 * over env->over.  *out is NULL when none is usable or its setup fails on
 * some rank (every rank then stays with env->over, and the error is
 * cleared); a timeout or a lost rank during the setup is returned.
 * Collective over env->over. */
symm_result_t symm_bootstrap_upgrade(const symm_bootstrap_env_t *env, symm_bootstrap_t **out);

/* Bootstrap through a shared-memory segment, for ranks of one host; large
 * contributions go through `store` (keys under `prefix`).  pids[size] are
 * the ranks' processes (a vanished one is reported as lost).  Collective
 * over store_bs; SYMM_ERR_UNSUPPORTED when some rank cannot map the
 * segment (then every rank stays with store_bs). */
symm_result_t symm_bootstrap_shm_init(symm_bootstrap_t *store_bs, symm_store_t *store,
                                      const char *prefix, const char *job_id, int index,
                                      const int32_t *pids, symm_bootstrap_t **out);

/* Bootstrap through the caller's callbacks (bootstrap_cb.c), which stay
 * the caller's (cb must outlive the bootstrap). */
symm_result_t symm_bootstrap_cb_init(const symm_bootstrap_callbacks_t *cb, int timeout_ms,
                                     symm_bootstrap_t **out);
/* Tells the callbacks of bs (if it is theirs) that this rank failed a step
 * its peers may wait in (their `abort`); nothing for other bootstraps. */
void symm_bootstrap_cb_abort(symm_bootstrap_t *bs, symm_result_t code, const char *reason);

/* PMIx (bootstrap_pmix.c): whether the environment shows a PMIx server,
 * and callbacks over it (malloc'd; its release callback gives the
 * channel back), libpmix loaded at run time. */
bool symm_pmix_present(void);
symm_result_t symm_pmix_bootstrap(symm_bootstrap_callbacks_t **out);

/* Bootstrap over the job's key-value store; keys under `prefix`. */
symm_result_t symm_bootstrap_store_init(symm_store_t *store, const char *prefix,
                                        int rank, int size, int timeout_ms,
                                        symm_bootstrap_t **out);

#endif /* SYMM_BOOTSTRAP_H */
