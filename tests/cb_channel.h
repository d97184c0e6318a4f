/* Bootstrap callbacks (symm_bootstrap_callbacks_t) for the tests, a
 * stand-in for MPI with no store anywhere: a segment mapped before the
 * ranks fork (cb_channel_map) carries the all-gather, the notes and each
 * rank's pid, so it reaches across the tests' namespace hosts too.  One
 * region per communicator; a split's groups get regions of their own.
 *
 * lost_rank plays a runtime that knows its processes: a rank whose pid
 * (recorded at cb_channel_open) names no process any more (the all-gather
 * returns SYMM_ERR_PEER_LOST when it waits for such a rank).  A channel of
 * version 1 has neither notes nor lost_rank, as an older caller's. */
#ifndef SYMM_TEST_CB_CHANNEL_H
#define SYMM_TEST_CB_CHANNEL_H

#include <stdint.h>

#include "symmem.h"

#define CB_CHANNEL_MAX_RANKS 8
#define CB_CHANNEL_REGIONS 32

typedef struct cb_region cb_region_t;

typedef struct cb_channel {
  cb_region_t *r;
  int region, rank, size;
  unsigned version; /* of the callbacks it fills: 1 or SYMM_BOOTSTRAP_CALLBACKS_VERSION */
  uint64_t round;
  int splits;
  /* Faults: from round fail_at on, rank fail_rank's allgather returns
   * fail_code at once (SYMM_ERR_TIMEOUT: after waiting timeout_ms). */
  int fail_rank, fail_code;
  uint64_t fail_at;
  int calls;      /* allgather calls on this rank */
  int note_gets;  /* note_get calls on this rank */
} cb_channel_t;

/* Maps the segment (once per test process), before the ranks fork. */
void cb_channel_map(void);
/* Fills *ch and *cb for `rank` of `size` on region `region` (0 for a
 * job's first communicator, another for a second one at the same time)
 * with callbacks of `version` (1: no notes, no lost_rank). */
void cb_channel_open(cb_channel_t *ch, int region, int rank, int size, unsigned version,
                     symm_bootstrap_callbacks_t *cb);
/* Leaves no store to be found: the harness's store variables unset. */
void cb_channel_forget_store(void);
/* symm_comm_init on cb with `backend` and `timeout_ms` (0: default). */
symm_result_t cb_channel_comm_init(symm_bootstrap_callbacks_t *cb, symm_backend_t backend,
                                   int timeout_ms, symm_comm_t **comm);

#endif
