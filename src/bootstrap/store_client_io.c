/* The store client's socket I/O: whole messages sent and received on a
 * non-blocking socket, every wait bounded by a deadline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "store_client_int.h"

/* Waits until fd is ready for `events` or the deadline passes.  Errors and
 * hang-ups count as ready: the following send/recv reports them. */
cli_io_t cli_wait(int fd, short events, uint64_t deadline) {
  int rc = symm_poll_until(fd, events, deadline);
  return rc > 0 ? CLI_IO_OK : rc == 0 ? CLI_IO_TIMEOUT : CLI_IO_ERROR;
}

static bool cli_errno_closed(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED;
}

cli_io_t cli_send_all(int fd, const uint8_t *p, size_t len,
                      uint64_t deadline) {
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      cli_io_t w = cli_wait(fd, POLLOUT, deadline);
      if (w != CLI_IO_OK) return w;
      continue;
    }
    return cli_errno_closed(errno) ? CLI_IO_CLOSED : CLI_IO_ERROR;
  }
  return CLI_IO_OK;
}

cli_io_t cli_recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline) {
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return CLI_IO_CLOSED;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      cli_io_t w = cli_wait(fd, POLLIN, deadline);
      if (w != CLI_IO_OK) return w;
      continue;
    }
    return cli_errno_closed(errno) ? CLI_IO_CLOSED : CLI_IO_ERROR;
  }
  return CLI_IO_OK;
}
