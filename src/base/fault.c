/* SYMM_FAULT: a testing aid that kills or stops this process at one named
 * point of the library (src/base/symm_fault.h), so that the fault tests
 * can hit a rank exactly inside init, a rendezvous or a collective instead
 * of racing a signal from outside against it. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_INIT
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symm_error.h"
#include "symm_fault.h"
#include "symm_settings.h"

const char *const symm_fault_phase_names[SYMM_FAULT_COUNT_] = {
    NULL,         "init.hello",  "init.shm", "alloc", "rendezvous", "barrier",
    "collective", "signal_wait", "free",     "destroy"};

_Atomic int symm_fault_armed;
/* Atomic: communicators made at once from several threads each arm the
 * points (with the same setting). */
static _Atomic int fault_signal; /* SIGKILL or SIGSTOP */
static _Atomic int fault_rank;   /* -1: every rank */

typedef struct {
  int phase, signal, rank;
} fault_spec_t;

/* Parses "<phase>:<kill|stop>[:rank]"; false with why on anything else. */
static bool parse_spec(const char *text, fault_spec_t *out, char *why, size_t why_len) {
  char buf[64];
  if (strlen(text) >= sizeof buf) goto bad;
  snprintf(buf, sizeof buf, "%s", text);
  char *action = strchr(buf, ':');
  if (!action) goto bad;
  *action++ = 0;
  char *rank = strchr(action, ':');
  if (rank) *rank++ = 0;
  out->phase = SYMM_FAULT_NONE;
  for (int p = 1; p < SYMM_FAULT_COUNT_; p++)
    if (strcmp(buf, symm_fault_phase_names[p]) == 0) out->phase = p;
  if (out->phase == SYMM_FAULT_NONE) goto bad;
  if (strcmp(action, "kill") == 0) out->signal = SIGKILL;
  else if (strcmp(action, "stop") == 0) out->signal = SIGSTOP;
  else goto bad;
  out->rank = -1;
  if (rank) {
    char *end;
    long r = strtol(rank, &end, 10);
    if (end == rank || *end || r < 0 || r > 1 << 24) goto bad;
    out->rank = (int)r;
  }
  return true;
bad:
  if (why) {
    int n = snprintf(why, why_len, "accepted: <phase>:<kill|stop>[:rank], phase one of");
    for (int p = 1; p < SYMM_FAULT_COUNT_ && n > 0 && (size_t)n < why_len; p++)
      n += snprintf(why + n, why_len - (size_t)n, " %s", symm_fault_phase_names[p]);
  }
  return false;
}

bool symm_fault_check(const char *text, char *why, size_t why_len) {
  fault_spec_t spec;
  return parse_spec(text, &spec, why, why_len);
}

void symm_fault_arm(const char *spec_text) {
  fault_spec_t spec = {SYMM_FAULT_NONE, 0, -1};
  if (spec_text && *spec_text && !parse_spec(spec_text, &spec, NULL, 0))
    spec.phase = SYMM_FAULT_NONE;
  atomic_store_explicit(&fault_signal, spec.signal, memory_order_relaxed);
  atomic_store_explicit(&fault_rank, spec.rank, memory_order_relaxed);
  atomic_store_explicit(&symm_fault_armed, spec.phase, memory_order_release);
}

void symm_fault_fire(symm_fault_phase_t phase, int rank) {
  /* Acquire: the rank and signal armed with this phase. */
  int armed = atomic_load_explicit(&symm_fault_armed, memory_order_acquire);
  if (armed != (int)phase) return;
  const int only = atomic_load_explicit(&fault_rank, memory_order_relaxed);
  const int sig = atomic_load_explicit(&fault_signal, memory_order_relaxed);
  if (only >= 0 && rank != only) return;
  /* Disarmed once: of threads at the point together, one raises. */
  if (!atomic_compare_exchange_strong(&symm_fault_armed, &armed, SYMM_FAULT_NONE)) return;
  SYMM_WARN(INIT, "SYMM_FAULT: rank %d raises %s at %s", rank,
            sig == SIGKILL ? "SIGKILL" : "SIGSTOP", symm_fault_phase_names[phase]);
  raise(sig);
}
