/* The floor of a CPU collective (floor.h). */
#include "floor.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_readv */
#endif
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double floor_ping(floor_line_t *l, long rounds) {
  double *rt = malloc(sizeof *rt * (size_t)rounds);
  for (uint64_t k = 1; k <= (uint64_t)(rounds + FLOOR_WARMUP); k++) {
    const uint64_t t0 = now_ns();
    atomic_store_explicit(&l->ping, k, memory_order_release);
    while (atomic_load_explicit(&l->pong, memory_order_acquire) != k) relax();
    if (rt && k > FLOOR_WARMUP) rt[k - FLOOR_WARMUP - 1] = (double)(now_ns() - t0);
  }
  if (!rt) return -1;
  qsort(rt, (size_t)rounds, sizeof *rt, by_value);
  const double median = rt[rounds / 2];
  free(rt);
  return median;
}

void floor_pong(floor_line_t *l, long rounds) {
  for (uint64_t k = 1; k <= (uint64_t)(rounds + FLOOR_WARMUP); k++) {
    while (atomic_load_explicit(&l->ping, memory_order_acquire) != k) relax();
    atomic_store_explicit(&l->pong, k, memory_order_release);
  }
}

double floor_turns(floor_line_t *l, int side, long rounds) {
  const uint64_t turns = 2 * (uint64_t)(rounds + FLOOR_WARMUP);
  uint64_t t0 = 0;
  for (uint64_t k = (uint64_t)side; k < turns; k += 2) {
    while (atomic_load_explicit(&l->ping, memory_order_acquire) != k) sched_yield();
    if (k == 2 * FLOOR_WARMUP) t0 = now_ns();
    atomic_store_explicit(&l->ping, k + 1, memory_order_release);
  }
  if (side) return 0;
  /* Side 0's last turn was turns - 2; side 1's after it ends the rounds. */
  while (atomic_load_explicit(&l->ping, memory_order_acquire) != turns) sched_yield();
  return t0 ? (double)(now_ns() - t0) / (double)(turns - 2 * FLOOR_WARMUP) : -1;
}

double floor_cma_gbps(size_t bytes, int reps) {
  const size_t room = (bytes + 4095) / 4096 * 4096;
  char *dst = aligned_alloc(4096, room);
  int where[2], done[2];
  if (!dst || pipe(where) != 0) {
    free(dst);
    return -1;
  }
  if (pipe(done) != 0) {
    close(where[0]), close(where[1]), free(dst);
    return -1;
  }
  memset(dst, 2, room);
  const pid_t pid = fork();
  if (pid == 0) { /* holds its buffer until the reader closes `done` */
    close(where[0]), close(done[1]);
    char *src = aligned_alloc(4096, room);
    if (src) memset(src, 1, room);
    const uintptr_t at = (uintptr_t)src;
    char byte;
    if (write(where[1], &at, sizeof at) == (ssize_t)sizeof at) (void)!read(done[0], &byte, 1);
    _exit(0);
  }
  close(where[1]), close(done[0]);
  uintptr_t at = 0;
  double best = -1;
  if (pid > 0 && read(where[0], &at, sizeof at) == (ssize_t)sizeof at && at)
    for (int i = 0; i < reps; i++) {
      const struct iovec local = {dst, bytes}, remote = {(void *)at, bytes};
      const uint64_t t0 = now_ns();
      if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)bytes) break;
      const double gbps = (double)bytes / (double)(now_ns() - t0);
      if (gbps > best) best = gbps;
    }
  close(where[0]), close(done[1]);
  if (pid > 0) waitpid(pid, NULL, 0);
  free(dst);
  return best;
}

double floor_copy_gbps(size_t bytes, int reps) {
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    return -1;
  }
  memset(src, 1, bytes); /* every page touched before the clock starts */
  memset(dst, 2, bytes);
  double best = 0;
  for (int i = 0; i < reps; i++) {
    const uint64_t t0 = now_ns();
    memcpy(dst, src, bytes);
    const double gbps = (double)bytes / (double)(now_ns() - t0);
    if (gbps > best) best = gbps;
  }
  free(src);
  free(dst);
  return best;
}
