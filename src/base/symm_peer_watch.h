/*
 * Peers' processes watched by what cannot be reused: a pidfd opened when
 * the peer became known, checked against the start time it published, so
 * that a dead rank whose pid the kernel gave to another process is still
 * seen as gone (peer_watch.c).  Not installed.
 */
#ifndef SYMM_PEER_WATCH_H
#define SYMM_PEER_WATCH_H

#include <stdbool.h>
#include <stdint.h>

/* The start time of process pid (0: this process) in clock ticks since
 * boot, field 22 of /proc/<pid>/stat; 0 if it cannot be read, or if /proc
 * is not this process's PID namespace's (a pid would name another
 * process there). */
uint64_t symm_process_start_time(int32_t pid);

/* Starts watching pid, which published start time `start` (0: unknown).
 * It opens a pidfd for pid; the first look (symm_peer_watch_gone) reads
 * pid's start time: where that is not `start`, the process that published
 * is gone and pid names another process or none, and the watch says gone
 * from now on.  Where
 * pidfd_open is missing (old kernels, valgrind) the start time is read at
 * each look instead.  Watches are counted: each add has its remove.
 * false: out of memory (pid is then watched by kill(pid, 0) as before). */
bool symm_peer_watch_add(int32_t pid, uint64_t start);
void symm_peer_watch_remove(int32_t pid, uint64_t start);

/* Whether the watched process with pid is gone: 1 gone (exited, or pid
 * reused since), 0 alive, -1 pid is not watched.  A pid watched twice (a
 * gone process's and its successor's) answers for the latest watch.
 * Thread-safe; symm_process_gone asks it first. */
int symm_peer_watch_gone(int32_t pid);

/* For tests: off makes later watches work as where pidfd_open is missing
 * (by start time).  On by default. */
void symm_peer_watch_use_pidfd(bool on);

#endif /* SYMM_PEER_WATCH_H */
