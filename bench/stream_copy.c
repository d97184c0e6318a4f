/* The machine's copy bandwidth, STREAM's copy kernel: P processes, each
 * pinned to a CPU of its own, copy a buffer well above the last-level
 * cache at the same moment, as P ranks of a large collective do.  Prints
 * each process's best GB/s (bytes copied per second) and
 * "floor: copy_gbps_per_core=... copy_gbps_total=... procs=P" for scripts;
 * symmem-bench reports large collectives against the per-core figure,
 * which it measures the same way (floor.c) between its own ranks.
 *
 *   stream_copy [-p PROCS] [-m MIB] [-r REPS]
 *
 * PROCS defaults to the CPUs this process may use, MIB (each of source and
 * destination, per process) to 256, REPS to 5. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "floor.h"

typedef struct {
  _Atomic int ready;
  double gbps[CPU_SETSIZE];
} shared_t;

/* The p-th CPU of set, or -1. */
static int nth_cpu(const cpu_set_t *set, int p) {
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set) && p-- == 0) return c;
  return -1;
}

static void copier(shared_t *sh, int cpu, int procs, int i, size_t bytes, int reps) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) perror("sched_setaffinity");
  /* Every process copies at once: the start waits for all of them. */
  atomic_fetch_add(&sh->ready, 1);
  while (atomic_load(&sh->ready) < procs) sched_yield();
  sh->gbps[i] = floor_copy_gbps(bytes, reps);
}

int main(int argc, char **argv) {
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_ZERO(&mine);
  int procs = CPU_COUNT(&mine), reps = 5, opt;
  size_t mib = 256;
  while ((opt = getopt(argc, argv, "p:m:r:h")) != -1) {
    if (opt == 'p' && (procs = atoi(optarg)) > 0) continue;
    if (opt == 'm' && (mib = (size_t)atol(optarg)) > 0) continue;
    if (opt == 'r' && (reps = atoi(optarg)) > 0) continue;
    fprintf(stderr, "usage: %s [-p PROCS] [-m MIB] [-r REPS]\n", argv[0]);
    return opt == 'h' ? 0 : 2;
  }
  if (procs < 1 || procs > CPU_COUNT(&mine)) {
    fprintf(stderr, "stream_copy: %d processes, but this process may run on %d CPUs\n", procs,
            CPU_COUNT(&mine));
    return 2;
  }
  shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  for (int i = 0; i < procs; i++)
    if (fork() == 0) {
      copier(sh, nth_cpu(&mine, i), procs, i, mib << 20, reps);
      _exit(0);
    }
  for (int i = 0; i < procs; i++) wait(NULL);
  double total = 0, least = 0;
  for (int i = 0; i < procs; i++) {
    printf("copy, CPU %d, %zu MiB, %d processes at once: %.2f GB/s (best of %d)\n",
           nth_cpu(&mine, i), mib, procs, sh->gbps[i], reps);
    if (sh->gbps[i] < 0) return 1;
    total += sh->gbps[i];
    if (i == 0 || sh->gbps[i] < least) least = sh->gbps[i];
  }
  printf("floor: copy_gbps_per_core=%.2f copy_gbps_total=%.2f procs=%d\n", least, total, procs);
  return 0;
}
