/* The floor of a CPU collective: two processes on two CPUs hand one cache
 * line back and forth through shared memory (a flag and its payload in the
 * same line, as the CPU engine's small-message path does), and the copy
 * bandwidth of one core (a STREAM-style copy of a buffer well above the
 * last-level cache).  Prints one line each, and the numbers as
 * "floor: round_trip_ns=... copy_gbps=..." for scripts.
 *
 *   cacheline_pingpong [-c CPU_A,CPU_B] [-n ROUNDS] [-m COPY_MIB]
 *
 * Both processes are pinned (default: the first two CPUs this process may
 * use); the copy runs on CPU_A. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic uint64_t ping; /* A -> B: round number */
  _Alignas(64) _Atomic uint64_t pong; /* B -> A */
} line_t;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity");
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Median of the round trips of `rounds` handoffs, in ns. */
static double ping_pong(int a, int b, long rounds) {
  line_t *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (l == MAP_FAILED) return -1;
  memset(l, 0, sizeof *l);
  pid_t pid = fork();
  if (pid == 0) {
    pin(b);
    for (uint64_t k = 1; k <= (uint64_t)rounds + 1000; k++) {
      while (atomic_load_explicit(&l->ping, memory_order_acquire) != k) relax();
      atomic_store_explicit(&l->pong, k, memory_order_release);
    }
    _exit(0);
  }
  pin(a);
  double *rt = malloc(sizeof *rt * (size_t)rounds);
  for (uint64_t k = 1; k <= (uint64_t)rounds + 1000; k++) {
    const uint64_t t0 = now_ns();
    atomic_store_explicit(&l->ping, k, memory_order_release);
    while (atomic_load_explicit(&l->pong, memory_order_acquire) != k) relax();
    if (k > 1000) rt[k - 1001] = (double)(now_ns() - t0);
  }
  waitpid(pid, NULL, 0);
  munmap(l, sizeof *l);
  /* The median: insensitive to the interrupts a shared machine brings. */
  for (long i = 1; i < rounds; i++)
    for (long j = i; j > 0 && rt[j - 1] > rt[j]; j--) {
      double t = rt[j];
      rt[j] = rt[j - 1], rt[j - 1] = t;
    }
  double m = rt[rounds / 2];
  free(rt);
  return m;
}

/* Best of 5 copies of mib MiB, in GB/s (bytes copied per second). */
static double copy_bw(size_t mib) {
  const size_t n = mib << 20;
  char *src = malloc(n), *dst = malloc(n);
  if (!src || !dst) return -1;
  memset(src, 1, n);
  memset(dst, 2, n);
  double best = 0;
  for (int i = 0; i < 5; i++) {
    const uint64_t t0 = now_ns();
    memcpy(dst, src, n);
    const double gbps = (double)n / (double)(now_ns() - t0);
    if (gbps > best) best = gbps;
  }
  free(src);
  free(dst);
  return best;
}

int main(int argc, char **argv) {
  int a = -1, b = -1;
  long rounds = 20001;
  size_t mib = 256;
  int opt;
  while ((opt = getopt(argc, argv, "c:n:m:h")) != -1) {
    if (opt == 'c' && sscanf(optarg, "%d,%d", &a, &b) == 2) continue;
    if (opt == 'n' && (rounds = atol(optarg)) > 0) continue;
    if (opt == 'm' && (mib = (size_t)atol(optarg)) > 0) continue;
    fprintf(stderr, "usage: %s [-c CPU_A,CPU_B] [-n ROUNDS] [-m COPY_MIB]\n", argv[0]);
    return opt == 'h' ? 0 : 2;
  }
  cpu_set_t mine;
  if (a < 0 && sched_getaffinity(0, sizeof mine, &mine) == 0)
    for (int c = 0; c < CPU_SETSIZE && b < 0; c++)
      if (CPU_ISSET(c, &mine)) *(a < 0 ? &a : &b) = c;
  if (a < 0 || b < 0) {
    fprintf(stderr, "cacheline_pingpong: needs two CPUs\n");
    return 1;
  }
  const double rt = ping_pong(a, b, rounds);
  const double bw = copy_bw(mib);
  printf("cache-line round trip, CPUs %d and %d: %.0f ns (median of %ld)\n", a, b, rt, rounds);
  printf("copy bandwidth, one core (CPU %d), %zu MiB memcpy: %.2f GB/s (best of 5)\n", a, mib,
         bw);
  printf("floor: round_trip_ns=%.0f copy_gbps=%.2f\n", rt, bw);
  return 0;
}
