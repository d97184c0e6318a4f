/* Waiting for another process's store to shared memory (the host backend's
 * flags, the shared-memory bootstrap's slots).
 * Spin about 20 us, then sched_yield up to 1 ms, then nanosleep growing to
 * 64 us; no spinning at all when this host has more ranks than CPUs, where
 * the rank waited for is likely not running and spinning would only keep it
 * off its CPU. */
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "symm_backoff.h"
#include "symm_util.h"

#define SPIN_NS 20000ull
#define YIELD_NS 1000000ull
#define SLEEP_MAX_NS 64000ull
#define LIVENESS_NS 20000000ull /* look at the waited-for process every 20 ms */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* CPUs this process may run on, counted once. */
static int usable_cpus(void) {
  static _Atomic int cached;
  int n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n) return n;
  cpu_set_t set;
  n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                   : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  atomic_store_explicit(&cached, n, memory_order_relaxed);
  return n;
}

/* The clock is first read after 64 spins (most waits end before, and a
 * clock read costs as much as a short wait): `since` 0 means not yet. */
void symm_backoff_reset(symm_backoff_t *b) {
  b->since = 0;
  b->sleep_ns = 1000;
  b->iter = 0;
  b->spinning = b->spin_ns > 0;
}

void symm_backoff_start(symm_backoff_t *b, int timeout_ms, int ranks_here) {
  b->spin_ns = ranks_here > usable_cpus() ? 0 : SPIN_NS;
  symm_backoff_reset(b);
  b->deadline = 0;
  b->next_check = 0;
  b->timeout_ms = timeout_ms;
  b->pid = 0;
  b->lost = false;
}

void symm_backoff_start_until(symm_backoff_t *b, uint64_t deadline_ns, int ranks_here) {
  symm_backoff_start(b, 0, ranks_here);
  b->deadline = deadline_ns ? deadline_ns : 1; /* 0 would mean "not started" */
}

void symm_backoff_allow_spin(symm_backoff_t *b, bool spin) {
  b->spin_ns = spin ? SPIN_NS : 0;
  b->spinning = spin;
}

void symm_backoff_watch(symm_backoff_t *b, int32_t pid) { b->pid = pid; }

/* The clock is read every 64 spins only. */
bool symm_backoff_pause(symm_backoff_t *b) {
  if (b->spinning && (++b->iter & 63)) {
    cpu_relax();
    return true;
  }
  uint64_t now = symm_now_ns();
  /* Within the calling operation's deadline, where one is on: the waits
   * of one call (a signal barrier's, one per peer) share its timeout. */
  if (!b->deadline) b->deadline = symm_deadline_after(b->timeout_ms);
  if (!b->next_check) b->next_check = now + LIVENESS_NS; /* a wait that short needs no /proc read */
  if (!b->since) b->since = now;
  if (now >= b->deadline) return false;
  if (b->pid > 0 && now >= b->next_check) {
    b->next_check = now + LIVENESS_NS;
    if (symm_process_gone(b->pid)) {
      b->lost = true;
      return false;
    }
  }
  uint64_t waited = now - b->since;
  if (waited < b->spin_ns) {
    cpu_relax();
    return true;
  }
  b->spinning = false;
  if (waited < YIELD_NS) {
    sched_yield();
    return true;
  }
  struct timespec ts = {0, (long)b->sleep_ns};
  nanosleep(&ts, NULL);
  if (b->sleep_ns < SLEEP_MAX_NS) b->sleep_ns *= 2;
  return true;
}
