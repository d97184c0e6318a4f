/*
 * Waiting for another process's store to shared memory, with backoff
 * (backoff.c).
 */
#ifndef SYMM_BACKOFF_H
#define SYMM_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

/* Waiting with backoff for another process's store to shared memory
 * (backoff.c): start, then pause until the store is seen.  pause returns
 * false once timeout_ms has passed since its first clock reading (at most
 * 64 spins after start) or the calling thread's operation deadline has
 * (symm_op_deadline_begin), whichever comes first, or, with lost set, once
 * the process named by watch is gone (looked at every 20 ms: by the pidfd
 * opened at init where there is one, symm_peer_watch.h).  ranks_here:
 * processes of the job on this host (more than CPUs: no spinning; more
 * than 4 a CPU: no yielding either, and longer sleeps, up to 1 ms).  reset
 * restarts the backoff, not the deadline, after progress. */
/* More ranks a CPU than this: waits only sleep (no spinning, no yield). */
#define SYMM_BACKOFF_CROWDED_PER_CPU 4

typedef struct {
  uint64_t deadline, since, sleep_ns, spin_ns, next_check, sleep_max_ns;
  bool crowded; /* more than 4 ranks a CPU on this host: sleep, never spin or yield */
  int ranks_here;
  int timeout_ms;
  unsigned iter;
  bool spinning;
  int32_t pid;  /* the process waited for (symm_backoff_watch), 0: none */
  bool lost;    /* pause returned false because that process is gone */
} symm_backoff_t;
void symm_backoff_start(symm_backoff_t *b, int timeout_ms, int ranks_here);
/* Like start, but the wait ends at deadline_ns (symm_now_ns clock), shared
 * by the waits of one operation instead of timeout_ms from the first pause
 * of each. */
void symm_backoff_start_until(symm_backoff_t *b, uint64_t deadline_ns, int ranks_here);
void symm_backoff_reset(symm_backoff_t *b);
/* After start: the CPUs this host's ranks may run on together, where the
 * caller knows them (ranks each bound to a CPU of its own see one CPU in
 * their affinity, yet none waits for a descheduled peer); the backoff
 * then weighs ranks_here against these.  cpus < 1: unknown, no change. */
void symm_backoff_host_cpus(symm_backoff_t *b, int cpus);
void symm_backoff_watch(symm_backoff_t *b, int32_t pid);
bool symm_backoff_pause(symm_backoff_t *b);

#endif /* SYMM_BACKOFF_H */
