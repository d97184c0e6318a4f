/* Tests of the fd exchange (src/backends/util/fd_exchange.c): real servers
 * in this process or in forked ones, each started on a communicator of the
 * test's own (symm_test_comm_new); a store only where its lost ranks are
 * the point. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/util/fd_exchange.h"
#include "bootstrap/store.h"
#include "symm_test_access.h"
#include "cb_channel.h"
#include "harness.h"

/* ------------------------------------------------------------- helpers */

static void fdx_test_job(char *job, size_t cap) {
  unsigned char rnd[6];
  symm_random_bytes(rnd, sizeof rnd);
  snprintf(job, cap, "fdx%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5]);
}

/* The test's communicators of live fd exchanges (which ask them about
 * lost ranks), freed by fdx_stop. */
#define FDX_TEST_COMMS 16
static struct {
  symm_fdx_t *fdx;
  symm_comm_t *comm;
} fdx_comms[FDX_TEST_COMMS];

/* symm_fdx_start on a communicator of the test's own, made of o. */
static symm_result_t fdx_start_as(const symm_test_comm_opts_t *o, symm_fdx_t **out) {
  symm_comm_t *c = symm_test_comm_new(o);
  ASSERT(c != NULL);
  symm_result_t res = symm_fdx_start(c, out);
  for (int i = 0; res == SYMM_SUCCESS && i < FDX_TEST_COMMS; i++)
    if (!fdx_comms[i].comm) {
      fdx_comms[i].fdx = *out, fdx_comms[i].comm = c;
      return res;
    }
  ASSERT_MSG(res != SYMM_SUCCESS, "more than %d fd exchanges at once", FDX_TEST_COMMS);
  symm_test_comm_free(c);
  return res;
}

/* symm_fdx_stop, then frees its communicator. */
static void fdx_stop(symm_fdx_t *fdx) {
  symm_fdx_stop(fdx);
  for (int i = 0; i < FDX_TEST_COMMS; i++)
    if (fdx_comms[i].comm && fdx_comms[i].fdx == fdx) {
      symm_test_comm_free(fdx_comms[i].comm);
      fdx_comms[i].comm = NULL, fdx_comms[i].fdx = NULL;
    }
}

static symm_fdx_t *fdx_test_start(const char *job, int rank, int size, int timeout_ms) {
  symm_fdx_t *fdx = NULL;
  ASSERT_OK(fdx_start_as(&(symm_test_comm_opts_t){.job_id = job, .rank = rank, .size = size,
                                                   .timeout_ms = timeout_ms},
                         &fdx));
  ASSERT(fdx != NULL);
  return fdx;
}

static unsigned char fdx_pattern(int seed, size_t i) {
  return (unsigned char)((size_t)seed * 131u + i * 7u + (i >> 12));
}

/* A memfd of `size` bytes filled with seed's pattern. */
static int fdx_make_memfd(size_t size, int seed) {
  int fd = memfd_create("symm-test-fdx", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, (off_t)size), 0);
  unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT(p != MAP_FAILED);
  for (size_t i = 0; i < size; i++) p[i] = fdx_pattern(seed, i);
  ASSERT_EQ(munmap(p, size), 0);
  return fd;
}

/* Maps fd and checks it is the memfd fdx_make_memfd(size, seed) made. */
static void fdx_check_memfd(int fd, size_t size, int seed) {
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  ASSERT_EQ(st.st_size, size);
  ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  const unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT(p != MAP_FAILED);
  for (size_t i = 0; i < size; i++)
    if (p[i] != fdx_pattern(seed, i)) TEST_FAIL_("byte %zu of seed %d's memfd is %u", i, seed, p[i]);
  ASSERT_EQ(munmap((void *)p, size), 0);
}

static size_t fdx_rank_bytes(int rank) { return 4096u * (size_t)(rank + 1) + 17u * (size_t)rank; }

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* For each child of fdx_fork, the read end of a pipe whose only write end
 * that child holds: it polls readable (end of file) once the child has
 * exited.  Where pidfd_open is missing (older kernels, valgrind) it stands
 * in for the pidfd. */
#define FDX_MAX_CHILDREN 64
static struct {
  pid_t pid;
  int rd;
} fdx_children[FDX_MAX_CHILDREN];
static int fdx_nchildren;

/* An fd that polls readable once child pid (of fdx_fork) has exited. */
static int fdx_pidfd(pid_t pid) {
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return fd;
  if (errno != ENOSYS) TEST_FAIL_("pidfd_open(%d): %s", (int)pid, strerror(errno));
  for (int i = 0; i < fdx_nchildren; i++)
    if (fdx_children[i].pid == pid) {
      fd = fcntl(fdx_children[i].rd, F_DUPFD_CLOEXEC, 0);
      ASSERT_GE(fd, 0);
      return fd;
    }
  TEST_FAIL_("pidfd_open: %s, and %d is no child of fdx_fork", strerror(ENOSYS), (int)pid);
  return -1;
}

/* Waits up to timeout_ms for pid; kills it at the deadline.  Returns its
 * raw wait status. */
static int fdx_wait_child(pid_t pid, int timeout_ms) {
  int pfd = fdx_pidfd(pid);
  struct pollfd p = {pfd, POLLIN, 0};
  uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
  int rc;
  do {
    uint64_t now = test_now_ms();
    rc = poll(&p, 1, now < deadline ? (int)(deadline - now) : 0);
  } while (rc < 0 && errno == EINTR);
  close(pfd);
  int st;
  if (rc == 0) {
    kill(pid, SIGKILL);
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    TEST_FAIL_("child %d did not finish within %d ms", (int)pid, timeout_ms);
  }
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  return st;
}

static pid_t fdx_fork(void) {
  fflush(stdout);
  fflush(stderr);
  ASSERT(fdx_nchildren < FDX_MAX_CHILDREN);
  int death[2];
  ASSERT_EQ(pipe2(death, O_CLOEXEC), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) { /* the other children's ends would keep their pipes open */
    for (int i = 0; i < fdx_nchildren; i++) close(fdx_children[i].rd);
    fdx_nchildren = 0;
    close(death[0]);
    return 0;
  }
  close(death[1]);
  fdx_children[fdx_nchildren].pid = pid;
  fdx_children[fdx_nchildren].rd = death[0];
  fdx_nchildren++;
  return pid;
}

/* Reads one byte from fd within timeout_ms; returns read()'s result. */
static ssize_t fdx_read_byte(int fd, int timeout_ms) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return -1;
  char b;
  return read(fd, &b, 1);
}

/* ---- a group of forked ranks with a barrier through pipes ------------- */

typedef struct fdx_member {
  int rank, size;
  const char *job;
  int up, down; /* child's ends: write "arrived", read "go" */
} fdx_member_t;

typedef int (*fdx_rank_fn)(const fdx_member_t *m);

static void fdx_barrier(const fdx_member_t *m) {
  char b = 1;
  ASSERT_EQ(write(m->up, &b, 1), 1);
  ASSERT_EQ(read(m->down, &b, 1), 1);
}

/* Runs fn in n forked ranks of job; the parent releases each barrier once
 * every rank has arrived.  Returns how many ranks failed. */
static int fdx_run_group(int n, const char *job, fdx_rank_fn fn, int timeout_ms) {
  int up[8][2], down[8][2];
  pid_t pids[8];
  ASSERT_LE(n, 8);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(pipe2(up[r], O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(down[r], O_CLOEXEC), 0);
  }
  for (int r = 0; r < n; r++) {
    pids[r] = fdx_fork();
    if (pids[r] == 0) {
      for (int k = 0; k < n; k++) {
        if (k != r) close(up[k][1]), close(down[k][0]);
        close(up[k][0]);
        close(down[k][1]);
      }
      fdx_member_t m = {.rank = r, .size = n, .job = job, .up = up[r][1], .down = down[r][0]};
      int rc = fn(&m);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  for (int r = 0; r < n; r++) close(up[r][1]), close(down[r][0]);

  /* Waits on the ranks' arrivals and exits together. */
  uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
  int arrived = 0, live = n, bad = 0, pidfd[8];
  bool done[8] = {false}, up_eof[8] = {false};
  for (int r = 0; r < n; r++) pidfd[r] = fdx_pidfd(pids[r]);
  while (live > 0 && !bad && test_now_ms() < deadline) {
    struct pollfd pf[16];
    int who[16], k = 0;
    for (int r = 0; r < n; r++) {
      if (done[r]) continue;
      if (!up_eof[r]) pf[k] = (struct pollfd){up[r][0], POLLIN, 0}, who[k++] = r;
      pf[k] = (struct pollfd){pidfd[r], POLLIN, 0}, who[k++] = -1 - r;
    }
    uint64_t now = test_now_ms();
    if (poll(pf, (nfds_t)k, now < deadline ? (int)(deadline - now) : 0) < 0) continue;
    for (int i = 0; i < k; i++) {
      if (!pf[i].revents) continue;
      int r = who[i] >= 0 ? who[i] : -1 - who[i];
      if (who[i] >= 0) {
        char b;
        if (read(up[r][0], &b, 1) == 1) arrived++;
        else up_eof[r] = true;
        continue;
      }
      int st;
      ASSERT_EQ(waitpid(pids[r], &st, 0), pids[r]);
      done[r] = true;
      live--;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        bad++;
      }
    }
    if (arrived == n) {
      for (int r = 0; r < n; r++) ASSERT_EQ(write(down[r][1], "g", 1), 1);
      arrived = 0;
    }
  }
  for (int r = 0; r < n; r++) close(pidfd[r]);
  for (int r = 0; r < n; r++) {
    if (!done[r]) {
      if (!bad) fprintf(stderr, "rank %d still running after %d ms\n", r, timeout_ms);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
      bad++;
    }
    close(up[r][0]);
    close(down[r][1]);
  }
  return bad;
}

/* ---- raw protocol client -------------------------------------------- */

/* Connects to rank's server, which is up; -1 if that fails. */
static int fdx_raw_connect(const char *job, int rank) {
  struct sockaddr_un addr;
  socklen_t len = symm_fdx_address(job, 0, rank, &addr);
  ASSERT_GT(len, 0);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  if (connect(s, (struct sockaddr *)&addr, len) == 0) return s;
  close(s);
  return -1;
}

static void fdx_raw_send(int s, const void *buf, size_t len, int fd_to_attach) {
  ASSERT_EQ(symm_fdx_sendmsg(s, buf, len, fd_to_attach, 0), (ssize_t)len);
}

static void fdx_raw_request(int s, uint32_t magic, uint32_t op, uint64_t id) {
  symm_fdx_request_t req;
  memset(&req, 0, sizeof req);
  req.magic = magic;
  req.op = op;
  req.id = id;
  fdx_raw_send(s, &req, sizeof req, -1);
}

/* Receives one message within timeout_ms: returns its length (0 at EOF, -1
 * on timeout); *fd gets an attached fd or -1. */
static ssize_t fdx_raw_recv(int s, symm_fdx_reply_t *rep, int *fd, int timeout_ms) {
  *fd = -1;
  memset(rep, 0, sizeof *rep);
  struct pollfd p = {s, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return -1;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {rep, sizeof *rep};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof ctl.buf;
  ssize_t n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0 && errno == ECONNRESET) return 0;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  if (n > 0 && cm && cm->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(cm), sizeof(int));
  return n;
}

/* The server must close s (after a malformed request) within 5 s. */
static void fdx_expect_closed(int s) {
  symm_fdx_reply_t rep;
  int fd;
  ssize_t n = fdx_raw_recv(s, &rep, &fd, 5000);
  if (fd >= 0) close(fd);
  ASSERT_EQ(n, 0);
  close(s);
}

/* ---------------------------------------------------------------- tests */

/* Every rank publishes one memfd; every rank fetches every rank's (its own
 * included) twice, the second time over the cached connection. */
static int fdx_all_pairs_rank(const fdx_member_t *m) {
  symm_fdx_t *fdx = fdx_test_start(m->job, m->rank, m->size, 10000);
  int mine = fdx_make_memfd(fdx_rank_bytes(m->rank), m->rank);
  ASSERT_OK(symm_fdx_publish(fdx, 100 + (uint64_t)m->rank, mine));
  close(mine); /* the server keeps its own dup */
  fdx_barrier(m);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < m->size; i++) {
      int peer = (m->rank + i) % m->size;
      int fd = -1;
      ASSERT_OK(symm_fdx_fetch(fdx, peer, 100 + (uint64_t)peer, &fd));
      fdx_check_memfd(fd, fdx_rank_bytes(peer), peer);
      close(fd);
    }
  }
  fdx_barrier(m); /* nobody stops serving while others still fetch */
  ASSERT_EQ(symm_fdx_published(fdx), 1);
  fdx_stop(fdx);
  return 0;
}

TEST_IMPL(fdx_all_pairs) {
  for (int n = 2; n <= 8; n++) {
    char job[48];
    fdx_test_job(job, sizeof job);
    int bad = fdx_run_group(n, job, fdx_all_pairs_rank, 20000);
    if (bad) TEST_FAIL_("%d of %d ranks failed", bad, n);
  }
  return 0;
}

TEST_IMPL(fdx_not_found) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 5000);
  symm_fdx_t *b = fdx_test_start(job, 1, 2, 5000);
  int fd = 123;
  ASSERT_RES(symm_fdx_fetch(b, 0, 77, &fd), SYMM_ERR_NOT_FOUND);
  ASSERT_EQ(fd, -1);
  ASSERT_STR_CONTAINS(symm_last_error(), "77");

  int mem = fdx_make_memfd(8192, 5);
  ASSERT_OK(symm_fdx_publish(a, 77, mem));
  ASSERT_EQ(symm_fdx_published(a), 1);
  ASSERT_OK(symm_fdx_fetch(b, 0, 77, &fd)); /* same connection as the miss */
  fdx_check_memfd(fd, 8192, 5);
  close(fd);
  ASSERT_OK(symm_fdx_fetch(a, 0, 77, &fd)); /* from itself */
  fdx_check_memfd(fd, 8192, 5);
  close(fd);

  int before = test_count_fds();
  ASSERT_RES(symm_fdx_publish(a, 77, mem), SYMM_ERR_INVALID_ARG);
  ASSERT_EQ(test_count_fds(), before); /* the refused dup was closed */
  ASSERT_RES(symm_fdx_publish(a, 78, -1), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_fdx_fetch(b, 2, 77, &fd), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_fdx_fetch(b, -1, 77, &fd), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_fdx_fetch(NULL, 0, 77, &fd), SYMM_ERR_INVALID_ARG);

  symm_fdx_unpublish(a, 12345); /* unknown: ignored */
  ASSERT_EQ(symm_fdx_published(a), 1);
  symm_fdx_unpublish(a, 77);
  ASSERT_EQ(symm_fdx_published(a), 0);
  ASSERT_RES(symm_fdx_fetch(b, 0, 77, &fd), SYMM_ERR_NOT_FOUND);
  close(mem);
  fdx_stop(b);
  fdx_stop(a);
  return 0;
}

/* A rank whose server never starts: a timeout, not a hang. */
TEST_IMPL(fdx_no_server) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 300);
  int fd = 123;
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_fdx_fetch(a, 1, 5, &fd);
  uint64_t took = test_now_ms() - t0;
  ASSERT(res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST);
  ASSERT_EQ(fd, -1);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 3000);
  fdx_stop(a);
  return 0;
}

/* A peer whose process is gone before its fd server ever answered: a loss
 * found at once (the process is watched), naming the rank, not a timeout
 * that could blame a live rank. */
TEST_IMPL(fdx_peer_gone_before_serving) {
  char job[48];
  fdx_test_job(job, sizeof job);
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT(child > 0);
  ASSERT_EQ(waitpid(child, NULL, 0), child); /* reaped: the pid names no process */
  int32_t pids[2] = {(int32_t)getpid(), (int32_t)child};
  symm_fdx_t *a = NULL;
  ASSERT_OK(fdx_start_as(&(symm_test_comm_opts_t){.job_id = job, .rank = 0, .size = 2,
                                                   .timeout_ms = 20000, .pids = pids},
                         &a));
  int fd = 123;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_fdx_fetch(a, 1, 5, &fd), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 2000); /* the timeout is 20 s */
  ASSERT_EQ(fd, -1);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  ASSERT_STR_CONTAINS(symm_last_error(), "is gone");
  fdx_stop(a);
  return 0;
}

/* A peer whose fd server refuses connections and whose pid this process
 * cannot watch (another PID namespace: pid 0) but that the store has
 * recorded lost is a loss at once, not "not started yet" until the
 * timeout; a live peer is never blamed: when the store has lost another
 * rank, that one is named. */
typedef struct {
  symm_store_server_t *server;
  char addr[64];
} fdx_store_t;

static symm_store_t *fdx_store_rank(const fdx_store_t *st, int rank) {
  symm_store_t *s = NULL;
  ASSERT_OK(symm_store_connect_comm(st->addr, "fdx-token", rank, 3, 5000, &s));
  return s;
}

/* Rank 0's fetch from rank 1 on a fresh fdx of opts, whose server never
 * came up: the result, *took, and what it said after `what`. */
static symm_result_t fdx_fetch_absent(const symm_test_comm_opts_t *opts, const char *what,
                                      uint64_t *took) {
  symm_fdx_t *a = NULL;
  ASSERT_OK(fdx_start_as(opts, &a));
  int fd = 123;
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_fdx_fetch(a, 1, 5, &fd);
  *took = test_now_ms() - t0;
  printf("%s: %s after %llu ms: %s\n", what, symm_strerror(res), (unsigned long long)*took,
         symm_last_error());
  ASSERT_EQ(fd, -1);
  fdx_stop(a);
  return res;
}

/* Rank 0 of size ranks fetching from rank 1, whose server never came up,
 * after rank `lost` closed its store connection without BYE (-1: none). */
static symm_result_t fdx_fetch_with_store(int size, int lost, int timeout_ms, uint64_t *took) {
  fdx_store_t st;
  ASSERT_OK(symm_store_server_start("127.0.0.1", 0, "fdx-token", &st.server));
  snprintf(st.addr, sizeof st.addr, "127.0.0.1:%d", symm_store_server_port(st.server));
  symm_store_t *mine = fdx_store_rank(&st, 0);
  if (lost >= 0) symm_store_abandon(fdx_store_rank(&st, lost));
  char job[48];
  fdx_test_job(job, sizeof job);
  char what[32];
  snprintf(what, sizeof what, "lost %d", lost);
  symm_result_t res = fdx_fetch_absent(&(symm_test_comm_opts_t){.job_id = job, .rank = 0,
                                                                .size = size,
                                                                .timeout_ms = timeout_ms,
                                                                .store = mine},
                                       what, took);
  symm_store_close(mine);
  symm_store_server_stop(st.server);
  return res;
}

TEST_IMPL(fdx_store_says_lost) {
  uint64_t took;
  ASSERT_EQ(fdx_fetch_with_store(2, 1, 20000, &took), SYMM_ERR_PEER_LOST);
  ASSERT_LT(took, 2000); /* the timeout is 20 s */
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 is lost");
  /* Another rank lost: that one is named, not the live peer. */
  ASSERT_EQ(fdx_fetch_with_store(3, 2, 20000, &took), SYMM_ERR_PEER_LOST);
  ASSERT_LT(took, 2000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2 is lost");
  ASSERT(!strstr(symm_last_error(), "rank 1 is lost"));
  /* Nobody lost: a server not up is waited for until the timeout. */
  ASSERT_EQ(fdx_fetch_with_store(2, -1, 400, &took), SYMM_ERR_TIMEOUT);
  ASSERT_GE(took, 350);
  return 0;
}

/* The same without a store, on the caller's callbacks (cb_channel.h):
 * rank 0 of 3 fetches from rank 1, whose server never came up and whose
 * pid it cannot watch.  `how`: 'L' the callbacks' lost_rank knows rank 1
 * gone (its recorded pid was reaped), 'N' rank 2, which watched rank 1,
 * left a note saying so, '1' callbacks of version 1 (neither), '-'
 * nobody lost. */
static symm_result_t fdx_fetch_with_callbacks(char how, int timeout_ms, uint64_t *took) {
  cb_channel_map();
  const int region = how == 'L' ? 1 : how == 'N' ? 2 : how == '1' ? 3 : 4;
  cb_channel_t ch, watcher_ch;
  symm_bootstrap_callbacks_t cb, watcher_cb;
  if (how == 'L') {
    pid_t child = fork();
    if (child == 0) {
      cb_channel_open(&ch, region, 1, 3, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
      _exit(0);
    }
    ASSERT(child > 0);
    ASSERT_EQ(waitpid(child, NULL, 0), child); /* reaped: the pid names no process */
  }
  cb_channel_open(&ch, region, 0, 3, how == '1' ? 1 : SYMM_BOOTSTRAP_CALLBACKS_VERSION, &cb);
  symm_bootstrap_t *bs = NULL, *watcher_bs = NULL;
  ASSERT_OK(symm_bootstrap_cb_init(&cb, timeout_ms, &bs));
  if (how == 'N') {
    /* Rank 2's view: it saw rank 1 go, and says so as the core does. */
    int32_t pids[3] = {0, 0, 0};
    pid_t child = fork();
    if (child == 0) _exit(0);
    ASSERT(child > 0);
    ASSERT_EQ(waitpid(child, NULL, 0), child);
    pids[1] = (int32_t)child;
    cb_channel_open(&watcher_ch, region, 2, 3, SYMM_BOOTSTRAP_CALLBACKS_VERSION, &watcher_cb);
    ASSERT_OK(symm_bootstrap_cb_init(&watcher_cb, timeout_ms, &watcher_bs));
    symm_comm_t *watcher = symm_test_comm_new(&(symm_test_comm_opts_t){
        .rank = 2, .size = 3, .timeout_ms = timeout_ms, .pids = pids, .bootstrap = watcher_bs,
        .prefix = "symm/fdxcb/"});
    ASSERT(watcher != NULL);
    ASSERT_EQ(symm_comm_lost_rank(watcher), 1);
    symm_test_comm_free(watcher);
  }
  char job[48];
  fdx_test_job(job, sizeof job);
  const char what[2] = {how, 0};
  symm_result_t res = fdx_fetch_absent(&(symm_test_comm_opts_t){.job_id = job, .rank = 0,
                                                                .size = 3,
                                                                .timeout_ms = timeout_ms,
                                                                .bootstrap = bs,
                                                                .prefix = "symm/fdxcb/"},
                                       what, took);
  bs->ops->fini(bs);
  if (watcher_bs) watcher_bs->ops->fini(watcher_bs);
  return res;
}

TEST_IMPL(fdx_callbacks_say_lost) {
  uint64_t took;
  ASSERT_EQ(fdx_fetch_with_callbacks('L', 20000, &took), SYMM_ERR_PEER_LOST);
  ASSERT_LT(took, 2000); /* the timeout is 20 s */
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 is lost (the bootstrap says so)");
  ASSERT_EQ(fdx_fetch_with_callbacks('N', 20000, &took), SYMM_ERR_PEER_LOST);
  ASSERT_LT(took, 2000);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 is lost (the bootstrap says so)");
  /* Older callbacks, or nobody lost: a server not up is waited for until
   * the timeout. */
  ASSERT_EQ(fdx_fetch_with_callbacks('1', 400, &took), SYMM_ERR_TIMEOUT);
  ASSERT_GE(took, 350);
  ASSERT_EQ(fdx_fetch_with_callbacks('-', 400, &took), SYMM_ERR_TIMEOUT);
  ASSERT_GE(took, 350);
  return 0;
}

/* Fetches from several peers inside one operation (a rendezvous mapping
 * every peer) keep to one deadline: two peers whose servers never come
 * cost one timeout, not two. */
TEST_IMPL(fdx_one_deadline) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 3, 400);
  int fd = 123;
  uint64_t t0 = test_now_ms();
  uint64_t outer = symm_op_deadline_begin(400);
  for (int peer = 1; peer < 3; peer++) {
    symm_result_t res = symm_fdx_fetch(a, peer, 5, &fd);
    ASSERT_EQ(res, SYMM_ERR_TIMEOUT);
    ASSERT_EQ(fd, -1);
  }
  symm_op_deadline_end(outer);
  uint64_t took = test_now_ms() - t0;
  printf("two absent peers: %llu ms\n", (unsigned long long)took);
  ASSERT_GE(took, 350);
  ASSERT_LT(took, 750); /* one deadline; one per peer would be 800 */
  /* Outside the operation, a fetch has its own timeout again. */
  t0 = test_now_ms();
  ASSERT_EQ(symm_fdx_fetch(a, 1, 5, &fd), SYMM_ERR_TIMEOUT);
  ASSERT_GE(test_now_ms() - t0, 350);
  fdx_stop(a);
  return 0;
}

/* A peer whose server was reached once and then went away (killed process,
 * or stopped server) is reported lost at once, long before the timeout. */
TEST_IMPL(fdx_peer_lost) {
  char job[48];
  fdx_test_job(job, sizeof job);
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = fdx_fork();
  if (pid == 0) {
    close(ready[0]);
    symm_fdx_t *b = fdx_test_start(job, 1, 3, 10000);
    int mem = fdx_make_memfd(4096, 1);
    ASSERT_OK(symm_fdx_publish(b, 9, mem));
    ASSERT_EQ(write(ready[1], "r", 1), 1);
    for (;;) pause();
  }
  close(ready[1]);
  symm_fdx_t *a = fdx_test_start(job, 0, 3, 10000);
  symm_fdx_t *c = fdx_test_start(job, 2, 3, 10000);
  ASSERT_EQ(fdx_read_byte(ready[0], 10000), 1);
  close(ready[0]);
  int fd;
  ASSERT_OK(symm_fdx_fetch(a, 1, 9, &fd));
  fdx_check_memfd(fd, 4096, 1);
  close(fd);

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(pid, NULL, 0), pid);
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_fdx_fetch(a, 1, 9, &fd), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT_EQ(fd, -1);

  ASSERT_RES(symm_fdx_fetch(a, 2, 9, &fd), SYMM_ERR_NOT_FOUND); /* reach c once */
  fdx_stop(c);
  t0 = test_now_ms();
  ASSERT_RES(symm_fdx_fetch(a, 2, 9, &fd), SYMM_ERR_PEER_LOST);
  ASSERT_LT(test_now_ms() - t0, 2000);
  fdx_stop(a);
  return 0;
}

static void fdx_become_nobody(void) {
  if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
  if (geteuid() != 65534) _exit(91);
}

/* Runs as uid 65534 against rank 0 (root): a valid request must get a
 * refusal and no fd; the library client must report PERMISSION. */
static int fdx_foreign_client(const char *job, int serving) {
  fdx_become_nobody();
  char b;
  if (read(serving, &b, 1) != 1) return 14; /* rank 0's server is up */
  int s = fdx_raw_connect(job, 0);
  if (s < 0) return 10;
  /* The server may have refused and shut down before this arrives (EPIPE):
   * its refusal must be readable either way. */
  symm_fdx_request_t req = {.magic = SYMM_FDX_MAGIC, .op = SYMM_FDX_OP_FETCH, .id = 1};
  (void)!send(s, &req, sizeof req, MSG_NOSIGNAL);
  symm_fdx_reply_t rep;
  int fd;
  ssize_t n = fdx_raw_recv(s, &rep, &fd, 5000);
  if (fd >= 0) return 11; /* the fd leaked to another user */
  if (n != (ssize_t)sizeof rep || rep.magic != SYMM_FDX_MAGIC || rep.status != SYMM_FDX_REFUSED)
    return 12;
  if (fdx_raw_recv(s, &rep, &fd, 5000) != 0) return 13; /* and closed */
  close(s);
  symm_fdx_t *mine = NULL;
  if (fdx_start_as(&(symm_test_comm_opts_t){.job_id = job, .rank = 1, .size = 3,
                                            .timeout_ms = 5000},
                   &mine) != SYMM_SUCCESS)
    return 14;
  symm_result_t res = symm_fdx_fetch(mine, 0, 1, &fd);
  fdx_stop(mine);
  return res == SYMM_ERR_PERMISSION ? 0 : 15;
}

/* Serves rank 2 as uid 65534 until `quit` reaches EOF. */
static int fdx_foreign_server(const char *job, int ready, int quit) {
  fdx_become_nobody();
  symm_fdx_t *fdx = NULL;
  if (fdx_start_as(&(symm_test_comm_opts_t){.job_id = job, .rank = 2, .size = 3,
                                            .timeout_ms = 5000},
                   &fdx) != SYMM_SUCCESS)
    return 20;
  int mem = fdx_make_memfd(4096, 2);
  if (symm_fdx_publish(fdx, 2, mem) != SYMM_SUCCESS) return 21;
  if (write(ready, "r", 1) != 1) return 22;
  fdx_read_byte(quit, 20000);
  fdx_stop(fdx);
  return 0;
}

TEST_IMPL(fdx_uid_refused) {
  if (geteuid() != 0) {
    printf("SKIP: needs root to run a peer under another uid\n");
    return TEST_SKIP;
  }
  char job[48];
  fdx_test_job(job, sizeof job);
  int ready[2], quit[2], serving[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(quit, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(serving, O_CLOEXEC), 0);
  /* Both children are forked before this process starts any thread. */
  pid_t client = fdx_fork();
  if (client == 0) _exit(fdx_foreign_client(job, serving[0]));
  pid_t server = fdx_fork();
  if (server == 0) {
    close(ready[0]);
    close(quit[1]);
    _exit(fdx_foreign_server(job, ready[1], quit[0]));
  }
  close(ready[1]);
  close(quit[0]);
  close(serving[0]);

  symm_fdx_t *a = fdx_test_start(job, 0, 3, 5000);
  int mem = fdx_make_memfd(4096, 0);
  ASSERT_OK(symm_fdx_publish(a, 1, mem));
  ASSERT_EQ(write(serving[1], "s", 1), 1);
  close(serving[1]);
  int st = fdx_wait_child(client, 20000);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    TEST_FAIL_("foreign client: %s %d", WIFEXITED(st) ? "exit" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));

  int fd;
  ASSERT_OK(symm_fdx_fetch(a, 0, 1, &fd)); /* still serving its own uid */
  fdx_check_memfd(fd, 4096, 0);
  close(fd);

  ASSERT_EQ(fdx_read_byte(ready[0], 10000), 1);
  ASSERT_RES(symm_fdx_fetch(a, 2, 2, &fd), SYMM_ERR_PERMISSION);
  ASSERT_EQ(fd, -1);
  ASSERT_STR_CONTAINS(symm_last_error(), "uid 65534");
  close(quit[1]);
  st = fdx_wait_child(server, 20000);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(ready[0]);
  close(mem);
  fdx_stop(a);
  return 0;
}

/* Garbage, truncated, oversized and fd-carrying requests close their own
 * connection only; the server keeps answering everybody else. */
TEST_IMPL(fdx_malformed) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 5000);
  symm_fdx_t *b = fdx_test_start(job, 1, 2, 5000);
  int mem = fdx_make_memfd(4096, 3);
  ASSERT_OK(symm_fdx_publish(a, 5, mem));
  int idle = fdx_raw_connect(job, 0); /* connected, never speaks */
  ASSERT_GE(idle, 0);
  /* Once b has been served, the server has accepted idle (it accepts in
   * arrival order), so both ends of both connections are in the count. */
  int fd;
  ASSERT_OK(symm_fdx_fetch(b, 0, 5, &fd));
  close(fd);
  int baseline = test_count_fds();

  /* The raw client's well-formed request works, so the rejections below
   * are about the damage done to it. */
  int s = fdx_raw_connect(job, 0);
  fdx_raw_request(s, SYMM_FDX_MAGIC, SYMM_FDX_OP_FETCH, 5);
  symm_fdx_reply_t rep;
  ASSERT_EQ(fdx_raw_recv(s, &rep, &fd, 5000), sizeof rep);
  ASSERT_EQ(rep.status, SYMM_FDX_OK);
  ASSERT_EQ(rep.id, 5);
  ASSERT_GE(fd, 0);
  fdx_check_memfd(fd, 4096, 3);
  close(fd);

  symm_fdx_request_t good = {.magic = SYMM_FDX_MAGIC, .op = SYMM_FDX_OP_FETCH, .id = 5};
  unsigned char big[64];
  memset(big, 0, sizeof big);
  memcpy(big, &good, sizeof good);
  int spare[2];
  ASSERT_EQ(pipe2(spare, O_CLOEXEC), 0);
  for (int kind = 0; kind < 6; kind++) {
    if (kind > 0) s = fdx_raw_connect(job, 0);
    ASSERT_GE(s, 0);
    switch (kind) {
    case 0: fdx_raw_send(s, "garbage", 5, -1); break;          /* truncated */
    case 1: fdx_raw_request(s, 0xdeadbeef, SYMM_FDX_OP_FETCH, 5); break;
    case 2: fdx_raw_request(s, SYMM_FDX_MAGIC, 99, 5); break;  /* unknown op */
    case 3: fdx_raw_send(s, big, sizeof big, -1); break;       /* oversized */
    case 4: fdx_raw_send(s, &good, sizeof good, spare[0]); break; /* fd attached */
    case 5: fdx_raw_send(s, "", 0, -1); break;                 /* empty */
    }
    fdx_expect_closed(s);
    ASSERT_OK(symm_fdx_fetch(b, 0, 5, &fd));
    fdx_check_memfd(fd, 4096, 3);
    close(fd);
  }
  close(spare[0]);
  close(spare[1]);
  /* Every raw connection is gone from both ends, and the attached pipe
   * end did not stay behind in the server. */
  ASSERT_EQ(test_count_fds(), baseline);
  close(idle);
  close(mem);
  fdx_stop(b);
  fdx_stop(a);
  return 0;
}

/* A client that sends requests without ever reading the replies loses its
 * connection; it cannot stall the server for the others. */
TEST_IMPL(fdx_slow_reader) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 5000);
  symm_fdx_t *b = fdx_test_start(job, 1, 2, 5000);
  int mem = fdx_make_memfd(4096, 4);
  ASSERT_OK(symm_fdx_publish(a, 5, mem));
  int s = fdx_raw_connect(job, 0);
  ASSERT_GE(s, 0);
  symm_fdx_request_t req = {.magic = SYMM_FDX_MAGIC, .op = SYMM_FDX_OP_FETCH, .id = 5};
  uint64_t deadline = test_now_ms() + 10000;
  int sent = 0;
  bool cut_off = false;
  while (!cut_off && test_now_ms() < deadline) {
    ssize_t n = send(s, &req, sizeof req, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof req) sent++;
    else if (errno == EPIPE || errno == ECONNRESET) cut_off = true;
    else if (errno == EAGAIN) poll(&(struct pollfd){s, POLLOUT, 0}, 1, 1000); /* or cut off */
    else TEST_FAIL_("send: %s", strerror(errno));
  }
  if (!cut_off) TEST_FAIL_("server kept a client that never reads (%d requests sent)", sent);
  close(s);
  int fd;
  ASSERT_OK(symm_fdx_fetch(b, 0, 5, &fd));
  fdx_check_memfd(fd, 4096, 4);
  close(fd);
  close(mem);
  fdx_stop(b);
  fdx_stop(a);
  return 0;
}

/* 1000 publish/fetch/unpublish cycles leave no fd behind, and stop closes
 * everything start opened. */
TEST_IMPL(fdx_fd_leak) {
  char job[48];
  fdx_test_job(job, sizeof job);
  int mem = fdx_make_memfd(4096, 6);
  int baseline = test_count_fds();
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 5000);
  symm_fdx_t *b = fdx_test_start(job, 1, 2, 5000);
  int steady = -1;
  for (uint32_t i = 0; i < 1000; i++) {
    ASSERT_EQ(pwrite(mem, &i, sizeof i, 0), sizeof i);
    ASSERT_OK(symm_fdx_publish(a, 1000 + i, mem));
    int fd;
    ASSERT_OK(symm_fdx_fetch(b, 0, 1000 + i, &fd));
    uint32_t seen = ~0u;
    ASSERT_EQ(pread(fd, &seen, sizeof seen, 0), sizeof seen);
    ASSERT_EQ(seen, i);
    close(fd);
    symm_fdx_unpublish(a, 1000 + i);
    ASSERT_RES(symm_fdx_fetch(b, 0, 1000 + i, &fd), SYMM_ERR_NOT_FOUND);
    if (i == 0) steady = test_count_fds();
  }
  ASSERT_EQ(test_count_fds(), steady);
  ASSERT_EQ(symm_fdx_published(a), 0);
  /* leave some published: stop must close them too */
  for (uint64_t id = 1; id <= 10; id++) ASSERT_OK(symm_fdx_publish(a, id, mem));
  ASSERT_EQ(test_count_fds(), steady + 10);
  fdx_stop(b);
  fdx_stop(a);
  ASSERT_EQ(test_count_fds(), baseline);
  close(mem);
  return 0;
}

struct fdx_thread_arg {
  symm_fdx_t *fdx;
  uint32_t id;
  int failures;
};

static void *fdx_fetch_loop(void *p) {
  struct fdx_thread_arg *t = p;
  for (int i = 0; i < 200; i++) {
    int fd;
    uint32_t seen = 0;
    if (symm_fdx_fetch(t->fdx, 0, t->id, &fd) != SYMM_SUCCESS) {
      t->failures++;
      continue;
    }
    if (pread(fd, &seen, sizeof seen, 0) != sizeof seen || seen != t->id) t->failures++;
    close(fd);
  }
  return NULL;
}

/* Fetch is thread-safe: 8 threads share one cached connection. */
TEST_IMPL(fdx_threads) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 10000);
  symm_fdx_t *b = fdx_test_start(job, 1, 2, 10000);
  int mems[8];
  pthread_t th[8];
  struct fdx_thread_arg args[8];
  for (uint32_t t = 0; t < 8; t++) {
    mems[t] = memfd_create("symm-test-fdx", MFD_CLOEXEC);
    ASSERT_GE(mems[t], 0);
    ASSERT_EQ(pwrite(mems[t], &t, sizeof t, 0), sizeof t);
    ASSERT_OK(symm_fdx_publish(a, t, mems[t]));
    args[t] = (struct fdx_thread_arg){b, t, 0};
  }
  for (int t = 0; t < 8; t++) ASSERT_EQ(pthread_create(&th[t], NULL, fdx_fetch_loop, &args[t]), 0);
  for (int t = 0; t < 8; t++) {
    ASSERT_EQ(pthread_join(th[t], NULL), 0);
    ASSERT_EQ(args[t].failures, 0);
  }
  for (int t = 0; t < 8; t++) close(mems[t]);
  fdx_stop(b);
  fdx_stop(a);
  return 0;
}

/* A second server under the same name fails cleanly; bad ranks are refused. */
TEST_IMPL(fdx_name_taken) {
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = fdx_test_start(job, 0, 2, 1000);
  int before = test_count_fds();
  symm_test_comm_opts_t o = {.job_id = job, .size = 2, .timeout_ms = 1000};
  symm_fdx_t *dup = a; /* anything but NULL: a failed start sets it NULL */
  ASSERT_RES(fdx_start_as(&o, &dup), SYMM_ERR_SYSTEM);
  ASSERT(dup == NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "taken");
  ASSERT_EQ(test_count_fds(), before);
  o.rank = 2;
  ASSERT_RES(fdx_start_as(&o, &dup), SYMM_ERR_INVALID_ARG);
  o.rank = 0, o.size = 0;
  ASSERT_RES(fdx_start_as(&o, &dup), SYMM_ERR_INVALID_ARG);
  fdx_stop(a);
  fdx_stop(NULL);
  return 0;
}

/* A fake rank-1 server that answers its first request only after the
 * client's timeout, then answers correctly whatever comes next. */
struct fdx_fake_server {
  int listener;
  int answered;     /* correct replies sent */
  int timed_out[2]; /* the test says: the client gave up on the first request */
  int sent[2];      /* the server says: the late reply is out */
  int read_all[2];  /* the test says: the client has read what it needs */
};

static void fdx_note(int fd) { ASSERT_EQ(write(fd, "n", 1), 1); }
static void fdx_await(int fd) { ASSERT_EQ(fdx_read_byte(fd, 20000), 1); }

static void fdx_fake_reply(int conn, uint64_t id) {
  int mem = fdx_make_memfd(4096, (int)id);
  symm_fdx_reply_t rep = {.magic = SYMM_FDX_MAGIC, .status = SYMM_FDX_OK, .id = id};
  (void)symm_fdx_sendmsg(conn, &rep, sizeof rep, mem, 0); /* the late one may find the client gone */
  close(mem);
}

static void *fdx_fake_server_main(void *p) {
  struct fdx_fake_server *f = p;
  symm_fdx_request_t req;
  int late = accept4(f->listener, NULL, NULL, SOCK_CLOEXEC);
  ASSERT_GE(late, 0);
  ASSERT_EQ(recv(late, &req, sizeof req, 0), sizeof req);
  fdx_await(f->timed_out[0]);
  fdx_fake_reply(late, req.id);
  fdx_note(f->sent[1]);
  int conn = -1;
  uint64_t deadline = test_now_ms() + 5000;
  while (!f->answered && test_now_ms() < deadline) {
    struct pollfd pf[3] = {{f->listener, POLLIN, 0}, {late, POLLIN, 0}, {conn, POLLIN, 0}};
    if (poll(pf, 3, 100) <= 0) continue;
    if (pf[0].revents && conn < 0) conn = accept4(f->listener, NULL, NULL, SOCK_CLOEXEC);
    for (int k = 1; k < 3; k++) {
      if (!pf[k].revents) continue;
      ssize_t n = recv(pf[k].fd, &req, sizeof req, MSG_DONTWAIT);
      if (n == (ssize_t)sizeof req) {
        fdx_fake_reply(pf[k].fd, req.id);
        f->answered++;
      } else if (n == 0) {
        close(pf[k].fd);
        if (k == 1) late = -1;
        else conn = -1;
      }
    }
  }
  fdx_await(f->read_all[0]); /* the sockets go after the client read its reply */
  if (late >= 0) close(late);
  if (conn >= 0) close(conn);
  return NULL;
}

/* A reply that arrives after the client gave up must not be taken as the
 * answer to the next request: a hung server costs a timeout, and the next
 * fetch gets the fd it asked for. */
TEST_IMPL(fdx_late_reply) {
  char job[48];
  fdx_test_job(job, sizeof job);
  struct fdx_fake_server f = {
      .listener = -1, .timed_out = {-1, -1}, .sent = {-1, -1}, .read_all = {-1, -1}};
  ASSERT_EQ(pipe2(f.timed_out, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(f.sent, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(f.read_all, O_CLOEXEC), 0);
  struct sockaddr_un addr;
  socklen_t len = symm_fdx_address(job, 0, 1, &addr);
  f.listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(f.listener, 0);
  ASSERT_EQ(bind(f.listener, (struct sockaddr *)&addr, len), 0);
  ASSERT_EQ(listen(f.listener, 8), 0);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, fdx_fake_server_main, &f), 0);

  symm_fdx_t *a = fdx_test_start(job, 0, 2, 300);
  int fd = 123;
  uint64_t t0 = test_now_ms();
  ASSERT_RES(symm_fdx_fetch(a, 1, 1, &fd), SYMM_ERR_TIMEOUT);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT_EQ(fd, -1);
  fdx_note(f.timed_out[1]);
  fdx_await(f.sent[0]);
  ASSERT_OK(symm_fdx_fetch(a, 1, 2, &fd));
  fdx_check_memfd(fd, 4096, 2);
  close(fd);
  fdx_note(f.read_all[1]);
  ASSERT_EQ(pthread_join(th, NULL), 0);
  for (int i = 0; i < 2; i++) close(f.timed_out[i]), close(f.sent[i]), close(f.read_all[i]);
  ASSERT_EQ(f.answered, 1);
  close(f.listener);
  fdx_stop(a);
  return 0;
}

/* Another local user who reads a job's id (it shows in /proc/net/unix)
 * binds the fd-server names a communicator of that job would take next,
 * (job id, index, rank), before it exists.  The names carry a nonce drawn
 * when the communicator is made, so init goes through all the same.  (The
 * squatter here is rank 0 itself: the same uid, the same abstract names.) */
static int squatted_rank(int rank, int size, void *arg) {
  (void)arg;
  const char *job = getenv("SYMM_JOB_ID");
  int squat[8 * 8], nsquat = 0;
  if (rank == 0)
    for (int index = 0; index < 8; index++)
      for (int r = 0; r < size; r++) {
        struct sockaddr_un addr;
        socklen_t len = symm_fdx_address(job, index, r, &addr);
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT(len > 0 && s >= 0);
        if (bind(s, (const struct sockaddr *)&addr, len) == 0) squat[nsquat++] = s;
        else close(s);
      }
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 1024;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  if (rank == 0) ASSERT_GT(nsquat, 0);
  for (int i = 0; i < nsquat; i++) close(squat[i]);
  return 0;
}

TEST_IMPL(fdx_names_unpredictable) {
  ASSERT_EQ(test_run_ranks(2, squatted_rank, NULL), 0);
  return 0;
}

/* ---- what a peer sends is checked where it is read -------------------- */

/* The host backend's state of comm, to stand in for a faulty peer. */
#include "backends/host/host.h"

static symm_fdx_t *fdx_of(symm_comm_t *comm) { return host_state(comm)->fdx; }

/* Every memfd of the library mapped in this process (the own tensors' and
 * scratch, the peers', the bootstrap segment) refuses to be cut short:
 * opened through /proc/self/map_files, a shrinking ftruncate is EPERM and
 * the size stays.  Returns how many were tried. */
static int fdx_try_shrinking_mappings(void) {
  FILE *maps = fopen("/proc/self/maps", "re");
  ASSERT(maps != NULL);
  char line[512];
  int tried = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long lo, hi;
    if (!strstr(line, "/memfd:symmem") || sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    char path[96];
    snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", lo, hi);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) TEST_FAIL_("open %s (%s): %s", path, strtok(line, "\n"), strerror(errno));
    struct stat before, after;
    ASSERT_EQ(fstat(fd, &before), 0);
    int rc = ftruncate(fd, before.st_size / 2);
    int err = errno;
    ASSERT_EQ(fstat(fd, &after), 0);
    printf("shrink %s -> %s\n", strtok(line, "\n"), rc == 0 ? "DONE" : strerror(err));
    if (rc == 0 || err != EPERM) TEST_FAIL_("a mapped memfd could be cut short: %s", line);
    ASSERT_EQ(after.st_size, before.st_size);
    close(fd);
    tried++;
  }
  fclose(maps);
  return tried;
}

static int sealed_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 4096;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *x = symm_tensor_data(t);
  for (int i = 0; i < n; i++) x[i] = (float)(rank + 1);
  ASSERT_OK(symm_all_reduce(comm, x, x, (size_t)n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  /* The tensor's own memfd, as its owner holds it. */
  int own = ((host_mem_t *)symm_tensor_mem(t)->priv)->fd;
  ASSERT_EQ(ftruncate(own, 0), -1);
  ASSERT_EQ(errno, EPERM);
  /* Own and peer's tensor, the scratch, and the bootstrap segment. */
  int tried = fdx_try_shrinking_mappings();
  printf("rank %d: %d mapped memfds refused to shrink\n", rank, tried);
  ASSERT_GE(tried, 3);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_all_reduce(comm, x, x, (size_t)n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  float want = (float)(size * (size + 1) / 2 * size);
  for (int i = 0; i < n; i++)
    if (x[i] != want) TEST_FAIL_("x[%d] = %g, want %g", i, x[i], want);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

/* A rank cannot cut short the memory its peers map (its tensors' memfds,
 * the collectives' scratch, rank 0's bootstrap segment): it is sealed. */
TEST_IMPL(fdx_memory_sealed) {
  if (geteuid() != 0) {
    printf("SKIP: opening /proc/self/map_files needs CAP_SYS_ADMIN\n");
    return TEST_SKIP;
  }
  ASSERT_EQ(test_run_ranks(2, sealed_rank, NULL), 0);
  return 0;
}

/* What rank 1 publishes in place of its tensor's memfd. */
typedef enum { BAD_UNSEALED, BAD_DISK_FILE, BAD_SHORT, BAD_KINDS } fdx_bad_fd_t;
static const char *const fdx_bad_fd_name[] = {"an unsealed memfd", "a file on disk",
                                              "a sealed memfd too short"};
static const char *const fdx_bad_fd_says[] = {"rank 1's memfd is not sealed",
                                              "rank 1's memory is not a memfd",
                                              "rank 1's memfd is"};

static int fdx_bad_fd(fdx_bad_fd_t kind, size_t bytes) {
  int fd = -1;
  if (kind == BAD_DISK_FILE) {
    char path[] = "/tmp/symm-test-fdx-XXXXXX";
    fd = mkostemp(path, O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(unlink(path), 0);
  } else {
    fd = memfd_create("symm-test-fdx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
  }
  ASSERT_EQ(ftruncate(fd, (off_t)(kind == BAD_SHORT ? bytes - 4096 : bytes)), 0);
  if (kind == BAD_SHORT) ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return fd;
}

/* Rank 1 swaps its tensor's published fd for a bad one; every rank's
 * rendezvous must fail saying why, rank 1's included (from the agreement);
 * then, the real one back,
 * the same tensor rendezvouses and carries data.  The peers map at
 * rendezvous (SYMM_MAP_PEERS=at_rendezvous: the agreement is what is
 * tested), and fetch from rank 1's fd server, its tensors' blobs saying
 * nothing of /proc (no export_mem). */
static symm_backend_ops_t fdx_server_only_ops;

static int bad_fd_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  setenv("SYMM_MAP_PEERS", "at_rendezvous", 1);
  ASSERT_OK(symm_comm_init(NULL, &comm));
  if (rank == 1) {
    fdx_server_only_ops = *symm_test_comm_ops(comm);
    fdx_server_only_ops.export_mem = NULL;
    symm_test_comm_set_ops(comm, &fdx_server_only_ops);
  }
  for (int kind = 0; kind < BAD_KINDS; kind++) {
    int64_t n = 8192 * (kind + 1); /* no pooled allocation, whose peers map it already */
    symm_tensor_t *t;
    ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
    if (rank == 1) {
      const symm_mem_t *mem = symm_tensor_mem(t);
      int bad = fdx_bad_fd((fdx_bad_fd_t)kind, mem->alloc_bytes);
      symm_fdx_unpublish(fdx_of(comm), mem->id);
      ASSERT_OK(symm_fdx_publish(fdx_of(comm), mem->id, bad));
      close(bad);
    }
    symm_result_t res = symm_tensor_rendezvous(t);
    printf("rank %d, %s: %s: %s\n", rank, fdx_bad_fd_name[kind], symm_strerror(res),
           symm_last_error());
    ASSERT_EQ(res, SYMM_ERR_PROTOCOL);
    ASSERT_STR_CONTAINS(symm_last_error(), fdx_bad_fd_says[kind]); /* rank 1 too */
    if (rank == 1) {
      const symm_mem_t *mem = symm_tensor_mem(t);
      symm_fdx_unpublish(fdx_of(comm), mem->id);
      ASSERT_OK(symm_fdx_publish(fdx_of(comm), mem->id, ((host_mem_t *)mem->priv)->fd));
    }
    ASSERT_OK(symm_tensor_rendezvous(t));
    symm_view_t v;
    ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
    ((unsigned char *)v.data)[rank] = (unsigned char)(kind * 16 + rank + 1);
    ASSERT_OK(symm_comm_barrier(comm));
    int from = (rank + size - 1) % size;
    ASSERT_EQ(((unsigned char *)symm_tensor_data(t))[from], kind * 16 + from + 1);
    ASSERT_OK(symm_comm_barrier(comm));
    ASSERT_OK(symm_tensor_free(t));
  }
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(fdx_bad_memory_refused) {
  ASSERT_EQ(test_run_ranks(3, bad_fd_rank, NULL), 0);
  return 0;
}

/* Rank 1 advertises a bad layout of its tensor (what the rendezvous
 * sends, through an export_mem of its own); each must be PROTOCOL on
 * every rank, saying what rank 1 got wrong, with no crash; then the tensor
 * works.
 * The second pass makes the bad layout on a pooled allocation, whose peers
 * have mapped it already under the same id. */
typedef struct {
  const char *what;
  int64_t d_alloc, d_data, d_pad; /* added to alloc_bytes, data_offset, pad_offset */
  bool data_at_end;               /* data_offset = alloc_bytes */
  bool past_memfd;                /* refused by the fd's size, not by the layout */
} fdx_bad_layout_t;

static const fdx_bad_layout_t fdx_bad_layouts[] = {
    {"data offset 64 MiB past", 0, 64 << 20, 0, false},
    {"pad offset 64 MiB past", 0, 0, 64 << 20, false},
    {"size 64 MiB past the memfd", 64 << 20, 0, 0, false, true},
    {"no data", 0, 0, 0, true},
    {"data offset unaligned", 8, 8, 0, false},
    {"pad overlapping the data", 0, 0, 64, false},
    {"data offset before the pad's end", 0, -2048, 0, false},
};
#define FDX_BAD_LAYOUTS (int)(sizeof fdx_bad_layouts / sizeof fdx_bad_layouts[0])

static const fdx_bad_layout_t *fdx_lie; /* what rank 1's next export says; NULL: the truth */
static symm_backend_ops_t fdx_lying_ops;
static symm_result_t (*fdx_true_export)(symm_comm_t *, symm_mem_t *, symm_exchange_info_t *);

static symm_result_t fdx_lying_export(symm_comm_t *comm, symm_mem_t *mem,
                                      symm_exchange_info_t *info) {
  ASSERT_OK(fdx_true_export(comm, mem, info));
  const fdx_bad_layout_t *b = fdx_lie;
  if (!b) return SYMM_SUCCESS;
  info->alloc_bytes += (uint64_t)b->d_alloc;
  info->data_offset += (uint64_t)b->d_data;
  info->pad_offset += (uint64_t)b->d_pad;
  if (b->data_at_end) info->data_offset = info->alloc_bytes;
  return SYMM_SUCCESS;
}

static int bad_layout_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = NULL;
  setenv("SYMM_MAP_PEERS", "at_rendezvous", 1); /* the agreement on a refusal is tested */
  ASSERT_OK(symm_comm_init(NULL, &comm));
  if (rank == 1) {
    fdx_true_export = symm_test_comm_ops(comm)->export_mem; /* the host backend's: the truth */
    ASSERT(fdx_true_export != NULL);
    fdx_lying_ops = *symm_test_comm_ops(comm);
    fdx_lying_ops.export_mem = fdx_lying_export;
    symm_test_comm_set_ops(comm, &fdx_lying_ops);
  }
  int64_t n = 3 * 4096;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < FDX_BAD_LAYOUTS; i++) {
      const fdx_bad_layout_t *b = &fdx_bad_layouts[i];
      symm_tensor_t *t;
      ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
      if (pass == 1) { /* mapped by its peers already: a pooled one */
        ASSERT_OK(symm_tensor_rendezvous(t));
        uint64_t id = symm_tensor_mem(t)->id;
        ASSERT_OK(symm_tensor_free(t));
        ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
        ASSERT_EQ(symm_tensor_mem(t)->id, id);
      }
      fdx_lie = b;
      symm_result_t res = symm_tensor_rendezvous(t);
      fdx_lie = NULL;
      printf("pass %d rank %d, %s: %s: %s\n", pass, rank, b->what, symm_strerror(res),
             symm_last_error());
      ASSERT_EQ(res, SYMM_ERR_PROTOCOL);
      ASSERT_STR_CONTAINS(symm_last_error(), b->past_memfd ? "rank 1's memfd is"
                                                           : "rank 1 advertised a bad layout");
      ASSERT_OK(symm_tensor_rendezvous(t));
      symm_view_t v;
      ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
      memset(v.data, rank + 1 + 16 * i, (size_t)n);
      ASSERT_OK(symm_comm_barrier(comm));
      const unsigned char *mine = symm_tensor_data(t);
      int from = (rank + size - 1) % size;
      ASSERT_EQ(mine[0], from + 1 + 16 * i);
      ASSERT_EQ(mine[n - 1], from + 1 + 16 * i);
      ASSERT_OK(symm_comm_barrier(comm));
      ASSERT_OK(symm_tensor_free(t));
    }
  }
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(fdx_bad_layout_refused) {
  ASSERT_EQ(test_run_ranks(2, bad_layout_rank, NULL), 0);
  return 0;
}

/* ---- rank 0's bootstrap segment --------------------------------------- */

/* A fake store bootstrap for symm_bootstrap_shm_init: rank 0's broadcast
 * keeps a copy of its segment's fd; a rank 1's is handed fdx_seg_fd; the
 * one peer agrees with whatever this rank says. */
static int fdx_seg_fd = -1;

static symm_result_t fdx_seg_broadcast(symm_bootstrap_t *bs, void *buf, size_t len, int root) {
  (void)root;
  int32_t made[2];
  ASSERT_EQ(len, sizeof made);
  memcpy(made, buf, sizeof made);
  if (bs->rank == 0) {
    ASSERT_EQ(made[0], 1);
    fdx_seg_fd = fcntl(made[1], F_DUPFD_CLOEXEC, 0);
    ASSERT_GE(fdx_seg_fd, 0);
  } else {
    made[0] = 1;
    made[1] = fdx_seg_fd;
    memcpy(buf, made, sizeof made);
  }
  return SYMM_SUCCESS;
}

static symm_result_t fdx_seg_allgather(symm_bootstrap_t *bs, const void *send, size_t len,
                                       void *recv) {
  for (int r = 0; r < bs->size; r++) memcpy((char *)recv + (size_t)r * len, send, len);
  return SYMM_SUCCESS;
}

static symm_result_t fdx_seg_open(int rank) {
  static const symm_bootstrap_ops_t ops = {.version = 1, .name = "fake",
                                           .broadcast = fdx_seg_broadcast,
                                           .allgather = fdx_seg_allgather};
  symm_bootstrap_t store_bs = {.ops = &ops, .rank = rank, .size = 2, .timeout_ms = 1000};
  const int32_t pids[2] = {(int32_t)getpid(), (int32_t)getpid()};
  symm_bootstrap_t *out = NULL;
  symm_result_t res = symm_bootstrap_shm_init(&store_bs, NULL, "symm/c5/", "segtest", 5, pids,
                                              &out);
  printf("rank %d opening the segment: %s %s\n", rank, symm_strerror(res),
         res ? symm_last_error() : "");
  if (out) out->ops->fini(out);
  return res;
}

/* Rank 0's segment is sealed against shrinking (the others map it), and a
 * rank refuses a segment that is not: it stays on the store instead. */
TEST_IMPL(fdx_bootstrap_segment_sealed) {
  ASSERT_OK(fdx_seg_open(0));
  int sealed = fdx_seg_fd;
  int seals = fcntl(sealed, F_GET_SEALS);
  ASSERT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  struct stat st;
  ASSERT_EQ(fstat(sealed, &st), 0);
  ASSERT_EQ(ftruncate(sealed, 0), -1);
  ASSERT_EQ(errno, EPERM);
  ASSERT_OK(fdx_seg_open(1)); /* the segment as made */

  /* The same bytes in a memfd without seals. */
  int copy = memfd_create("symmem-bootstrap", MFD_CLOEXEC);
  ASSERT_GE(copy, 0);
  ASSERT_EQ(ftruncate(copy, st.st_size), 0);
  void *src = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, sealed, 0);
  ASSERT(src != MAP_FAILED);
  ASSERT_EQ(pwrite(copy, src, (size_t)st.st_size, 0), st.st_size);
  ASSERT_EQ(munmap(src, (size_t)st.st_size), 0);
  fdx_seg_fd = copy;
  ASSERT_EQ(fdx_seg_open(1), SYMM_ERR_UNSUPPORTED);
  close(copy);
  close(sealed);
  return 0;
}

/* ---- names another user cannot work out ------------------------------- */

/* SipHash-2-4's published vectors (key 00..0f, message 00..len-1). */
TEST_IMPL(fdx_name_hash_vectors) {
  uint8_t key[16], msg[64];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
  ASSERT_EQ(symm_fdx_keyed_hash(key, msg, 0), 0x726fdb47dd0e0e31ull);
  ASSERT_EQ(symm_fdx_keyed_hash(key, msg, 8), 0x93f5f5799a932462ull);
  ASSERT_EQ(symm_fdx_keyed_hash(key, msg, 15), 0xa129ca6149be45e5ull);
  ASSERT_EQ(symm_fdx_keyed_hash(key, msg, 63), 0x958a324ceb064572ull);
  return 0;
}

/* The uid and gid of a user made for the test (useradd), or false with the
 * reason.  The user is deleted at once: the ids work for setuid all the
 * same, and a test that fails leaves nothing behind. */
static bool fdx_make_user(char *name, size_t cap, uid_t *uid, gid_t *gid, char *why,
                          size_t why_cap) {
  snprintf(name, cap, "symmsq%d", (int)getpid());
  char cmd[160], out[512];
  snprintf(cmd, sizeof cmd, "useradd -r -M -N -s /usr/sbin/nologin %s 2>&1", name);
  if (test_run_command(cmd, out, sizeof out) != 0) {
    snprintf(why, why_cap, "useradd failed: %s", out);
    return false;
  }
  snprintf(cmd, sizeof cmd, "id -u %s; id -g %s", name, name);
  unsigned u, g;
  if (test_run_command(cmd, out, sizeof out) != 0 || sscanf(out, "%u %u", &u, &g) != 2) {
    snprintf(why, why_cap, "no uid for %s: %s", name, out);
    return false;
  }
  *uid = u;
  *gid = g;
  snprintf(cmd, sizeof cmd, "userdel %s 2>&1", name);
  if (test_run_command(cmd, out, sizeof out) != 0) printf("userdel %s: %s\n", name, out);
  return true;
}

/* The squatter: as uid/gid, watches /proc/net/unix until a name of job
 * shows, binds every name it can derive from the names it sees (each
 * one's part before "-<index>-<rank>", with every index and rank), says
 * how many it took on `said`, and holds them until `quit` ends. */
static int fdx_squatter(uid_t uid, gid_t gid, const char *job, int size, int said, int quit) {
  if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) return 90;
  char prefix[96];
  snprintf(prefix, sizeof prefix, "@symmem-%s", job);
  int held[256], nheld = 0, seen = 0;
  uint64_t deadline = test_now_ms() + 20000;
  while (!seen && test_now_ms() < deadline) {
    FILE *f = fopen("/proc/net/unix", "re");
    if (!f) return 91;
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char *at = strstr(line, prefix);
      if (!at) continue;
      at[strcspn(at, "\n ")] = '\0';
      /* "@symmem-<space>-<index>-<rank>": the space is what is shared. */
      char *dash = strrchr(at, '-');
      if (!dash) continue;
      *dash = '\0';
      dash = strrchr(at, '-');
      if (!dash) continue;
      *dash = '\0';
      seen++;
      for (int index = 0; index < 8; index++)
        for (int r = 0; r < size && nheld < 256; r++) {
          struct sockaddr_un addr;
          socklen_t len = symm_fdx_address(at + 8, index, r, &addr);
          int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
          if (len > 0 && s >= 0 && bind(s, (const struct sockaddr *)&addr, len) == 0)
            held[nheld++] = s;
          else if (s >= 0)
            close(s);
        }
    }
    fclose(f);
  }
  if (!seen) return 92;
  if (write(said, &nheld, sizeof nheld) != sizeof nheld) return 93;
  fdx_read_byte(quit, 30000);
  for (int i = 0; i < nheld; i++) close(held[i]);
  return 0;
}

/* Another user reads /proc/net/unix as soon as a communicator's first rank
 * has bound its fd server, and binds every name it can derive before the
 * other ranks bind theirs: the others start all the same (their names come
 * from a secret of the ranks), and fetch from each other. */
TEST_IMPL(fdx_names_squat_race) {
  if (geteuid() != 0) {
    printf("SKIP: needs root to make a user to squat as (useradd)\n");
    return TEST_SKIP;
  }
  char user[32], why[600];
  uid_t uid;
  gid_t gid;
  if (!fdx_make_user(user, sizeof user, &uid, &gid, why, sizeof why)) {
    printf("SKIP: %s\n", why);
    return TEST_SKIP;
  }
  char job[48];
  fdx_test_job(job, sizeof job);
  enum { N = 4 };
  int said[2], quit[2];
  ASSERT_EQ(pipe2(said, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(quit, O_CLOEXEC), 0);
  pid_t squatter = fdx_fork();
  if (squatter == 0) {
    close(said[0]);
    close(quit[1]);
    _exit(fdx_squatter(uid, gid, job, N, said[1], quit[0]));
  }
  close(said[1]);
  close(quit[0]);

  symm_test_comm_opts_t c[N];
  symm_fdx_t *fdx[N] = {NULL};
  unsigned char rnd[8];
  symm_random_bytes(rnd, sizeof rnd);
  char nonce[2 * sizeof rnd + 1];
  symm_hex(nonce, rnd, sizeof rnd);
  for (int r = 0; r < N; r++)
    c[r] = (symm_test_comm_opts_t){.job_id = job, .rank = r, .size = N, .timeout_ms = 5000,
                                   .index = 3, .name_nonce = nonce};
  ASSERT_OK(fdx_start_as(&c[0], &fdx[0]));
  int taken = -1;
  struct pollfd p = {said[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  ASSERT_EQ(read(said[0], &taken, sizeof taken), sizeof taken);
  printf("the squatter (uid %u) bound %d names derived from rank 0's\n", (unsigned)uid, taken);
  ASSERT_GT(taken, 0);
  for (int r = 1; r < N; r++) {
    symm_result_t res = fdx_start_as(&c[r], &fdx[r]);
    printf("rank %d: %s %s\n", r, symm_strerror(res), res ? symm_last_error() : "");
    ASSERT_OK(res);
  }
  int mem = fdx_make_memfd(4096, 7);
  for (int r = 0; r < N; r++) ASSERT_OK(symm_fdx_publish(fdx[r], 40 + (uint64_t)r, mem));
  for (int r = 0; r < N; r++)
    for (int q = 0; q < N; q++) {
      int fd = -1;
      ASSERT_OK(symm_fdx_fetch(fdx[r], q, 40 + (uint64_t)q, &fd));
      fdx_check_memfd(fd, 4096, 7);
      close(fd);
    }
  close(mem);
  for (int r = 0; r < N; r++) fdx_stop(fdx[r]);
  close(quit[1]);
  int st = fdx_wait_child(squatter, 20000);
  close(said[0]);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    TEST_FAIL_("squatter: %s %d", WIFEXITED(st) ? "exit" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return 0;
}

/* ---- the store's word on lost ranks ------------------------------------ */

/* A store reply that names a lost rank outside the communicator (rank
 * 123456 of 2) is refused where the client reads it: not passed on as a
 * loss, nor blamed on anyone by the fd exchange. */
TEST_IMPL(fdx_store_lost_rank_bounded) {
  fdx_store_t st;
  ASSERT_OK(symm_store_server_start("127.0.0.1", 0, "fdx-token", &st.server));
  snprintf(st.addr, sizeof st.addr, "127.0.0.1:%d", symm_store_server_port(st.server));
  symm_store_t *mine = fdx_store_rank(&st, 0);
  symm_store_set_size(mine, 2);
  symm_store_t *unbounded = fdx_store_rank(&st, 1); /* says no size */
  symm_store_abandon(fdx_store_rank(&st, 123456));
  /* Wait until the store has the loss recorded (its reply to the client
   * that gave no size says so). */
  uint64_t deadline = test_now_ms() + 10000;
  int lost = -1;
  while ((lost = symm_store_lost_rank(unbounded)) != 123456 && test_now_ms() < deadline)
    poll(NULL, 0, 5);
  ASSERT_EQ(lost, 123456);
  ASSERT_EQ(symm_store_lost_rank(mine), -1);
  char buf[8];
  size_t len;
  symm_result_t res = symm_store_get(mine, "never-set", buf, sizeof buf, &len, 2000);
  printf("get: %s: %s\n", symm_strerror(res), symm_last_error());
  ASSERT_EQ(res, SYMM_ERR_PROTOCOL);
  ASSERT_STR_CONTAINS(symm_last_error(), "123456");
  /* The fd exchange of rank 0 of 2 waits for rank 1's server: a timeout,
   * not a loss of rank 123456. */
  char job[48];
  fdx_test_job(job, sizeof job);
  symm_fdx_t *a = NULL;
  ASSERT_OK(fdx_start_as(&(symm_test_comm_opts_t){.job_id = job, .rank = 0, .size = 2,
                                                   .timeout_ms = 400, .store = mine},
                         &a));
  int fd = 123;
  res = symm_fdx_fetch(a, 1, 5, &fd);
  printf("fetch: %s: %s\n", symm_strerror(res), symm_last_error());
  ASSERT_EQ(res, SYMM_ERR_TIMEOUT);
  ASSERT(!strstr(symm_last_error(), "123456"));
  /* The connection stays usable. */
  ASSERT_OK(symm_store_set(mine, "after", "x", 1));
  ASSERT_OK(symm_store_get(mine, "after", buf, sizeof buf, &len, 2000));
  fdx_stop(a);
  symm_store_close(unbounded);
  symm_store_close(mine);
  symm_store_server_stop(st.server);
  return 0;
}
