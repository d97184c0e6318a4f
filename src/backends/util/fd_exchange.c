/*
 * fd_exchange.c - the per-rank fd server and its client (see fd_exchange.h).
 *
 * SOCK_SEQPACKET rather than SOCK_STREAM: every request and reply is one
 * message whose boundaries the kernel keeps, so a short, long or padded
 * message shows up as a wrong length (or MSG_TRUNC) in a single recvmsg.
 * The server then never buffers partial input per connection, and a client
 * that sends half a request cannot stall anyone.
 *
 * Threads: the server thread owns the listener, the accepted connections and
 * the poll array; the published table is shared with the application threads
 * under table_lock; each peer's cached client connection has its own lock so
 * that fetches from different peers run in parallel.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include "backends/util/fd_exchange.h"
#include "symm_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* Accepted connections beyond this are closed at once: each peer keeps one
 * connection per communicator, so only a runaway client gets near it. */
#define FDX_MAX_CONNS 1024
/* After accept fails for lack of fds or memory, the listener is left out of
 * poll for this long instead of spinning on it. */
#define FDX_ACCEPT_PAUSE_MS 100
/* Longest sleep between connect attempts while a peer's server is not up. */
#define FDX_RETRY_MAX_MS 50
/* How often, while a peer's server refuses connections, the communicator's
 * bootstrap is asked whether a rank is lost. */
#define FDX_LOST_LOOK_MS 100
#define FDX_DEFAULT_TIMEOUT_MS 60000
#define FDX_NAME_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) + 1)

struct fdx_entry {
  uint64_t id;
  int fd; /* our dup of the published fd */
};

struct fdx_conn {
  int fd;
  pid_t pid; /* of the client, for log lines */
};

struct fdx_peer {
  pthread_mutex_t lock; /* one request at a time on conn */
  int conn;             /* cached connection to the peer's server, or -1 */
  bool reached;         /* its server accepted us once */
  int32_t pid;          /* its process where this one can watch it, else 0 */
  char *elsewhere;      /* its host's name where the communicator knows it runs on
                           another host, else NULL */
};

struct symm_fdx {
  char job_id[64];         /* the name space's public part */
  /* The communicator's name nonce, a secret of its ranks, keys each rank's
   * tag in its name (fdx_space); unkeyed: no tags (the tests' own). */
  uint8_t name_key[16];
  bool keyed;
  int index, rank, size, timeout_ms;
  char name[FDX_NAME_MAX]; /* own address, printable ("@symmem-...") */
  int listen_fd, wake_fd;
  pthread_t thread;
  bool running;

  pthread_mutex_t table_lock;
  struct fdx_entry *table; /* sorted by id */
  size_t count, cap;

  struct fdx_peer *peers; /* [size] */
  symm_comm_t *comm;      /* to ask about lost ranks (it outlives the fdx); NULL: none */
  char host[72];          /* this rank's host name, for messages */

  /* Owned by the server thread (and by stop, after the join). */
  struct fdx_conn *conns;
  size_t nconns, conns_cap;
  struct pollfd *pfds; /* [0] wake, [1] listener, [2 + i] conns[i] */
  size_t pfds_cap;
};

/* ------------------------------------------------------------- helpers */

static uint64_t fdx_rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

static void fdx_sipround(uint64_t v[4]) {
  v[0] += v[1], v[1] = fdx_rotl(v[1], 13), v[1] ^= v[0], v[0] = fdx_rotl(v[0], 32);
  v[2] += v[3], v[3] = fdx_rotl(v[3], 16), v[3] ^= v[2];
  v[0] += v[3], v[3] = fdx_rotl(v[3], 21), v[3] ^= v[0];
  v[2] += v[1], v[1] = fdx_rotl(v[1], 17), v[1] ^= v[2], v[2] = fdx_rotl(v[2], 32);
}

static uint64_t fdx_load_le(const uint8_t *p, size_t n) {
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) x |= (uint64_t)p[i] << (8 * i);
  return x;
}

/* SipHash-2-4: a keyed function whose outputs tell nothing of the key or
 * of its outputs for other messages, which is what makes one rank's name
 * useless for guessing another's. */
uint64_t symm_fdx_keyed_hash(const uint8_t key[16], const void *msg, size_t len) {
  const uint64_t k0 = fdx_load_le(key, 8), k1 = fdx_load_le(key + 8, 8);
  uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
                   k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull};
  const uint8_t *p = msg;
  size_t whole = len - len % 8;
  for (size_t i = 0; i <= whole; i += 8) {
    uint64_t m = i < whole ? fdx_load_le(p + i, 8)
                           : fdx_load_le(p + i, len % 8) | (uint64_t)len << 56;
    v[3] ^= m;
    fdx_sipround(v);
    fdx_sipround(v);
    v[0] ^= m;
  }
  v[2] ^= 0xff;
  for (int i = 0; i < 4; i++) fdx_sipround(v);
  return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* The name space of rank's server: the job id, then, in a keyed server,
 * the rank's tag.  The tags come from a secret of the communicator's ranks
 * (shared through the bootstrap, never in a name), so that another user
 * who reads the names bound so far in /proc/net/unix cannot work out, and
 * bind first, the name of a rank still to start. */
static void fdx_space(const symm_fdx_t *fdx, int rank, char *out, size_t cap) {
  if (!fdx->keyed) {
    snprintf(out, cap, "%s", fdx->job_id);
    return;
  }
  uint8_t msg[sizeof fdx->job_id + 8];
  size_t n = strlen(fdx->job_id);
  memcpy(msg, fdx->job_id, n);
  uint32_t where[2] = {(uint32_t)fdx->index, (uint32_t)rank};
  memcpy(msg + n, where, sizeof where);
  uint64_t tag = symm_fdx_keyed_hash(fdx->name_key, msg, n + sizeof where);
  snprintf(out, cap, "%s.%016llx", fdx->job_id, (unsigned long long)tag);
}

/* The address of rank's server; its length, 0 if the name does not fit. */
static socklen_t fdx_rank_address(const symm_fdx_t *fdx, int rank, struct sockaddr_un *addr) {
  char space[sizeof fdx->job_id + 24];
  fdx_space(fdx, rank, space, sizeof space);
  return symm_fdx_address(space, fdx->index, rank, addr);
}

socklen_t symm_fdx_address(const char *space, int index, int rank,
                           struct sockaddr_un *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  /* sun_path[0] stays 0: the abstract namespace, so nothing on disk to
   * clean up after a crash.  The length must be exact, since trailing NULs
   * would be part of the name. */
  size_t room = sizeof addr->sun_path - 1;
  int n = snprintf(addr->sun_path + 1, room, "symmem-%s-%d-%d", space, index, rank);
  if (n < 0 || (size_t)n >= room) return 0;
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void fdx_printable_name(const struct sockaddr_un *addr, socklen_t len,
                               char *out, size_t cap) {
  size_t n = len - offsetof(struct sockaddr_un, sun_path) - 1;
  snprintf(out, cap, "@%.*s", (int)n, addr->sun_path + 1);
}

static void fdx_close(int *fd) {
  if (*fd >= 0) symm_fork_guard_close(*fd);
  *fd = -1;
}

/* The effective uid of the process at the other end of a connected socket
 * (the kernel records the euid at connect/listen time). */
static bool fdx_peer_cred(int sock, struct ucred *cred) {
  socklen_t len = sizeof *cred;
  return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 &&
         len == sizeof *cred;
}

ssize_t symm_fdx_sendmsg(int sock, const void *buf, size_t len, int fd, int flags) {
  struct iovec iov = {(void *)buf, len};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  ssize_t n;
  do n = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

static bool fdx_send_reply(int sock, uint32_t status, uint64_t id, int fd) {
  symm_fdx_reply_t rep;
  memset(&rep, 0, sizeof rep);
  rep.magic = SYMM_FDX_MAGIC;
  rep.status = status;
  rep.id = id;
  /* Never blocks: a client that does not read its replies fills its queue,
   * and then loses its connection rather than stalling the server. */
  return symm_fdx_sendmsg(sock, &rep, sizeof rep, fd, MSG_DONTWAIT) == (ssize_t)sizeof rep;
}

/* Closes a server-side connection so that the client still reads what was
 * sent to it.  Closing a Unix socket with unread requests in its queue makes
 * the client's next recv fail with ECONNRESET before it sees a reply already
 * queued (a refusal, say); after SHUT_RD nothing more can be queued, so
 * draining first leaves the client a clean end-of-file. */
static void fdx_close_conn(int *sock) {
  if (*sock < 0) return;
  shutdown(*sock, SHUT_RD);
  char sink[64];
  for (int i = 0; i < 64 && recv(*sock, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
  }
  fdx_close(sock);
}

/* ------------------------------------------------------- published table */

/* Index of the first entry with id >= `id` (table_lock held). */
static size_t fdx_lower_bound(const symm_fdx_t *fdx, uint64_t id) {
  size_t lo = 0, hi = fdx->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fdx->table[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool fdx_table_grow(symm_fdx_t *fdx) {
  if (fdx->count < fdx->cap) return true;
  size_t cap = fdx->cap ? fdx->cap * 2 : 16;
  struct fdx_entry *t = realloc(fdx->table, cap * sizeof *t);
  if (!t) return false;
  fdx->table = t;
  fdx->cap = cap;
  return true;
}

symm_result_t symm_fdx_publish(symm_fdx_t *fdx, uint64_t id, int fd) {
  if (!fdx || fd < 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_publish: %s",
                      fdx ? "negative fd" : "NULL fd server");
  int own;
  SYMM_SYSCHECK(own = fcntl(fd, F_DUPFD_CLOEXEC, 0), "fd server: dup of fd %d for id %" PRIu64,
                fd, id);

  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&fdx->table_lock);
  size_t pos = fdx_lower_bound(fdx, id);
  if (pos < fdx->count && fdx->table[pos].id == id) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "fd server %s: id %" PRIu64 " is already published",
                     fdx->name, id);
  } else if (!fdx_table_grow(fdx)) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "fd server %s: no memory for %zu entries",
                     fdx->name, fdx->count + 1);
  } else {
    memmove(&fdx->table[pos + 1], &fdx->table[pos], (fdx->count - pos) * sizeof *fdx->table);
    fdx->table[pos].id = id;
    fdx->table[pos].fd = own;
    fdx->count++;
    own = -1;
  }
  pthread_mutex_unlock(&fdx->table_lock);
  fdx_close(&own);
  return res;
}

void symm_fdx_unpublish(symm_fdx_t *fdx, uint64_t id) {
  if (!fdx) return;
  pthread_mutex_lock(&fdx->table_lock);
  size_t pos = fdx_lower_bound(fdx, id);
  if (pos < fdx->count && fdx->table[pos].id == id) {
    close(fdx->table[pos].fd);
    memmove(&fdx->table[pos], &fdx->table[pos + 1], (fdx->count - pos - 1) * sizeof *fdx->table);
    fdx->count--;
  }
  pthread_mutex_unlock(&fdx->table_lock);
}

size_t symm_fdx_published(const symm_fdx_t *fdx) {
  if (!fdx) return 0;
  /* The lock is not part of the logical state; taking it on a const object
   * keeps the count coherent with a concurrent publish. */
  symm_fdx_t *mut = (symm_fdx_t *)fdx;
  pthread_mutex_lock(&mut->table_lock);
  size_t n = mut->count;
  pthread_mutex_unlock(&mut->table_lock);
  return n;
}

/* Sends the reply for `id`.  The table stays locked while the fd is handed to
 * the kernel, so an unpublish on another thread cannot close it (and let its
 * number be reused) in between. */
static bool fdx_answer(symm_fdx_t *fdx, int sock, uint64_t id) {
  pthread_mutex_lock(&fdx->table_lock);
  size_t pos = fdx_lower_bound(fdx, id);
  bool found = pos < fdx->count && fdx->table[pos].id == id;
  bool ok = found ? fdx_send_reply(sock, SYMM_FDX_OK, id, fdx->table[pos].fd)
                  : fdx_send_reply(sock, SYMM_FDX_NOT_FOUND, id, -1);
  pthread_mutex_unlock(&fdx->table_lock);
  return ok;
}

/* ---------------------------------------------------------- server side */

const char *symm_fdx_check_request(const symm_fdx_request_t *req, ssize_t len, int flags) {
  if (len != (ssize_t)sizeof *req || (flags & MSG_TRUNC)) return "wrong length";
  if (flags & MSG_CTRUNC) return "ancillary data attached";
  if (req->magic != SYMM_FDX_MAGIC) return "bad magic";
  if (req->op != SYMM_FDX_OP_FETCH) return "unknown op";
  return NULL;
}

/* Reads and answers one request.  Returns false when the connection must be
 * closed: the client left, sent something malformed, or stopped reading. */
static bool fdx_serve(symm_fdx_t *fdx, const struct fdx_conn *c, short revents) {
  if (!(revents & POLLIN)) {
    SYMM_INFO(BACKEND, "fd server %s: pid %d hung up (revents 0x%x)", fdx->name, (int)c->pid, revents);
    return false; /* hang-up or error with no data */
  }
  symm_fdx_request_t req;
  memset(&req, 0, sizeof req);
  struct iovec iov = {&req, sizeof req};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  /* No control buffer: fds a client attaches are dropped by the kernel and
   * flagged with MSG_CTRUNC, so they cannot pile up in this process. */
  ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    SYMM_INFO(BACKEND, "fd server %s: receive from pid %d failed (%s)", fdx->name, (int)c->pid,
              strerror(errno));
    return false;
  }
  if (n == 0) {
    SYMM_INFO(BACKEND, "fd server %s: pid %d closed its connection", fdx->name, (int)c->pid);
    return false; /* closed (or an empty message, equally wrong) */
  }
  const char *bad = symm_fdx_check_request(&req, n, msg.msg_flags);
  if (bad) {
    SYMM_WARN(BACKEND, "fd server %s: malformed request from pid %d (%s, %zd bytes); closing it",
              fdx->name, (int)c->pid, bad, n);
    return false;
  }
  if (!fdx_answer(fdx, c->fd, req.id)) {
    SYMM_INFO(BACKEND, "fd server %s: reply to pid %d failed (%s); closing it", fdx->name,
              (int)c->pid, strerror(errno));
    return false;
  }
  return true;
}

static bool fdx_conns_grow(symm_fdx_t *fdx) {
  if (fdx->nconns < fdx->conns_cap) return true;
  size_t cap = fdx->conns_cap ? fdx->conns_cap * 2 : 16;
  struct fdx_conn *c = realloc(fdx->conns, cap * sizeof *c);
  if (!c) return false;
  fdx->conns = c;
  struct pollfd *p = realloc(fdx->pfds, (cap + 2) * sizeof *p);
  if (!p) return false; /* conns grew, pfds did not: conns_cap stays */
  fdx->pfds = p;
  fdx->conns_cap = cap;
  fdx->pfds_cap = cap + 2;
  return true;
}

/* Takes over a freshly accepted connection: keeps it, or refuses and
 * closes it. */
static void fdx_admit(symm_fdx_t *fdx, int sock) {
  struct ucred cred;
  if (!fdx_peer_cred(sock, &cred)) {
    SYMM_WARN(BACKEND, "fd server %s: SO_PEERCRED failed (%s); closing connection", fdx->name,
              strerror(errno));
    goto drop;
  }
  if (cred.uid != geteuid()) {
    SYMM_WARN(BACKEND, "fd server %s: refused pid %d with uid %u (this process runs as uid %u)",
              fdx->name, (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
    fdx_send_reply(sock, SYMM_FDX_REFUSED, 0, -1);
    goto drop;
  }
  if (fdx->nconns >= FDX_MAX_CONNS || !fdx_conns_grow(fdx)) {
    SYMM_WARN(BACKEND, "fd server %s: %zu connections open, dropping pid %d", fdx->name,
              fdx->nconns, (int)cred.pid);
    goto drop;
  }
  fdx->conns[fdx->nconns].fd = sock;
  fdx->conns[fdx->nconns].pid = cred.pid;
  fdx->nconns++;
  return;
drop:
  fdx_close_conn(&sock);
}

/* Accepts every pending connection.  Returns 0, or the time (ns) before which
 * the listener should not be polled again because the process ran out of
 * fds or memory. */
static uint64_t fdx_accept_all(symm_fdx_t *fdx) {
  for (;;) {
    int sock = accept4(fdx->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (sock >= 0) {
      symm_fork_guard_add(sock);
      fdx_admit(fdx, sock);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    SYMM_WARN(BACKEND, "fd server %s: accept failed (%s); pausing %d ms", fdx->name,
              strerror(errno), FDX_ACCEPT_PAUSE_MS);
    return symm_now_ns() + (uint64_t)FDX_ACCEPT_PAUSE_MS * 1000000u;
  }
}

static size_t fdx_fill_pollfds(symm_fdx_t *fdx, bool with_listener) {
  fdx->pfds[0] = (struct pollfd){fdx->wake_fd, POLLIN, 0};
  /* A negative fd makes poll skip the slot and keeps the indices fixed. */
  fdx->pfds[1] = (struct pollfd){with_listener ? fdx->listen_fd : -1, POLLIN, 0};
  for (size_t i = 0; i < fdx->nconns; i++)
    fdx->pfds[2 + i] = (struct pollfd){fdx->conns[i].fd, POLLIN, 0};
  return fdx->nconns + 2;
}

static void fdx_drop_closed_conns(symm_fdx_t *fdx) {
  size_t kept = 0;
  for (size_t i = 0; i < fdx->nconns; i++)
    if (fdx->conns[i].fd >= 0) fdx->conns[kept++] = fdx->conns[i];
  fdx->nconns = kept;
}

static void *fdx_server_main(void *arg) {
  symm_fdx_t *fdx = arg;
  uint64_t accept_resume_ns = 0;
  for (;;) {
    bool listening = symm_now_ns() >= accept_resume_ns;
    size_t n = fdx_fill_pollfds(fdx, listening);
    int rc = poll(fdx->pfds, (nfds_t)n, listening ? -1 : FDX_ACCEPT_PAUSE_MS);
    if (rc < 0) {
      if (errno == EINTR) continue;
      /* Only ENOMEM is possible here; keep serving rather than leave peers
       * to time out. */
      SYMM_WARN(BACKEND, "fd server %s: poll failed (%s)", fdx->name, strerror(errno));
      poll(NULL, 0, FDX_ACCEPT_PAUSE_MS);
      continue;
    }
    if (fdx->pfds[0].revents) break; /* symm_fdx_stop */
    for (size_t i = 0; i + 2 < n; i++) {
      short ev = fdx->pfds[2 + i].revents;
      if (ev && !fdx_serve(fdx, &fdx->conns[i], ev)) fdx_close_conn(&fdx->conns[i].fd);
    }
    if (fdx->pfds[1].revents) accept_resume_ns = fdx_accept_all(fdx);
    fdx_drop_closed_conns(fdx);
  }
  return NULL;
}

/* ---------------------------------------------------------- client side */

/* Connects to `peer`'s server, retrying while it is not up yet (ranks start
 * their servers at slightly different times).  A server that accepted us
 * before and now refuses has gone away: no point waiting for it. */
static symm_result_t fdx_connect(symm_fdx_t *fdx, int peer, struct fdx_peer *p,
                                 uint64_t deadline_ns) {
  struct sockaddr_un addr;
  socklen_t len = fdx_rank_address(fdx, peer, &addr);
  char name[FDX_NAME_MAX];
  fdx_printable_name(&addr, len, name, sizeof name);
  int delay_ms = 1;
  uint64_t lost_look_ns = 0;
  for (;;) {
    int sock;
    SYMM_SYSCHECK(sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
                  "fd exchange: socket");
    /* Unix-domain connect never returns EINPROGRESS: it completes at once,
     * or fails with EAGAIN when the listener's backlog is full. */
    if (connect(sock, (const struct sockaddr *)&addr, len) == 0) {
      /* The abstract namespace has no permissions: make sure the name is
       * not squatted by another user before trusting fds from it. */
      struct ucred cred;
      bool known = fdx_peer_cred(sock, &cred);
      if (!known || cred.uid != geteuid()) {
        close(sock);
        return symm_error(SYMM_ERR_PERMISSION,
                          "fd server %s of rank %d runs as uid %d, not %u; refusing its fds",
                          name, peer, known ? (int)cred.uid : -1, (unsigned)geteuid());
      }
      symm_fork_guard_add(sock);
      p->conn = sock;
      p->reached = true;
      return SYMM_SUCCESS;
    }
    int err = errno;
    close(sock);
    bool absent = err == ECONNREFUSED || err == ENOENT;
    if (absent && p->reached)
      return symm_error(SYMM_ERR_PEER_LOST, "fd server %s of rank %d is gone (%s)", name, peer,
                        strerror(err));
    /* A server not up yet is waited for; one whose process is gone never
     * comes: that is a loss now, not a timeout later. */
    if (absent && p->pid > 0 && symm_process_gone(p->pid))
      return symm_error(SYMM_ERR_PEER_LOST, "rank %d (pid %d) is gone: its fd server %s never "
                        "answered", peer, (int)p->pid, name);
    /* The bootstrap knows of losses the pid cannot show (another PID
     * namespace, a pid not known): the store's or launcher's marks, a
     * peer's note.  A rank lost never does its part. */
    if (absent && fdx->comm && symm_now_ns() >= lost_look_ns) {
      lost_look_ns = symm_now_ns() + FDX_LOST_LOOK_MS * 1000000ull;
      int lost = symm_comm_lost_rank(fdx->comm);
      if (lost == peer)
        return symm_error(SYMM_ERR_PEER_LOST, "rank %d is lost (the bootstrap says so): its fd "
                          "server %s never answered", peer, name);
      if (lost >= 0 && lost < fdx->size)
        return symm_error(SYMM_ERR_PEER_LOST, "rank %d is lost (the bootstrap says so); rank "
                          "%d's fd server %s had not answered yet", lost, peer, name);
    }
    if (!absent && err != EAGAIN && err != EINTR) {
      errno = err;
      return symm_error_errno("fd exchange: connect to %s (rank %d)", name, peer);
    }
    int left = symm_ms_until(deadline_ns);
    if (left == 0)
      return symm_error(SYMM_ERR_TIMEOUT,
                        "fd server %s of rank %d did not accept within %d ms (%s)", name, peer,
                        fdx->timeout_ms, strerror(err));
    poll(NULL, 0, delay_ms < left ? delay_ms : left);
    delay_ms = delay_ms * 2 > FDX_RETRY_MAX_MS ? FDX_RETRY_MAX_MS : delay_ms * 2;
  }
}

/* Sends the request.  A server that refused us has closed the socket, so a
 * broken pipe is not yet an error: its refusal may still be waiting. */
static symm_result_t fdx_send_request(int sock, int peer, uint64_t id, uint64_t deadline_ns) {
  symm_fdx_request_t req;
  memset(&req, 0, sizeof req);
  req.magic = SYMM_FDX_MAGIC;
  req.op = SYMM_FDX_OP_FETCH;
  req.id = id;
  for (;;) {
    ssize_t n = send(sock, &req, sizeof req, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof req) return SYMM_SUCCESS;
    if (n >= 0) return symm_error(SYMM_ERR_PROTOCOL, "fd exchange: short send to rank %d", peer);
    if (errno == EPIPE || errno == ECONNRESET) return SYMM_SUCCESS;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return symm_error_errno("fd exchange: send to rank %d", peer);
    int rc;
    SYMM_SYSCHECK(rc = symm_poll_until(sock, POLLOUT, deadline_ns), "fd exchange: poll");
    if (rc == 0)
      return symm_error(SYMM_ERR_TIMEOUT, "fd exchange: rank %d's server is not reading", peer);
  }
}

static void fdx_collect_fds(struct msghdr *msg, symm_fdx_received_t *r) {
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (r->nfds < (int)(sizeof r->fds / sizeof r->fds[0])) r->fds[r->nfds++] = fd;
      else close(fd);
    }
  }
}

symm_result_t symm_fdx_recv_reply(int sock, int peer, uint64_t deadline_ns,
                                  symm_fdx_received_t *r, bool *broken) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 4)];
  } ctl;
  for (;;) {
    int rc;
    SYMM_SYSCHECK(rc = symm_poll_until(sock, POLLIN, deadline_ns), "fd exchange: poll");
    if (rc == 0)
      return symm_error(SYMM_ERR_TIMEOUT, "fd exchange: no reply from rank %d's server", peer);
    struct iovec iov = {&r->rep, sizeof r->rep};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      *broken = true;
      return symm_error(SYMM_ERR_PEER_LOST, "fd exchange: rank %d's server closed the connection",
                        peer);
    }
    SYMM_SYSCHECK(n, "fd exchange: recvmsg from rank %d", peer);
    r->len = n;
    r->flags = msg.msg_flags;
    fdx_collect_fds(&msg, r);
    return SYMM_SUCCESS;
  }
}

symm_result_t symm_fdx_check_reply(int peer, uint64_t id, symm_fdx_received_t *r, int *fd) {
  const symm_fdx_reply_t *rep = &r->rep;
  bool framed = r->len == (ssize_t)sizeof *rep && !(r->flags & (MSG_TRUNC | MSG_CTRUNC)) &&
                rep->magic == SYMM_FDX_MAGIC;
  if (framed && rep->status == SYMM_FDX_REFUSED && r->nfds == 0)
    return symm_error(SYMM_ERR_PERMISSION, "fd exchange: rank %d's server refused uid %u", peer,
                      (unsigned)geteuid());
  if (framed && rep->id == id) {
    if (rep->status == SYMM_FDX_OK && r->nfds == 1) {
      *fd = r->fds[0];
      r->nfds = 0;
      return SYMM_SUCCESS;
    }
    if (rep->status == SYMM_FDX_NOT_FOUND && r->nfds == 0)
      return symm_error(SYMM_ERR_NOT_FOUND, "fd exchange: rank %d has published no fd with id %" PRIu64,
                        peer, id);
  }
  return symm_error(SYMM_ERR_PROTOCOL,
                    "fd exchange: malformed reply from rank %d (%zd bytes, flags %#x, status %u, %d fds)",
                    peer, r->len, (unsigned)r->flags, framed ? rep->status : 0u, r->nfds);
}

symm_result_t symm_fdx_check_memfd(int fd, int peer, uint64_t bytes) {
  /* Seals exist on shmem files only: EINVAL says "not a memfd". */
  int seals = fcntl(fd, F_GET_SEALS);
  struct stat st;
  if (seals < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return symm_error(SYMM_ERR_PROTOCOL, "fd exchange: rank %d's memory is not a memfd (%s); "
                      "refusing to map it", peer,
                      seals < 0 ? "it takes no seals" : "not a regular file");
  if (!(seals & F_SEAL_SHRINK))
    return symm_error(SYMM_ERR_PROTOCOL, "fd exchange: rank %d's memfd is not sealed against "
                      "shrinking (seals %#x); refusing to map what it could cut short", peer,
                      (unsigned)seals);
  if ((uint64_t)st.st_size < bytes)
    return symm_error(SYMM_ERR_PROTOCOL, "fd exchange: rank %d's memfd is %lld bytes, it "
                      "advertised %llu", peer, (long long)st.st_size, (unsigned long long)bytes);
  return SYMM_SUCCESS;
}

/* One request/reply on the peer's connection (opened here if needed). */
static symm_result_t fdx_roundtrip(symm_fdx_t *fdx, int peer, struct fdx_peer *p, uint64_t id,
                                   uint64_t deadline_ns, int *fd, bool *broken) {
  symm_result_t res = SYMM_SUCCESS;
  if (p->conn < 0) SYMM_CHECK(fdx_connect(fdx, peer, p, deadline_ns));
  SYMM_CHECK(fdx_send_request(p->conn, peer, id, deadline_ns));
  symm_fdx_received_t r;
  memset(&r, 0, sizeof r);
  SYMM_CHECK_GOTO(symm_fdx_recv_reply(p->conn, peer, deadline_ns, &r, broken), res, out);
  res = symm_fdx_check_reply(peer, id, &r, fd);
out:
  for (int i = 0; i < r.nfds; i++) close(r.fds[i]);
  return res;
}

/* A peer known to run on another host: its server is out of reach (an
 * abstract socket lives in its host's network namespace) and fds do not
 * cross hosts; refused at once, naming both, instead of waiting out the
 * timeout on a name that nobody here listens on. */
static symm_result_t fdx_other_host(const symm_fdx_t *fdx, int peer) {
  const char *theirs = fdx->peers[peer].elsewhere;
  if (!theirs) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_UNSUPPORTED,
                    "fd exchange: rank %d runs on host %s and rank %d (this rank) on %s: file "
                    "descriptors pass between the processes of one host only (Unix sockets)",
                    peer, theirs, fdx->rank, fdx->host);
}

symm_result_t symm_fdx_fetch(symm_fdx_t *fdx, int peer, uint64_t id, int *fd) {
  if (!fdx || !fd) return symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_fetch: NULL argument");
  *fd = -1;
  if (peer < 0 || peer >= fdx->size)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_fetch: rank %d out of range [0, %d)", peer,
                      fdx->size);
  SYMM_CHECK(fdx_other_host(fdx, peer));
  struct fdx_peer *p = &fdx->peers[peer];
  /* Inside a rendezvous, the whole mapping of every peer keeps to one
   * deadline, ending early enough to agree on a failure in time. */
  uint64_t deadline_ns = symm_deadline_before_agreeing(fdx->timeout_ms);
  symm_result_t res;
  pthread_mutex_lock(&p->lock);
  for (int attempt = 0;; attempt++) {
    bool cached = p->conn >= 0, broken = false;
    res = fdx_roundtrip(fdx, peer, p, id, deadline_ns, fd, &broken);
    if (res == SYMM_SUCCESS || res == SYMM_ERR_NOT_FOUND) break;
    /* Any other failure leaves the connection in an unknown state (a late
     * reply could answer the next request): never reuse it. */
    fdx_close(&p->conn);
    /* A cached connection may have died while idle; one fresh try tells a
     * stale connection from a peer that is gone. */
    if (!(broken && cached && attempt == 0)) break;
  }
  pthread_mutex_unlock(&p->lock);
  return res;
}

/* ----------------------------------------------------------- lifecycle */

static symm_result_t fdx_listen(symm_fdx_t *fdx) {
  struct sockaddr_un addr;
  socklen_t len = fdx_rank_address(fdx, fdx->rank, &addr);
  SYMM_SYSCHECK(fdx->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
                "fd server: socket");
  symm_fork_guard_add(fdx->listen_fd);
  int rc = bind(fdx->listen_fd, (const struct sockaddr *)&addr, len);
  if (rc != 0 && errno == EADDRINUSE)
    return symm_error(SYMM_ERR_SYSTEM,
                      "fd server name %s is taken (a communicator's names come from a "
                      "secret of its ranks: another process of this user bound this one)",
                      fdx->name);
  SYMM_SYSCHECK(rc, "fd server: bind %s", fdx->name);
  SYMM_SYSCHECK(listen(fdx->listen_fd, SOMAXCONN), "fd server: listen %s", fdx->name);
  SYMM_SYSCHECK(fdx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "fd server: eventfd");
  return SYMM_SUCCESS;
}

static symm_result_t fdx_start_thread(symm_fdx_t *fdx) {
  /* The server thread must not take the application's signals. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&fdx->thread, NULL, fdx_server_main, fdx);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  SYMM_PTHREADCHECK(rc, "fd server: pthread_create");
  fdx->running = true;
  return SYMM_SUCCESS;
}

/* Allocates fdx and everything that cannot fail later; NULL on no memory. */
/* Which peers run on other hosts, by name, as far as the communicator
 * knows (the comm need not outlive the fdx).  false: out of memory. */
static bool fdx_note_hosts(symm_fdx_t *fdx, const symm_comm_t *comm) {
  const char *mine = symm_comm_peer_host(comm, symm_comm_rank(comm));
  snprintf(fdx->host, sizeof fdx->host, "%s", mine ? mine : "?");
  for (int r = 0; r < fdx->size; r++) {
    const char *theirs = symm_comm_peer_host(comm, r);
    if (!theirs || symm_comm_peer_same_host(comm, r)) continue;
    if (!(fdx->peers[r].elsewhere = strdup(theirs))) return false;
  }
  return true;
}

static symm_fdx_t *fdx_alloc(const symm_comm_t *comm) {
  symm_fdx_t *fdx = calloc(1, sizeof *fdx);
  if (!fdx) return NULL;
  fdx->listen_fd = fdx->wake_fd = -1;
  pthread_mutex_init(&fdx->table_lock, NULL);
  fdx->peers = calloc((size_t)symm_comm_size(comm), sizeof *fdx->peers);
  fdx->conns_cap = 16;
  fdx->conns = malloc(fdx->conns_cap * sizeof *fdx->conns);
  fdx->pfds_cap = fdx->conns_cap + 2;
  fdx->pfds = malloc(fdx->pfds_cap * sizeof *fdx->pfds);
  fdx->size = symm_comm_size(comm); /* also what stop uses to tear peers down */
  fdx->comm = (symm_comm_t *)comm; /* asked about lost ranks, never changed */
  if (!fdx->peers || !fdx->conns || !fdx->pfds) {
    free(fdx->peers);
    fdx->peers = NULL;
    symm_fdx_stop(fdx);
    return NULL;
  }
  for (int r = 0; r < fdx->size; r++) {
    pthread_mutex_init(&fdx->peers[r].lock, NULL);
    fdx->peers[r].conn = -1;
    fdx->peers[r].pid = symm_comm_peer_pid(comm, r);
  }
  if (!fdx_note_hosts(fdx, comm)) {
    symm_fdx_stop(fdx);
    return NULL;
  }
  return fdx;
}

symm_result_t symm_fdx_start(const symm_comm_t *comm, symm_fdx_t **out) {
  if (!comm || !out) return symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_start: NULL argument");
  *out = NULL;
  if (symm_comm_size(comm) <= 0 || symm_comm_rank(comm) < 0 || symm_comm_rank(comm) >= symm_comm_size(comm))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_start: rank %d out of range [0, %d)",
                      symm_comm_rank(comm), symm_comm_size(comm));
  const char *job = symm_comm_job_id(comm), *nonce = symm_comm_name_nonce(comm);
  symm_fdx_t *fdx = fdx_alloc(comm);
  if (!fdx) return symm_error(SYMM_ERR_NO_MEMORY, "symm_fdx_start: out of memory");
  symm_result_t res = SYMM_SUCCESS;
  struct sockaddr_un addr;
  socklen_t len = 0;
  if (strlen(job) < sizeof fdx->job_id) {
    snprintf(fdx->job_id, sizeof fdx->job_id, "%s", job);
    /* The nonce's characters are the key: all of its randomness, in the
     * form every rank holds it. */
    memcpy(fdx->name_key, nonce, strnlen(nonce, sizeof fdx->name_key));
    fdx->keyed = *nonce != '\0';
    fdx->index = symm_comm_index(comm);
    fdx->rank = symm_comm_rank(comm);
    len = fdx_rank_address(fdx, fdx->rank, &addr);
  }
  if (len == 0) {
    res = symm_error(SYMM_ERR_INVALID_ARG, "symm_fdx_start: job id \"%.64s\" too long for a "
                     "socket name", job);
    goto fail;
  }
  fdx->timeout_ms = symm_comm_timeout_ms(comm) > 0 ? symm_comm_timeout_ms(comm) : FDX_DEFAULT_TIMEOUT_MS;
  fdx_printable_name(&addr, len, fdx->name, sizeof fdx->name);

  SYMM_CHECK_GOTO(fdx_listen(fdx), res, fail);
  SYMM_CHECK_GOTO(fdx_start_thread(fdx), res, fail);
  SYMM_INFO(BACKEND, "fd server %s listening (rank %d of %d)", fdx->name, fdx->rank, fdx->size);
  *out = fdx;
  return SYMM_SUCCESS;
fail:
  symm_fdx_stop(fdx);
  return res;
}

void symm_fdx_stop(symm_fdx_t *fdx) {
  if (!fdx) return;
  if (fdx->running) {
    uint64_t one = 1;
    ssize_t n;
    do n = write(fdx->wake_fd, &one, sizeof one);
    while (n < 0 && errno == EINTR);
    pthread_join(fdx->thread, NULL);
  }
  for (size_t i = 0; i < fdx->nconns; i++) fdx_close(&fdx->conns[i].fd);
  fdx_close(&fdx->listen_fd);
  fdx_close(&fdx->wake_fd);
  for (size_t i = 0; i < fdx->count; i++) close(fdx->table[i].fd);
  if (fdx->peers) {
    for (int r = 0; r < fdx->size; r++) {
      fdx_close(&fdx->peers[r].conn);
      pthread_mutex_destroy(&fdx->peers[r].lock);
      free(fdx->peers[r].elsewhere);
    }
  }
  pthread_mutex_destroy(&fdx->table_lock);
  free(fdx->peers);
  free(fdx->table);
  free(fdx->conns);
  free(fdx->pfds);
  free(fdx);
}
