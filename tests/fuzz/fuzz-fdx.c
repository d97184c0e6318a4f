/* libFuzzer target: the fd-exchange protocol messages, both ends.  The
 * input is a sequence of messages, each
 *   u8 kind (bit 0: request or reply; bits 1-3: fds attached to a reply;
 *            bits 4-5: MSG_TRUNC / MSG_CTRUNC in recvmsg's flags)
 *   u8 len  (bytes as recvmsg returned them, 0..255)
 *   bytes   (the message, as far as its buffer holds)
 * and each goes through the check its receiver makes: the server's
 * symm_fdx_check_request or the client's symm_fdx_check_reply (asking
 * for id 7).  Checked besides the sanitizers: a request is accepted
 * exactly when it is a well-formed FETCH; a reply is accepted exactly
 * when it is framed, answers id 7 with status OK and carries one fd,
 * which it hands over, and no fd is lost or closed twice. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/util/fd_exchange.h"

#define FUZZ_ID 7

static void fail(const char *what) {
  fprintf(stderr, "fuzz-fdx: %s\n", what);
  __builtin_trap();
}

static bool fd_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

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
  if (res == SYMM_SUCCESS) close(fd);
  for (int i = 0; i < r.nfds; i++) close(r.fds[i]);
  for (int i = 0; i < nfds; i++)
    if (fd_open(opened[i])) fail("an attached fd was left open");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
