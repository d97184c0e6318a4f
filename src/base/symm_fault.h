/*
 * Fault injection for tests: SYMM_FAULT="<phase>:<kill|stop>[:rank]" makes
 * the library send itself SIGKILL or SIGSTOP when the named rank (every
 * rank without one) first reaches that point, so that a test can kill or
 * freeze a rank at an exact place inside a call.  Each point is one relaxed
 * load and compare; nothing else happens while SYMM_FAULT is unset.
 * Not installed.
 */
#ifndef SYMM_FAULT_H
#define SYMM_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* The points, in the order a rank reaches them; names as SYMM_FAULT takes
 * them in symm_fault_phase_names. */
typedef enum symm_fault_phase {
  SYMM_FAULT_NONE = 0,
  SYMM_FAULT_INIT_HELLO,  /* init: the store accepted HELLO, the others not met yet */
  SYMM_FAULT_INIT_SHM,    /* init: shared-memory segment made (rank 0) or opened */
  SYMM_FAULT_ALLOC,       /* symm_tensor_alloc, arguments checked */
  SYMM_FAULT_RENDEZVOUS,  /* symm_tensor_rendezvous: exchanged, peers not mapped */
  SYMM_FAULT_BARRIER,     /* symm_comm_barrier, before it arrives */
  SYMM_FAULT_COLLECTIVE,  /* a collective, arguments checked, before it arrives */
  SYMM_FAULT_SIGNAL_WAIT, /* symm_signal_wait, before it waits */
  SYMM_FAULT_FREE,        /* symm_tensor_free of a live tensor */
  SYMM_FAULT_DESTROY,     /* symm_comm_destroy, before anything is released */
  SYMM_FAULT_COUNT_
} symm_fault_phase_t;

/* "init.hello", "init.shm", "alloc", ...; [SYMM_FAULT_NONE] is NULL. */
extern const char *const symm_fault_phase_names[SYMM_FAULT_COUNT_];

/* The armed phase (SYMM_FAULT_NONE while SYMM_FAULT is unset). */
extern _Atomic int symm_fault_armed;

/* Raises the armed signal if `rank` is the armed one; disarms first, so a
 * stopped rank that is continued goes on. */
void symm_fault_fire(symm_fault_phase_t phase, int rank);

static inline void symm_fault_point(symm_fault_phase_t phase, int rank) {
  if (__builtin_expect(atomic_load_explicit(&symm_fault_armed, memory_order_relaxed) ==
                           (int)phase, 0))
    symm_fault_fire(phase, rank);
}

/* Arms the points from SYMM_FAULT's text (NULL or "": disarmed), which the
 * setting's check has accepted.  Called by symm_comm_init. */
void symm_fault_arm(const char *spec);

#endif /* SYMM_FAULT_H */
