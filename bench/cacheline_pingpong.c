/* The floor of a CPU collective: two processes on two CPUs hand one cache
 * line back and forth through shared memory (a flag and its payload in the
 * same line, as the CPU engine's small-message path does), and the copy
 * bandwidth of one core (a STREAM-style copy of a buffer well above the
 * last-level cache; bench/stream_copy.c copies on several cores at once),
 * the context switch of two processes that take turns on one CPU
 * (sched_yield), what ranks that share a CPU pay on every call, and the
 * kernel's copy from another process's memory (process_vm_readv), what a
 * rank reads a peer's ordinary memory with.
 * The loops are floor.c's, which symmem-bench runs between its ranks.
 * Prints one line each, and the numbers as
 * "floor: round_trip_ns=... copy_gbps=... switch_ns=... cma_gbps=..." for
 * scripts (cma_gbps 0: not permitted here).
 *
 *   cacheline_pingpong [-c CPU_A,CPU_B] [-n ROUNDS] [-m COPY_MIB]
 *
 * Both processes are pinned (default: the first two CPUs this process may
 * use); the copy and the switches run on CPU_A. */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "floor.h"

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity");
}

/* Median round trip between CPUs a and b, in ns (floor.c's loops); with
 * a == b, the mean context switch of two processes taking turns there. */
static double ping_pong(int a, int b, long rounds) {
  floor_line_t *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (l == MAP_FAILED) return -1;
  memset(l, 0, sizeof *l);
  pid_t pid = fork();
  if (pid == 0) {
    pin(b);
    if (a == b) floor_turns(l, 1, rounds);
    else floor_pong(l, rounds);
    _exit(0);
  }
  pin(a);
  const double ns = a == b ? floor_turns(l, 0, rounds) : floor_ping(l, rounds);
  waitpid(pid, NULL, 0);
  munmap(l, sizeof *l);
  return ns;
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
  const double bw = floor_copy_gbps(mib << 20, 5);
  const double sw = ping_pong(a, a, rounds / 4 + 1);
  const double cma = floor_cma_gbps((size_t)8 << 20, 5);
  printf("cache-line round trip, CPUs %d and %d: %.0f ns (median of %ld)\n", a, b, rt, rounds);
  printf("copy bandwidth, one core (CPU %d), %zu MiB memcpy: %.2f GB/s (best of 5)\n", a, mib,
         bw);
  printf("context switch, two processes taking turns on CPU %d: %.0f ns (mean of %ld)\n", a, sw,
         2 * (rounds / 4 + 1));
  if (cma > 0)
    printf("copy from another process (process_vm_readv), 8 MiB: %.2f GB/s (best of 5)\n", cma);
  else
    printf("copy from another process (process_vm_readv): not permitted here\n");
  printf("floor: round_trip_ns=%.0f copy_gbps=%.2f switch_ns=%.0f cma_gbps=%.2f\n", rt, bw, sw,
         cma > 0 ? cma : 0);
  return 0;
}
