/* What the fake libnccl (fake_nccl.c) tells the tests through its exported
 * hook fakenccl_stats; shared by the fake and the tests. */
#ifndef SYMM_FAKENCCL_H
#define SYMM_FAKENCCL_H

/* Cumulative counts of this process's calls, and what is live now. */
typedef struct fakenccl_stats {
  long registrations;   /* successful ncclCommWindowRegister calls */
  long live_windows;    /* registered, not yet deregistered */
  long live_allocs;     /* ncclMemAlloc blocks not yet freed */
  long live_comms;      /* communicators not yet destroyed or aborted */
  long inits_config;    /* ncclCommInitRankConfig calls */
  long inits_plain;     /* ncclCommInitRank calls */
  long nonblocking;     /* of those, made with blocking = 0 */
  long collectives;     /* collectives run (all-to-all by send/recv: one) */
  long p2p_groups;      /* groups of sends and receives run */
  long aborts;          /* ncclCommAbort calls */
  long splits;          /* ncclCommSplit calls */
  long unique_ids;      /* ncclGetUniqueId calls */
  long deregistrations; /* ncclCommWindowDeregister calls on a window */
  /* Windows on memory that is not ncclMemAlloc's (the user's VMM memory):
   * registered, live now, deregistered. */
  long user_windows, live_user_windows, user_deregistrations;
} fakenccl_stats_t;

#endif
