/* The store server's thread (one poll() loop over every connection) and
 * its lifecycle: listen, start, drain, mark lost, stop.  How the server's
 * files divide the work: store_server_int.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "symm_util.h" /* symm_fork_guard_add / _close */
#include "store_server_int.h"

/* ------------------------------------------------------------- the loop */
/* Takes requests from other threads; returns true when asked to stop. */
static bool srv_control(symm_store_server_t *s) {
  char drain[64];
  while (read(s->wake_rd, drain, sizeof drain) > 0) {
  }
  int ranks[64];
  size_t n;
  bool stop;
  do {
    pthread_mutex_lock(&s->lock);
    /* Decided here, by the thread that serves HELLOs: none is accepted
     * between the count and the stop. */
    if (s->idle == IDLE_ASKED) {
      int others = s->ranked_open;
      if (s->idle_upto != SYMM_STORE_NO_COMM)
        for (size_t i = 0; i < s->ncomm_open; i++)
          if (s->comm_open[i].comm <= s->idle_upto) others -= s->comm_open[i].open;
      s->idle = others == 0 ? IDLE_STOP : IDLE_SERVE;
      if (s->idle == IDLE_STOP) s->stop = true;
      pthread_cond_broadcast(&s->cond);
    }
    stop = s->stop;
    n = s->nqueue < 64 ? s->nqueue : 64;
    if (n) {
      memcpy(ranks, s->lost_queue, n * sizeof *ranks);
      memmove(s->lost_queue, s->lost_queue + n, (s->nqueue - n) * sizeof *ranks);
      s->nqueue -= n;
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
      srv_mark_lost(s, SYMM_STORE_NO_COMM, ranks[i], 0, "reported by symm_store_server_mark_lost");
  } while (n > 0);
  return stop;
}

static void srv_check_deadlines(symm_store_server_t *s, uint64_t now) {
  for (size_t i = 0; i < s->nconns; i++) {
    srv_conn_t *c = s->conns[i];
    if (c->dead || !c->deadline_ns || c->deadline_ns > now) continue;
    if (!c->authed && !c->closing && srv_refusal_logged(s, now))
      SYMM_WARN(STORE, "store: %s did not prove the token within %llu ms; closing",
                c->peer, (unsigned long long)(s->handshake_ns / 1000000ull));
    srv_conn_close(s, c, false);
  }
  if (s->npending) srv_expire_pending(s, now);
  srv_proc_look(s, now);
  srv_refusals_summary(s, now, false);
}

static int srv_poll_timeout(const symm_store_server_t *s, uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < s->nconns; i++) {
    const srv_conn_t *c = s->conns[i];
    if (c->deadline_ns && c->deadline_ns < next) next = c->deadline_ns;
    if (c->pending && c->pending->deadline_ns < next) next = c->pending->deadline_ns;
  }
  if (s->accept_paused_until > now && s->accept_paused_until < next)
    next = s->accept_paused_until;
  if (s->unauthed_wait_until && s->unauthed_wait_until < next) next = s->unauthed_wait_until;
  uint64_t look = srv_proc_next_look(s);
  if (look < next) next = look;
  const uint64_t summary = srv_refusals_next(s);
  if (summary < next) next = summary;
  if (next == UINT64_MAX) return -1;
  int ms = symm_ms_until(next);
  return ms > 60000 ? 60000 : ms;
}


static bool srv_build_pollfds(symm_store_server_t *s, uint64_t now, bool *busy) {
  size_t need = s->nconns + 2;
  if (need > s->pfds_cap) {
    struct pollfd *p = realloc(s->pfds, need * 2 * sizeof *p);
    if (!p) return false;
    s->pfds = p;
    s->pfds_cap = need * 2;
  }
  *busy = false;
  s->pfds[0] = (struct pollfd){.fd = s->wake_rd, .events = POLLIN};
  const bool accepting = s->accept_paused_until <= now && srv_accept_room(s, now);
  s->pfds[1] = (struct pollfd){.fd = accepting ? s->listen_fd : -1, .events = POLLIN};
  for (size_t i = 0; i < s->nconns; i++) {
    srv_conn_t *c = s->conns[i];
    short ev = POLLRDHUP;
    symm_proto_header_t h;
    long size;
    /* Requests can become servable without socket activity (a parked
     * request answered, output flushed): serve them before sleeping. */
    if (srv_ready(s, c, &h, &size)) *busy = true;
    if (srv_wants_input(s, c)) ev |= POLLIN;
    if (c->out_start < c->out.len) ev |= POLLOUT;
    s->pfds[i + 2] = (struct pollfd){.fd = c->dead ? -1 : c->fd, .events = ev};
  }
  return true;
}

static void srv_handle_events(symm_store_server_t *s, size_t npolled) {
  for (size_t i = 0; i < npolled; i++) {
    srv_conn_t *c = s->conns[i];
    short re = s->pfds[i + 2].revents;
    if (c->dead || !re) continue;
    if (re & POLLOUT) srv_flush(s, c);
    if (c->dead) continue;
    if (re & POLLIN)
      srv_read(s, c);
    else if (re & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
      c->peer_closed = true; /* gone while we were not reading */
      srv_conn_close(s, c, false);
    }
  }
}

static void *srv_thread(void *arg) {
  symm_store_server_t *s = arg;
  for (;;) {
    if (srv_control(s)) break;
    uint64_t now = symm_now_ns();
    srv_check_deadlines(s, now);
    for (size_t i = 0; i < s->nconns; i++) srv_process(s, s->conns[i]);
    /* Answers made for other connections than the one served (parked
     * requests a write completed, or that expired) go out now too. */
    for (size_t i = 0; i < s->nconns; i++)
      if (!s->conns[i]->dead && s->conns[i]->out_start < s->conns[i]->out.len)
        srv_flush(s, s->conns[i]);
    srv_remove_dead(s);
    bool busy;
    if (!srv_build_pollfds(s, now, &busy)) {
      SYMM_WARN(STORE, "store: out of memory for the poll set; retrying");
      struct timespec ts = {0, 10 * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    size_t npolled = s->nconns;
    int rc = poll(s->pfds, npolled + 2, busy ? 0 : srv_poll_timeout(s, now));
    if (rc < 0) {
      if (errno != EINTR) SYMM_WARN(STORE, "store: poll: %s", strerror(errno));
      continue;
    }
    srv_handle_events(s, npolled);
    if (s->pfds[1].revents & POLLIN) srv_accept(s);
  }
  for (size_t i = 0; i < s->nconns; i++) srv_conn_close(s, s->conns[i], true);
  srv_remove_dead(s);
  srv_refusals_summary(s, symm_now_ns(), true);
  return NULL;
}

/* ----------------------------------------------------------- public API */
static void srv_wake_thread(symm_store_server_t *s) {
  char b = 1;
  /* A full pipe already guarantees a wake-up, so EAGAIN is fine. */
  while (write(s->wake_wr, &b, 1) < 0 && errno == EINTR) {
  }
}

static symm_result_t srv_listen(symm_store_server_t *s, const char *bind_host,
                                int port) {
  char host[256], serv[16];
  const char *h = bind_host && *bind_host ? bind_host : "127.0.0.1";
  size_t hl = strlen(h);
  if (hl >= sizeof host)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: bind address too long");
  if (h[0] == '[' && hl > 2 && h[hl - 1] == ']')
    snprintf(host, sizeof host, "%.*s", (int)(hl - 2), h + 1);
  else
    snprintf(host, sizeof host, "%s", h);
  snprintf(serv, sizeof serv, "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host, serv, &hints, &res);
  if (gai != 0)
    return symm_error(SYMM_ERR_SYSTEM, "store: cannot resolve bind address %s: %s",
                      host, gai_strerror(gai));
  int err = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      s->listen_fd = fd;
      symm_fork_guard_add(fd);
      break;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  if (s->listen_fd < 0) {
    errno = err;
    return symm_error_errno("store: cannot listen on %s port %d", host, port);
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  SYMM_SYSCHECK(getsockname(s->listen_fd, (struct sockaddr *)&ss, &len), "store: getsockname");
  s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  return SYMM_SUCCESS;
}

void srv_free(symm_store_server_t *s) {
  if (s->listen_fd >= 0) symm_fork_guard_close(s->listen_fd);
  if (s->wake_rd >= 0) close(s->wake_rd);
  if (s->wake_wr >= 0) close(s->wake_wr);
  srv_table_free(&s->table);
  free(s->conns);
  free(s->pfds);
  free(s->lost);
  srv_procs_free(s);
  free(s->lost_queue);
  free(s->expected_gone);
  free(s->comm_open);
  free(s->token);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Raises this process's soft limit on open files to its hard limit: a
 * store holds a connection per rank and communicator, and connections
 * that never present the token take fds too until they are closed (the
 * default soft limit, 1024, is often the smaller of the two). */
static void srv_raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  const unsigned long long was = (unsigned long long)rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    SYMM_INFO(STORE, "store: open-file limit raised from %llu to %llu", was,
              (unsigned long long)rl.rlim_cur);
}

symm_store_server_t *srv_new(const char *token) {
  symm_store_server_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->listen_fd = s->wake_rd = s->wake_wr = -1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  s->token = strdup(token ? token : "");
  if (!s->token || srv_table_init(&s->table) != 0) {
    srv_free(s);
    return NULL;
  }
  s->token_len = strlen(s->token);
  srv_proc_self(s);
  int64_t hs = symm_settings()->SYMM_STORE_HANDSHAKE_MS;
  s->handshake_ns = (uint64_t)(hs > 0 ? hs : 5000) * 1000000ull;
  return s;
}

symm_result_t symm_store_server_start(const char *bind_host, int port,
                                      const char *token,
                                      symm_store_server_t **server) {
  symm_result_t res = SYMM_SUCCESS;
  if (!server) return symm_error(SYMM_ERR_INVALID_ARG, "store: server is NULL");
  *server = NULL;
  if (port < 0 || port > 65535)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: port %d out of range", port);
  if (token && strlen(token) > SYMM_PROTO_MAX_TOKEN)
    return symm_error(SYMM_ERR_INVALID_ARG, "store: token longer than %d bytes",
                      SYMM_PROTO_MAX_TOKEN);
  symm_store_server_t *s = srv_new(token);
  if (!s) return symm_error(SYMM_ERR_NO_MEMORY, "store: out of memory");
  srv_raise_fd_limit();
  int fds[2];
  SYMM_SYSCHECK_GOTO(pipe2(fds, O_NONBLOCK | O_CLOEXEC), res, fail, "store: pipe");
  s->wake_rd = fds[0];
  s->wake_wr = fds[1];
  SYMM_CHECK_GOTO(srv_listen(s, bind_host, port), res, fail);
  SYMM_PTHREADCHECK_GOTO(pthread_create(&s->thread, NULL, srv_thread, s), res, fail,
                         "store: cannot start the server thread");
  s->thread_started = true;
  if (s->token_len == 0)
    SYMM_WARN(STORE, "store: serving port %d without a token: any process that "
              "can reach it may connect (with an empty token)", s->port);
  SYMM_INFO(STORE, "store: serving on %s port %d",
            bind_host && *bind_host ? bind_host : "127.0.0.1", s->port);
  *server = s;
  return SYMM_SUCCESS;
fail:
  srv_free(s);
  return res;
}

int symm_store_server_port(const symm_store_server_t *server) {
  return server ? server->port : -1;
}

void symm_store_server_stats(const symm_store_server_t *server, symm_store_stats_t *stats) {
  if (server && stats) srv_stats_read(server, stats);
}

symm_result_t symm_store_server_drain_comm(symm_store_server_t *server, uint32_t comm,
                                           int timeout_ms) {
  if (!server) return symm_error(SYMM_ERR_INVALID_ARG, "store: server is NULL");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  int64_t ms = timeout_ms < 0 ? 0 : timeout_ms;
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&server->lock);
  while (srv_open_of(server, comm) > 0 && !server->stop) {
    if (pthread_cond_timedwait(&server->cond, &server->lock, &until) == ETIMEDOUT) break;
  }
  int open = srv_open_of(server, comm);
  pthread_mutex_unlock(&server->lock);
  if (open > 0)
    res = symm_error(SYMM_ERR_TIMEOUT, "store: %d rank connection%s still open after %d ms",
                     open, open == 1 ? "" : "s", timeout_ms);
  return res;
}

symm_result_t symm_store_server_drain(symm_store_server_t *server, int timeout_ms) {
  return symm_store_server_drain_comm(server, SYMM_STORE_NO_COMM, timeout_ms);
}

symm_result_t symm_store_server_wait_parked(symm_store_server_t *server, int n,
                                           int timeout_ms) {
  if (!server) return symm_error(SYMM_ERR_INVALID_ARG, "store: server is NULL");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  const int64_t ms = timeout_ms < 0 ? 0 : timeout_ms;
  until.tv_sec += ms / 1000 + (until.tv_nsec + (ms % 1000) * 1000000L) / 1000000000L;
  until.tv_nsec = (until.tv_nsec + (ms % 1000) * 1000000L) % 1000000000L;
  pthread_mutex_lock(&server->lock);
  while (server->parked < (size_t)n && !server->stop)
    if (pthread_cond_timedwait(&server->cond, &server->lock, &until) == ETIMEDOUT) break;
  const size_t parked = server->parked;
  pthread_mutex_unlock(&server->lock);
  if (parked >= (size_t)n) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_TIMEOUT, "store: %zu requests parked after %d ms, not %d", parked,
                    timeout_ms, n);
}

int symm_store_server_parked(symm_store_server_t *server) {
  if (!server) return 0;
  pthread_mutex_lock(&server->lock);
  const int parked = (int)server->parked;
  pthread_mutex_unlock(&server->lock);
  return parked;
}

int symm_store_server_ranks_open(symm_store_server_t *server) {
  if (!server) return 0;
  pthread_mutex_lock(&server->lock);
  int open = server->ranked_open;
  pthread_mutex_unlock(&server->lock);
  return open;
}

/* Appends v to a growing array; false when out of memory. */
static bool push_int(int **arr, size_t *n, size_t *cap, int v) {
  if (*n == *cap) {
    size_t grown = *cap ? *cap * 2 : 16;
    int *p = realloc(*arr, grown * sizeof *p);
    if (!p) return false;
    *arr = p;
    *cap = grown;
  }
  (*arr)[(*n)++] = v;
  return true;
}

void symm_store_server_expect_gone(symm_store_server_t *server, int32_t pid) {
  if (!server || pid <= 0) return;
  pthread_mutex_lock(&server->lock);
  if (!push_int(&server->expected_gone, &server->nexpected, &server->expected_cap, pid))
    SYMM_WARN(STORE, "store: out of memory noting process %d as being stopped", (int)pid);
  pthread_mutex_unlock(&server->lock);
}


void symm_store_server_mark_lost(symm_store_server_t *server, int rank) {
  if (!server || rank < 0) return;
  pthread_mutex_lock(&server->lock);
  bool queued = push_int(&server->lost_queue, &server->nqueue, &server->queue_cap, rank);
  pthread_mutex_unlock(&server->lock);
  if (queued)
    srv_wake_thread(server);
  else
    SYMM_WARN(STORE, "store: out of memory marking rank %d lost", rank);
}

bool symm_store_server_stop_if_idle(symm_store_server_t *server, uint32_t upto_comm) {
  if (!server) return true;
  pthread_mutex_lock(&server->lock);
  server->idle = IDLE_ASKED;
  server->idle_upto = upto_comm;
  pthread_mutex_unlock(&server->lock);
  srv_wake_thread(server);
  pthread_mutex_lock(&server->lock);
  while (server->idle == IDLE_ASKED) pthread_cond_wait(&server->cond, &server->lock);
  const bool stopping = server->idle == IDLE_STOP;
  server->idle = IDLE_NONE;
  pthread_mutex_unlock(&server->lock);
  if (stopping) symm_store_server_stop(server);
  return stopping;
}

void symm_store_server_stop(symm_store_server_t *server) {
  if (!server) return;
  pthread_mutex_lock(&server->lock);
  server->stop = true;
  pthread_cond_broadcast(&server->cond);
  pthread_mutex_unlock(&server->lock);
  if (server->thread_started) {
    srv_wake_thread(server);
    pthread_join(server->thread, NULL);
  }
  srv_free(server);
}
