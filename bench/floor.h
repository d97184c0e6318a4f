/*
 * The floor of a CPU collective, measured (floor.c): the round trip of one
 * cache line between two processes, the copy bandwidth of a core, the
 * context switch between two processes on one CPU, and the kernel's copy
 * from another process.
 * bench/cacheline_pingpong.c and bench/stream_copy.c print them on their
 * own; symmem-bench measures them between its own ranks and prints its
 * times against them.
 */
#ifndef SYMM_BENCH_FLOOR_H
#define SYMM_BENCH_FLOOR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Shared by the two sides of a ping-pong: a flag each, in lines of their
 * own, so that every handoff moves one line one way. */
typedef struct {
  _Alignas(64) _Atomic uint64_t ping; /* the pinging side's round number */
  _Alignas(64) _Atomic uint64_t pong; /* the answering side's */
} floor_line_t;

/* Rounds before the timed ones, on both sides (the line and the code warm). */
#define FLOOR_WARMUP 1000

/* The pinging side: `rounds` timed round trips after FLOOR_WARMUP; returns
 * their median in ns (a shared machine's interrupts do not move it), or a
 * negative number when out of memory.  The other side runs floor_pong with
 * the same rounds on the same line, zeroed before either starts. */
double floor_ping(floor_line_t *l, long rounds);
void floor_pong(floor_line_t *l, long rounds);

/* Two processes bound to one CPU taking turns, each yielding the CPU
 * until the other has had its turn: what a rank that shares its CPU pays
 * on every call (k ranks a CPU: k switches a call, each rank running once).
 * Side 0 returns the mean ns per switch of `rounds` turns each after
 * FLOOR_WARMUP (a negative number if the turns never came); side 1 runs
 * the same rounds on the same line, zeroed before either starts. */
double floor_turns(floor_line_t *l, int side, long rounds);

/* The kernel's copy from another process (process_vm_readv, what a rank
 * reads a peer's ordinary memory with, symmem and Open MPI alike): `bytes`
 * read from a child's page-aligned buffer into one of this process, `reps`
 * times; the best in GB/s, or a negative number where the read is not
 * permitted here (Yama ptrace_scope, seccomp) or memory is short. */
double floor_cma_gbps(size_t bytes, int reps);

/* STREAM's copy (dst[i] = src[i]) of `bytes`, each way, `reps` times: the
 * best in GB/s (bytes copied per second), or a negative number when out of
 * memory.  Buffers well above the last-level cache measure memory. */
double floor_copy_gbps(size_t bytes, int reps);

#endif /* SYMM_BENCH_FLOOR_H */
