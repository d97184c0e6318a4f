/* libFuzzer target: the fd-exchange protocol messages, both ends.  The
 * input is a sequence of messages, each
 *   u8 kind (bit 0: request or reply; bits 1-3: fds attached to a reply;
 *            bits 4-5: MSG_TRUNC / MSG_CTRUNC in recvmsg's flags)
 *   u8 len  (bytes as recvmsg returned them, 0..255)
 *   bytes   (the message, as far as its buffer holds)
 * and each goes through the check its receiver makes: the server's
 * symm_fdx_check_request or the client's symm_fdx_check_reply (asking
 * for id 7).  The requests then go, as they are, to a real fd server
 * (symm_fdx_start, rank 0 of 1, with a memfd published as id 7) over one
 * SOCK_SEQPACKET connection, bit 5 attaching an fd; its replies are read
 * as the client reads them.
 *
 * Checked besides the sanitizers: a request is accepted exactly when it
 * is a well-formed FETCH; a reply is accepted exactly when it is framed,
 * answers id 7 with status OK and carries one fd, which it hands over,
 * leaving the others to the caller.  The server answers each well-formed
 * request (the memfd for id 7, NOT_FOUND otherwise) and closes the
 * connection at the first malformed one, answering nothing more. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "backends/util/fd_exchange.h"
#include "symm_test_access.h"

#define FUZZ_ID 7
/* How long the server may take to answer (its thread shares the CPU). */
#define FUZZ_REPLY_MS 5000

static symm_fdx_t *server;
static struct sockaddr_un server_addr;
static socklen_t server_len;

static void fail(const char *what) {
  fprintf(stderr, "fuzz-fdx: %s\n", what);
  __builtin_trap();
}

static void one_request(const uint8_t *p, size_t avail, size_t len, int flags) {
  symm_fdx_request_t req;
  memset(&req, 0, sizeof req);
  memcpy(&req, p, avail < sizeof req ? avail : sizeof req);
  const char *bad = symm_fdx_check_request(&req, (ssize_t)len, flags);
  bool good = len == sizeof req && !(flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              req.magic == SYMM_FDX_MAGIC && req.op == SYMM_FDX_OP_FETCH;
  if (good != (bad == NULL)) fail("request verdict disagrees with the wire format");
}

static void one_reply(const uint8_t *p, size_t avail, size_t len, int flags, int nfds) {
  symm_fdx_received_t r;
  memset(&r, 0, sizeof r);
  memcpy(&r.rep, p, avail < sizeof r.rep ? avail : sizeof r.rep);
  r.len = (ssize_t)len;
  r.flags = flags;
  int opened[4];
  for (int i = 0; i < nfds; i++) {
    opened[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (opened[i] < 0) fail("cannot open /dev/null");
    r.fds[r.nfds++] = opened[i];
  }
  int fd = -1;
  symm_result_t res = symm_fdx_check_reply(3, FUZZ_ID, &r, &fd);
  bool good = len == sizeof r.rep && !(flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              r.rep.magic == SYMM_FDX_MAGIC && r.rep.id == FUZZ_ID &&
              r.rep.status == SYMM_FDX_OK && nfds == 1;
  if (good != (res == SYMM_SUCCESS)) fail("reply verdict disagrees with the wire format");
  if (res == SYMM_SUCCESS && (fd != opened[0] || r.nfds != 0)) fail("fd not handed over");
  if (res != SYMM_SUCCESS && (fd != -1 || r.nfds != nfds)) fail("fd taken from a refused reply");
  /* Every fd is ours to close exactly once (the server thread opens fds
   * too, so a closed number may already be reused: not tested here). */
  if (res == SYMM_SUCCESS && close(fd) != 0) fail("the handed-over fd was closed");
  for (int i = 0; i < r.nfds; i++)
    if (close(r.fds[i]) != 0) fail("an attached fd was closed by the check");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  char job[64];
  unsigned char rnd[6];
  symm_random_bytes(rnd, sizeof rnd);
  snprintf(job, sizeof job, "fuzz%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1],
           rnd[2], rnd[3], rnd[4], rnd[5]);
  symm_comm_t *c = symm_test_comm_new(
      &(symm_test_comm_opts_t){.job_id = job, .rank = 0, .size = 1, .timeout_ms = FUZZ_REPLY_MS});
  int mem = memfd_create("fuzz-fdx", MFD_CLOEXEC);
  if (!c || mem < 0 || symm_fdx_start(c, &server) != SYMM_SUCCESS ||
      symm_fdx_publish(server, FUZZ_ID, mem) != SYMM_SUCCESS) {
    fprintf(stderr, "fuzz-fdx: cannot start the fd server: %s\n", symm_last_error());
    abort();
  }
  close(mem);
  symm_test_comm_free(c);
  server_len = symm_fdx_address(job, 0, 0, &server_addr);
  return 0;
}

/* Waits for what the server sends after a request, as the client does:
 * true with r filled for a reply, false when the connection ended. */
static bool server_reply(int sock, symm_fdx_received_t *r) {
  bool broken = false;
  symm_result_t res = symm_fdx_recv_reply(sock, 0, symm_deadline_after(FUZZ_REPLY_MS), r, &broken);
  if (res == SYMM_SUCCESS) return true;
  if (!broken) fail("the fd server neither answered nor closed");
  return false;
}

/* Sends one request as the bytes say; false once the server has closed. */
static bool server_request(int sock, const uint8_t *p, size_t len, bool with_fd) {
  symm_fdx_request_t req;
  memset(&req, 0, sizeof req);
  memcpy(&req, p, len < sizeof req ? len : sizeof req);
  int extra = with_fd ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  ssize_t n = symm_fdx_sendmsg(sock, p, len, extra, 0);
  if (extra >= 0) close(extra);
  if (n < 0) return false; /* closed after an earlier malformed request */
  bool good = len == sizeof req && !with_fd && req.magic == SYMM_FDX_MAGIC &&
              req.op == SYMM_FDX_OP_FETCH;
  symm_fdx_received_t r;
  memset(&r, 0, sizeof r);
  bool replied = server_reply(sock, &r);
  if (!good) {
    if (replied) fail("the fd server answered a malformed request");
    return false;
  }
  if (!replied) fail("the fd server closed on a well-formed request");
  int fd = -1;
  symm_result_t res = symm_fdx_check_reply(0, req.id, &r, &fd);
  if (res != (req.id == FUZZ_ID ? SYMM_SUCCESS : SYMM_ERR_NOT_FOUND))
    fail("the fd server's reply is not the one for its request");
  if (fd >= 0) close(fd);
  for (int i = 0; i < r.nfds; i++) close(r.fds[i]);
  return true;
}

static void to_server(const uint8_t *data, size_t size) {
  int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0 || connect(sock, (struct sockaddr *)&server_addr, server_len) != 0)
    fail("cannot connect to the fd server");
  for (size_t at = 0; at + 2 <= size;) {
    uint8_t kind = data[at], len = data[at + 1];
    at += 2;
    size_t avail = size - at < len ? size - at : len;
    if (!(kind & 1) && !server_request(sock, data + at, avail, (kind & 0x20) != 0)) break;
    at += avail;
  }
  close(sock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  to_server(data, size);
  size_t at = 0;
  while (at + 2 <= size) {
    uint8_t kind = data[at], len = data[at + 1];
    at += 2;
    size_t avail = size - at < len ? size - at : len;
    int flags = ((kind & 0x10) ? MSG_TRUNC : 0) | ((kind & 0x20) ? MSG_CTRUNC : 0);
    int nfds = (kind >> 1) & 7;
    if (kind & 1)
      one_reply(data + at, avail, len, flags, nfds > 4 ? 4 : nfds);
    else
      one_request(data + at, avail, len, flags);
    at += avail;
  }
  return 0;
}
