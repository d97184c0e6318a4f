/*
 * Small helpers of every layer: hashing, clocks and deadlines, random
 * bytes, processes.  Not installed.
 */
#ifndef SYMM_UTIL_H
#define SYMM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_error.h"

/* ---------------------------------------------------------------- helpers */
uint64_t symm_hash64(const void *data, size_t len, uint64_t seed);
uint64_t symm_now_ns(void);              /* CLOCK_MONOTONIC */
/* Milliseconds from now until deadline_ns (symm_now_ns clock), rounded up;
 * 0 once it has passed. */
int symm_ms_until(uint64_t deadline_ns);
/* Waits until fd is ready for `events` (errors and hang-ups count as ready:
 * the next read or write reports them) or deadline_ns passes; EINTR is
 * retried.  1: ready, 0: the deadline passed, -1: poll failed (errno). */
int symm_poll_until(int fd, short events, uint64_t deadline_ns);
void symm_random_bytes(void *buf, size_t len);
/* out[0, 2n] = the n bytes in lower-case hex, then NUL. */
void symm_hex(char *out, const void *bytes, size_t n);
/* out[0, 2 nbytes] = nbytes random bytes (at most 64) in hex, then NUL. */
void symm_random_hex(char *out, size_t nbytes);
/* One deadline for an operation made of several waits, one per peer (a
 * rendezvous fetching every peer's memory), so that it ends after the
 * timeout, not after (world - 1) timeouts.  begin sets it for the calling
 * thread (an earlier one already set stays) and returns what end puts back;
 * symm_deadline_after is what a wait of timeout_ms starting now keeps to:
 * now + timeout_ms, or the operation's deadline if that comes first. */
uint64_t symm_op_deadline_begin(int timeout_ms);
void symm_op_deadline_end(uint64_t previous);
uint64_t symm_deadline_after(int timeout_ms);
/* The same for a local step whose outcome the ranks then agree on (a
 * rendezvous mapping its peers): it ends a tenth of the operation's
 * timeout (at most 1 s) before the operation's deadline, so that a rank
 * whose step waited in vain (a peer's silent fd server) still reaches the
 * agreement in time to tell the others why, instead of arriving after
 * they gave up and leaving them to blame a rank that was only waiting. */
uint64_t symm_deadline_before_agreeing(int timeout_ms);
/* The slack symmem.h promises past a timeout: max(250 ms, timeout / 10).
 * A call returns within its timeout plus this. */
int symm_timeout_slack_ms(int timeout_ms);
/* What of that slack the waits that finish a call may use: the slack less
 * a tenth, left for what the call does after its last wait (its message,
 * closing, being scheduled again on a loaded machine), so that it returns
 * inside the promised bound rather than on it. */
int symm_timeout_grace_ms(int timeout_ms);
/* The slack is for waits that only finish a call whose deadline has come
 * (a reply in flight, a BYE, a drain); what a call does after them is
 * local work.  symm_op_limit clamps a wait's end to the calling thread's
 * operation deadline plus the grace (symm_timeout_grace_ms) of the timeout
 * its outermost begin was given (end_ns itself when no operation is on). */
uint64_t symm_op_limit(uint64_t end_ns);
/* Whether a file (a memfd) may grow to `bytes` under this process's
 * RLIMIT_FSIZE (ulimit -f): past it, ftruncate and fallocate raise SIGXFSZ,
 * which kills the process, so every growth checks first.  SYMM_SUCCESS, or
 * SYMM_ERR_NO_MEMORY naming `what`, the size and the limit. */
symm_result_t symm_file_size_check(size_t bytes, const char *what);
/* Process pid (on this host, in this PID namespace) is gone, or a zombie
 * nobody reaped yet. */
bool symm_process_gone(int32_t pid);
/* Process pid's state letter in /proc (R, S, T stopped, Z ...), 0 when it
 * cannot be read. */
char symm_process_state(int32_t pid);
/* The first rank of pids[0..n) other than `self` whose process is gone
 * (symm_process_gone; a pid of 0 is not watched), or -1. */
int symm_first_gone(const int32_t *pids, int n, int self);
/* This process's PID namespace: inode and device of /proc/self/ns/pid.
 * false (both 0) when that cannot be read. */
bool symm_pid_namespace(uint64_t *ino, uint64_t *dev);

/* Sockets a forked child must drop (fork_guard.c): add after creating one,
 * close through symm_fork_guard_close (unregisters, then closes). */
void symm_fork_guard_add(int fd);
void symm_fork_guard_close(int fd);
/* Round up to a multiple of align (power of two). */
static inline size_t symm_round_up(size_t v, size_t align) {
  return (v + align - 1) & ~(align - 1);
}

#endif /* SYMM_UTIL_H */
