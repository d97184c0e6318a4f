/*
 * Sockets that a child made by fork() must not keep.  A child that holds a
 * copy of a rank's fd-exchange listener keeps its abstract name bound, and
 * copies of the store and fd-exchange connections keep them open: when the
 * rank then dies, its peers time out instead of seeing SYMM_ERR_PEER_LOST.
 * Forking is common (data-loader workers, subprocess launchers), so every
 * socket of the library is registered here and, in the child, replaced by
 * /dev/null (dup2): the socket is dropped, and the number stays valid for
 * the library code that may still close it there.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "symm_util.h"

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int *guard_fds;
static size_t guard_count, guard_cap;

/* fork() copies the lock as it is: hold it across the fork so that the
 * child's copy of the table is consistent. */
static void guard_prepare(void) { pthread_mutex_lock(&guard_lock); }
static void guard_parent(void) { pthread_mutex_unlock(&guard_lock); }
static void guard_child(void) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (size_t i = 0; i < guard_count; i++) {
    if (null_fd >= 0) dup3(null_fd, guard_fds[i], O_CLOEXEC);
    else close(guard_fds[i]);
  }
  if (null_fd >= 0) close(null_fd);
  guard_count = 0;
  pthread_mutex_unlock(&guard_lock);
}

static void guard_install(void) { pthread_atfork(guard_prepare, guard_parent, guard_child); }

void symm_fork_guard_add(int fd) {
  if (fd < 0) return;
  pthread_once(&guard_once, guard_install);
  pthread_mutex_lock(&guard_lock);
  if (guard_count == guard_cap) {
    size_t cap = guard_cap ? 2 * guard_cap : 64;
    int *grown = realloc(guard_fds, cap * sizeof *grown);
    if (grown) {
      guard_fds = grown;
      guard_cap = cap;
    }
  }
  /* Out of memory: the socket is not guarded, which only costs a forked
   * child's peers a timeout. */
  if (guard_count < guard_cap) guard_fds[guard_count++] = fd;
  pthread_mutex_unlock(&guard_lock);
}

void symm_fork_guard_close(int fd) {
  if (fd < 0) return;
  /* Unregister and close under the lock: no fork in between can hand the
   * child a number that the process has meanwhile reused. */
  pthread_mutex_lock(&guard_lock);
  for (size_t i = 0; i < guard_count; i++)
    if (guard_fds[i] == fd) {
      guard_fds[i] = guard_fds[--guard_count];
      break;
    }
  close(fd);
  pthread_mutex_unlock(&guard_lock);
}
