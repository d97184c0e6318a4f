/* Connecting a store client: resolving the address, retrying refusals
 * while the server starts, then the handshake (store_client_hello.c);
 * the public connect calls. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "symm_util.h" /* symm_fork_guard_add */
#include "store_client_int.h"

#define CLI_BACKOFF_MAX_MS 250
/* Connections a client tries when the server closes them before it answers
 * HELLO (symm_store_connect_comm). */
#define CLI_HELLO_ATTEMPTS 8

static bool cli_connect_retryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ||
         e == ECONNRESET || e == ECONNABORTED || e == EAGAIN || e == EADDRNOTAVAIL;
}

/* One non-blocking connect to ai, waiting until the deadline.  Returns the
 * fd, or -1 with errno set. */
static int cli_connect_one(const struct addrinfo *ai, uint64_t deadline) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0) return -1;
  int err = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      cli_io_t w = cli_wait(fd, POLLOUT, deadline);
      socklen_t len = sizeof err;
      if (w == CLI_IO_TIMEOUT)
        err = ETIMEDOUT;
      else if (w != CLI_IO_OK)
        err = errno;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
  }
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  symm_fork_guard_add(fd);
  return fd;
}

static void cli_sleep_ms(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sleeps *backoff_ms, or what is left until deadline, and doubles
 * *backoff_ms up to CLI_BACKOFF_MAX_MS; false (no sleep) once the deadline
 * has passed. */
static bool cli_backoff(uint64_t *backoff_ms, uint64_t deadline) {
  const uint64_t now = symm_now_ns();
  if (now >= deadline) return false;
  const uint64_t left = (deadline - now) / 1000000ull;
  cli_sleep_ms(*backoff_ms < left ? *backoff_ms : left);
  *backoff_ms = *backoff_ms * 2 > CLI_BACKOFF_MAX_MS ? CLI_BACKOFF_MAX_MS : *backoff_ms * 2;
  return true;
}

static symm_result_t cli_resolve(const char *host, int port, uint64_t deadline,
                                 struct addrinfo **res) {
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  struct addrinfo hints = {0};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  for (;;) {
    int gai = getaddrinfo(host, serv, &hints, res);
    if (gai == 0) return SYMM_SUCCESS;
    /* This process out of memory is no fault of the address. */
    if (gai == EAI_MEMORY)
      return symm_error(SYMM_ERR_NO_MEMORY, "store: resolving \"%s\": %s", host,
                        gai_strerror(gai));
    if (gai != EAI_AGAIN || symm_now_ns() >= deadline)
      return symm_error(SYMM_ERR_INVALID_ARG, "store: cannot resolve \"%s\": %s", host,
                        gai_strerror(gai));
    cli_sleep_ms(50);
  }
}

/* Connects to host:port, retrying refusals with a growing pause until the
 * deadline (a server that is still starting is the common case). */
static symm_result_t cli_connect_retry(const char *host, int port,
                                       uint64_t deadline, int timeout_ms, int *fd) {
  struct addrinfo *res = NULL;
  SYMM_CHECK(cli_resolve(host, port, deadline, &res));
  symm_result_t out = SYMM_SUCCESS;
  uint64_t backoff = 5;
  int last = 0;
  /* A connection under way gets the grace past the deadline (with timeout
   * 0, the single attempt still gets time to complete). */
  uint64_t attempt_deadline = cli_grace_end(deadline, timeout_ms);
  for (;;) {
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      *fd = cli_connect_one(ai, attempt_deadline);
      if (*fd >= 0) goto done;
      last = errno;
      if (!cli_connect_retryable(last)) {
        out = symm_error_errno("store: connect to %s port %d", host, port);
        goto done;
      }
    }
    if (!cli_backoff(&backoff, deadline)) break;
  }
  out = symm_error(SYMM_ERR_TIMEOUT, "store: nothing accepted at %s port %d within %d ms (%s)",
                   host, port, timeout_ms, strerror(last));
done:
  freeaddrinfo(res);
  return out;
}

symm_result_t symm_store_connect(const char *addr, const char *token, int rank,
                                 int timeout_ms, symm_store_t **store) {
  return symm_store_connect_comm(addr, token, rank, SYMM_STORE_NO_COMM, timeout_ms, store);
}

/* One connection and HELLO, until deadline. */
static symm_result_t cli_open(const char *addr, const char *host, int port, const char *token,
                              int rank, uint32_t comm, bool job_ranks, uint64_t deadline,
                              int timeout_ms, symm_store_t **out) {
  symm_result_t res = SYMM_SUCCESS;
  symm_store_t *s = calloc(1, sizeof *s);
  if (!s) return symm_error(SYMM_ERR_NO_MEMORY, "store connect: out of memory");
  pthread_mutex_init(&s->lock, NULL);
  s->fd = -1;
  s->rank = rank;
  s->comm = comm;
  s->job_ranks = job_ranks;
  s->timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
  s->server_rank = -1;
  snprintf(s->addr, sizeof s->addr, "%s", addr);
  SYMM_CHECK_GOTO(cli_connect_retry(host, port, deadline, timeout_ms, &s->fd), res, fail);
  int one = 1;
  setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SYMM_CHECK_GOTO(cli_hello(s, token, deadline, timeout_ms), res, fail);
  cli_trim(s);
  *out = s;
  return SYMM_SUCCESS;
fail:
  cli_free(s, true);
  return res;
}

symm_result_t symm_store_connect_comm(const char *addr, const char *token, int rank,
                                      uint32_t comm, int timeout_ms, symm_store_t **store) {
  return symm_store_connect_rank(addr, token, rank, comm, false, timeout_ms, store);
}

symm_result_t symm_store_connect_rank(const char *addr, const char *token, int rank,
                                      uint32_t comm, bool job_ranks, int timeout_ms,
                                      symm_store_t **store) {
  if (!store) return symm_error(SYMM_ERR_INVALID_ARG, "store connect: store is NULL");
  *store = NULL;
  if (!token) token = "";
  if (strlen(token) > SYMM_PROTO_MAX_TOKEN)
    return symm_error(SYMM_ERR_INVALID_ARG, "store connect: token over %d bytes",
                      SYMM_PROTO_MAX_TOKEN);
  if (rank < -1) return symm_error(SYMM_ERR_INVALID_ARG, "store connect: rank %d < -1", rank);
  char host[256];
  int port;
  SYMM_CHECK(symm_store_parse_addr(addr, host, sizeof host, &port));
  int t = timeout_ms < 0 ? CLI_DEFAULT_TIMEOUT_MS : timeout_ms;
  uint64_t deadline = symm_deadline_after(t);
  uint64_t backoff = 1;
  for (int attempt = 1;; attempt++) {
    symm_result_t res = cli_open(addr, host, port, token, rank, comm, job_ranks, deadline, t,
                                 store);
    /* Closed before HELLO was answered: a store that was stopping (the
     * serving rank's previous communicator) while its successor on this
     * address starts.  Connect again, as to a store not listening yet:
     * a few times, since a stopping store is not listening again after it
     * closed; what keeps closing is no store of ours. */
    if (res != SYMM_ERR_PEER_LOST || symm_now_ns() >= deadline) return res;
    if (attempt == CLI_HELLO_ATTEMPTS)
      return symm_error(SYMM_ERR_PROTOCOL,
                        "store at %s closed the connection %d times before answering HELLO: "
                        "not a symmem store of this version?", addr, attempt);
    SYMM_INFO(STORE, "store at %s closed the connection before HELLO was answered; "
              "connecting again", addr);
    cli_backoff(&backoff, deadline);
  }
}
