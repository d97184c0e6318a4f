/*
 * A rank for the fault matrix (tests/test-faults.c): runs every phase of a
 * communicator's life once and records, as it goes, each call's result and
 * duration, so that the driver can judge what a survivor got when a peer
 * was killed or stopped (SYMM_FAULT does that inside the library).
 *
 *   symm-fault-rank DIR [--before-init kill|stop:RANK] [--second]
 *
 * DIR/pid.R    this rank's pid, written first; every rank then waits for
 *              all of them
 * DIR/job      (rank 0) the job id and store address of the environment
 * DIR/res.R    one line per call: "<call> <result code> <ms>", then "exit";
 *              written unbuffered, so a rank killed half-way leaves what it
 *              did
 * --before-init  that rank sends itself the signal just before it calls
 *              symm_comm_init (the library is not involved yet)
 * --second     a first communicator is made (and kept) before the one the
 *              phases run on: a rank that dies before the second init leaves
 *              a store rank 0 serves for several
 * DIR/go       the driver makes it once every survivor has written "held"
 *              after its phases: only then do they destroy, so that a
 *              survivor that is done early does not turn another one's
 *              wait for the faulty rank into a wait for itself
 *
 * Phases: init, alloc, rendezvous, barrier, all_reduce, a signal ring
 * (rank 0 puts to 1, then waits for the last rank; every other rank waits
 * for its predecessor, then puts to its successor), free, final_barrier,
 * destroy.  After the first call that fails only DIR/go and destroy follow.  SIGTERM
 * is ignored: symmem-run stops the job when a rank dies, and the matrix
 * judges each survivor's own calls (the launcher's SIGKILL ends it later).
 * Exit status 0 whatever the calls returned; 2 on a usage or file error.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "symmem.h"

#define MAX_RANKS 64

static int res_fd = -1;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Records one call; returns its result. */
static symm_result_t note(const char *call, symm_result_t res, uint64_t start) {
  dprintf(res_fd, "%s %d %llu\n", call, (int)res, (unsigned long long)(now_ms() - start));
  if (res != SYMM_SUCCESS)
    fprintf(stderr, "fault-rank %s: %s: %s (%s)\n", getenv("SYMM_RANK"), call,
            symm_strerror(res), symm_last_error());
  return res;
}

#define STEP(call, expr)                                                     \
  do {                                                                       \
    uint64_t t0_ = now_ms();                                                 \
    if (note(call, (expr), t0_) != SYMM_SUCCESS) goto out;                   \
  } while (0)

/* Whole or not at all (a rename), so a reader never sees half of it. */
static int write_file(const char *dir, const char *name, const char *text) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  dprintf(fd, "%s", text);
  close(fd);
  return rename(tmp, path);
}

/* "kill:R" or "stop:R": this rank's signal if R is this rank, else 0. */
static int before_init_signal(const char *spec, int rank) {
  int sig = strncmp(spec, "kill:", 5) == 0 ? SIGKILL : strncmp(spec, "stop:", 5) == 0 ? SIGSTOP : -1;
  if (sig < 0) return -1;
  return atoi(spec + 5) == rank ? sig : 0;
}

/* Whether DIR/name exists for every name of a NULL-terminated list. */
static int all_exist(const char *dir, const char *const *names) {
  char path[512];
  for (; *names; names++) {
    snprintf(path, sizeof path, "%s/%s", dir, *names);
    if (access(path, F_OK) != 0) return 0;
  }
  return 1;
}

/* Waits (inotify, 60 s at most) until DIR holds every file named. */
static void wait_for_files(const char *dir, const char *const *names) {
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd >= 0 && inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO) < 0) {
    close(fd);
    fd = -1;
  }
  const uint64_t deadline = now_ms() + 60000;
  while (!all_exist(dir, names) && fd >= 0 && now_ms() < deadline) {
    struct pollfd p = {fd, POLLIN, 0};
    char events[4096];
    if (poll(&p, 1, (int)(deadline - now_ms())) > 0 && read(fd, events, sizeof events) < 0) break;
  }
  if (fd >= 0) close(fd);
}

/* The signal ring over a rendezvoused tensor. */
static symm_result_t ring(symm_tensor_t *t, int rank, int size) {
  uint64_t t0 = now_ms();
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (rank == 0 && note("signal_put", symm_signal_put(t, next, 0, NULL), t0) != SYMM_SUCCESS)
    return SYMM_ERR_INTERNAL;
  t0 = now_ms();
  if (note("signal_wait", symm_signal_wait(t, prev, 0, NULL), t0) != SYMM_SUCCESS)
    return SYMM_ERR_INTERNAL;
  t0 = now_ms();
  if (rank != 0 && note("signal_put", symm_signal_put(t, next, 0, NULL), t0) != SYMM_SUCCESS)
    return SYMM_ERR_INTERNAL;
  return SYMM_SUCCESS;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : NULL, *before = NULL;
  int second = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--before-init") == 0 && i + 1 < argc) before = argv[++i];
    else if (strcmp(argv[i], "--second") == 0) second = 1;
    else dir = NULL;
  }
  const char *rank_env = getenv("SYMM_RANK"), *size_env = getenv("SYMM_WORLD_SIZE");
  if (!dir || !rank_env || !size_env) {
    fprintf(stderr, "usage: SYMM_RANK=R SYMM_WORLD_SIZE=N ... symm-fault-rank DIR "
                    "[--before-init kill|stop:RANK] [--second]\n");
    return 2;
  }
  const int rank = atoi(rank_env), size = atoi(size_env);
  signal(SIGTERM, SIG_IGN);
  char text[512], name[32];
  snprintf(text, sizeof text, "%d\n", (int)getpid());
  snprintf(name, sizeof name, "pid.%d", rank);
  if (write_file(dir, name, text) != 0) return 2;
  /* The ranks start together: all of them exist before any fault, so that
   * symmem-run, which starts no more ranks once one died, has started them
   * all. */
  char pid_names[MAX_RANKS][16];
  const char *names[MAX_RANKS + 1];
  if (size < 1 || size > MAX_RANKS) return 2;
  for (int r = 0; r < size; r++) {
    snprintf(pid_names[r], sizeof pid_names[r], "pid.%d", r);
    names[r] = pid_names[r];
  }
  names[size] = NULL;
  wait_for_files(dir, names);
  if (rank == 0) {
    const char *job = getenv("SYMM_JOB_ID"), *addr = getenv("SYMM_STORE_ADDR");
    snprintf(text, sizeof text, "%s %s\n", job ? job : "-", addr ? addr : "-");
    if (write_file(dir, "job", text) != 0) return 2;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/res.%d", dir, rank);
  res_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (res_fd < 0) return 2;

  symm_comm_t *first = NULL, *comm = NULL;
  symm_tensor_t *t = NULL;
  if (second) STEP("init1", symm_comm_init(NULL, &first));
  if (second) STEP("barrier1", symm_comm_barrier(first));
  if (before) {
    int sig = before_init_signal(before, rank);
    if (sig < 0) return 2;
    if (sig) raise(sig);
  }
  STEP("init", symm_comm_init(NULL, &comm));
  const int64_t n = 1024;
  STEP("alloc", symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  STEP("rendezvous", symm_tensor_rendezvous(t));
  STEP("barrier", symm_comm_barrier(comm));
  float *data = symm_tensor_data(t);
  for (int64_t i = 0; i < n; i++) data[i] = (float)rank;
  STEP("all_reduce", symm_all_reduce(comm, data, data, (size_t)n, SYMM_DTYPE_F32,
                                     SYMM_REDUCE_SUM, NULL));
  if (ring(t, rank, size) != SYMM_SUCCESS) goto out;
  symm_tensor_t *freeing = t;
  t = NULL;
  STEP("free", symm_tensor_free(freeing));
  STEP("final_barrier", symm_comm_barrier(comm));
out:
  dprintf(res_fd, "held\n");
  static const char *const go[] = {"go", NULL};
  wait_for_files(dir, go);
  if (t) symm_tensor_free(t);
  if (comm) {
    uint64_t t0 = now_ms();
    symm_comm_destroy(comm);
    note("destroy", SYMM_SUCCESS, t0);
  }
  if (first) {
    uint64_t t0 = now_ms();
    symm_comm_destroy(first);
    note("destroy1", SYMM_SUCCESS, t0);
  }
  dprintf(res_fd, "exit\n");
  close(res_fd);
  return 0;
}
