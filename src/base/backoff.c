/* Waiting for another process's store to shared memory (the host backend's
 * flags, the shared-memory bootstrap's slots).
 * Spin about 20 us, then sched_yield up to 1 ms, then nanosleep growing to
 * 64 us.  With more ranks on this host than CPUs the rank waited for is
 * likely not running: no spinning, and a yield hands the CPU to it.  With
 * more than SYMM_BACKOFF_CROWDED_PER_CPU (4) ranks a CPU (hundreds of ranks
 * on a few CPUs) a yield would mostly wake another waiter, and every
 * wake-up takes a CPU
 * from the ranks that have work: no yielding either, and sleeps that grow
 * to 64 us times the ranks per CPU, at most 1 ms, so that the waiters of a
 * host wake about as often in all as one would alone. */
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "symm_backoff.h"
#include "symm_util.h"

#define SPIN_NS 20000ull
#define YIELD_NS 1000000ull
#define SLEEP_MAX_NS 64000ull
#define SLEEP_CROWDED_MAX_NS 1000000ull /* the longest sleep when ranks outnumber CPUs */
#define SLEEP_CROWDED_FIRST_NS 16000ull
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
  b->sleep_ns = b->crowded ? SLEEP_CROWDED_FIRST_NS : 1000;
  b->iter = 0;
  b->spinning = b->spin_ns > 0;
}

/* Spinning, yielding and the longest sleep, for ranks_here ranks on cpus. */
static void fit(symm_backoff_t *b, int ranks_here, int cpus) {
  if (cpus < 1) cpus = 1;
  b->ranks_here = ranks_here;
  b->crowded = ranks_here > SYMM_BACKOFF_CROWDED_PER_CPU * cpus;
  b->spin_ns = ranks_here > cpus ? 0 : SPIN_NS;
  b->sleep_max_ns = SLEEP_MAX_NS;
  if (b->crowded) {
    const uint64_t per_cpu = (uint64_t)((ranks_here + cpus - 1) / cpus);
    b->sleep_max_ns = SLEEP_MAX_NS * per_cpu < SLEEP_CROWDED_MAX_NS ? SLEEP_MAX_NS * per_cpu
                                                                    : SLEEP_CROWDED_MAX_NS;
  }
}

void symm_backoff_start(symm_backoff_t *b, int timeout_ms, int ranks_here) {
  fit(b, ranks_here, usable_cpus());
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

void symm_backoff_host_cpus(symm_backoff_t *b, int cpus) {
  if (cpus < 1) return;
  fit(b, b->ranks_here, cpus);
  symm_backoff_reset(b);
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
  if (waited < YIELD_NS && !b->crowded) {
    sched_yield();
    return true;
  }
  /* Never past the deadline: a wait ends at it, not a sleep later. */
  uint64_t nap = b->sleep_ns < b->deadline - now ? b->sleep_ns : b->deadline - now;
  struct timespec ts = {0, (long)nap};
  nanosleep(&ts, NULL);
  if (b->sleep_ns < b->sleep_max_ns) b->sleep_ns *= 2;
  if (b->sleep_ns > b->sleep_max_ns) b->sleep_ns = b->sleep_max_ns;
  return true;
}
