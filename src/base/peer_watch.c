/* Peers' processes watched by pidfd, or by start time where pidfd_open is
 * missing (symm_peer_watch.h).  A pid alone is no identity: a dead rank's
 * pid may be given to any new process, which kill(pid, 0) then finds
 * alive, and survivors waited their whole timeout for a rank long gone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "symm_peer_watch.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Field 22 of the stat file at path; 0 if unreadable.  *pid_field, if
 * given, gets field 1 (the pid as the /proc mount's namespace numbers it). */
static uint64_t read_start_time(const char *path, long *pid_field) {
  char buf[1024];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  if (pid_field) *pid_field = strtol(buf, NULL, 10);
  /* The command name may hold spaces and parentheses: fields count from
   * the last ')'.  Field 3 (the state) follows it. */
  const char *p = strrchr(buf, ')');
  if (!p) return 0;
  p++;
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return 0;
  }
  return strtoull(p + 1, NULL, 10);
}

/* Whether /proc shows this process's own PID namespace (a container may
 * mount its host's): only then does /proc/<pid> name our pid's process.
 * Read once per process (a child forked into another namespace asks
 * again): a communicator of hundreds of ranks watches every peer. */
static bool proc_is_ours(void) {
  static _Atomic long asked_by; /* the pid that read `ours`, 0: nobody yet */
  static _Atomic bool ours;
  const long me = (long)getpid();
  if (atomic_load_explicit(&asked_by, memory_order_acquire) == me)
    return atomic_load_explicit(&ours, memory_order_relaxed);
  long pid = -1;
  const bool now = read_start_time("/proc/self/stat", &pid) != 0 && pid == me;
  atomic_store_explicit(&ours, now, memory_order_relaxed);
  atomic_store_explicit(&asked_by, me, memory_order_release);
  return now;
}

uint64_t symm_process_start_time(int32_t pid) {
  if (!proc_is_ours()) return 0;
  char path[64];
  if (pid == 0) snprintf(path, sizeof path, "/proc/self/stat");
  else snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  return read_start_time(path, NULL);
}

/* Zombie: exited, not reaped. */
static bool is_zombie(int32_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

static _Atomic bool use_pidfd = true;

void symm_peer_watch_use_pidfd(bool on) { use_pidfd = on; }

typedef struct {
  int32_t pid;
  uint64_t start; /* as published; 0: unknown */
  int pidfd;      /* -1: none (pidfd_open missing) */
  int refs;
  bool gone;      /* known gone: stays so */
  bool by_start;  /* no pidfd: compare the start time at each look */
  bool checked;   /* the start time looked at (check_start) */
} watch_t;

static struct {
  pthread_mutex_t lock;
  watch_t *v;
  size_t n, cap;
} watches = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Under the lock: the latest watch of pid (with start, unless start is
 * UINT64_MAX: any), or NULL. */
static watch_t *find(int32_t pid, uint64_t start) {
  for (size_t i = watches.n; i-- > 0;)
    if (watches.v[i].pid == pid && (start == UINT64_MAX || watches.v[i].start == start))
      return &watches.v[i];
  return NULL;
}

bool symm_peer_watch_add(int32_t pid, uint64_t start) {
  if (pid <= 0) return true;
  pthread_mutex_lock(&watches.lock);
  bool ok = true;
  watch_t *w = find(pid, start);
  if (w) {
    w->refs++;
    goto out;
  }
  if (watches.n == watches.cap) {
    size_t cap = watches.cap ? 2 * watches.cap : 8;
    watch_t *v = realloc(watches.v, cap * sizeof *v);
    if (!v) {
      ok = false;
      goto out;
    }
    watches.v = v;
    watches.cap = cap;
  }
  w = &watches.v[watches.n++];
  *w = (watch_t){.pid = pid, .start = start, .pidfd = -1, .refs = 1};
  if (use_pidfd) {
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (w->pidfd < 0 && errno == ESRCH) w->gone = true;
  }
out:
  pthread_mutex_unlock(&watches.lock);
  return ok;
}

void symm_peer_watch_remove(int32_t pid, uint64_t start) {
  if (pid <= 0) return;
  pthread_mutex_lock(&watches.lock);
  watch_t *w = find(pid, start);
  if (w && --w->refs == 0) {
    if (w->pidfd >= 0) close(w->pidfd);
    /* Kept in order: the latest watch of a pid answers for it. */
    memmove(w, w + 1, (size_t)(watches.v + watches.n - (w + 1)) * sizeof *w);
    watches.n--;
  }
  pthread_mutex_unlock(&watches.lock);
}

/* Under the lock: checks w's start time, at the first look rather than
 * when the watch is added (the pidfd is opened then), so that a
 * communicator of N ranks costs each rank a read of /proc per peer it
 * waits for, not N.  As safe: the pidfd was opened after the process that
 * published `start` had started; if pid shows that start time now, that
 * process has held pid since it started, so when the pidfd was opened
 * too; if it shows another, that process is gone. */
static void check_start(watch_t *w) {
  w->checked = true;
  const bool by_proc = w->start && proc_is_ours();
  if (by_proc && symm_process_start_time(w->pid) != w->start) w->gone = true;
  w->by_start = w->pidfd < 0 && by_proc;
  if (w->gone && w->pidfd >= 0) {
    close(w->pidfd);
    w->pidfd = -1;
  }
}

int symm_peer_watch_gone(int32_t pid) {
  pthread_mutex_lock(&watches.lock);
  watch_t *w = find(pid, UINT64_MAX);
  int gone = -1;
  if (!w) goto out;
  if (!w->checked) check_start(w);
  if (!w->gone && w->pidfd >= 0) {
    /* Readable once the process has exited, zombie or reaped. */
    struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
    w->gone = poll(&p, 1, 0) > 0;
  } else if (!w->gone && w->by_start) {
    w->gone = symm_process_start_time(pid) != w->start || is_zombie(pid);
  } else if (!w->gone) {
    gone = -1; /* nothing better than the pid: the caller's own look */
    goto out;
  }
  gone = w->gone;
out:
  pthread_mutex_unlock(&watches.lock);
  return gone;
}
