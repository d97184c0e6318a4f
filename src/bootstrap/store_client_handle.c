/* A store client handle's settings and its end: BYE and close, or
 * abandon without BYE. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "symm_util.h" /* symm_fork_guard_close */
#include "store_client_int.h"

/* How long close waits for the server to acknowledge BYE by closing (less
 * when the calling operation's deadline comes first: symm_op_limit). */
#define CLI_BYE_MS 1000

static uint64_t cli_deadline(uint64_t ms) { return symm_now_ns() + ms * 1000000ull; }

void cli_free(symm_store_t *s, bool destroy_lock) {
  if (s->fd >= 0) symm_fork_guard_close(s->fd);
  symm_proto_buf_free(&s->req);
  free(s->reply);
  if (destroy_lock) pthread_mutex_destroy(&s->lock);
  free(s);
}

void symm_store_set_server_rank(symm_store_t *store, int rank) {
  if (!store) return;
  cli_lock(store);
  store->server_rank = rank;
  cli_unlock(store);
}

void symm_store_set_size(symm_store_t *store, int size) {
  if (!store) return;
  cli_lock(store);
  store->size = size;
  cli_unlock(store);
}

void symm_store_set_timeout(symm_store_t *store, int timeout_ms) {
  if (!store) return;
  cli_lock(store);
  store->timeout_ms = timeout_ms > 0 ? timeout_ms : CLI_DEFAULT_TIMEOUT_MS;
  cli_unlock(store);
}

/* Says BYE and waits (briefly) for the server to close its end, so the
 * server has seen the BYE before this process moves on, and no unread
 * reply turns our close into a reset. */
static void cli_say_bye(symm_store_t *s) {
  size_t at = cli_begin(s, SYMM_OP_BYE);
  if (s->req.failed) return;
  symm_proto_finish(&s->req, at);
  uint64_t deadline = symm_op_limit(cli_deadline(CLI_BYE_MS));
  if (cli_send_all(s->fd, s->req.data, s->req.len, deadline) != CLI_IO_OK) return;
  shutdown(s->fd, SHUT_WR);
  uint8_t sink[4096];
  for (;;) {
    ssize_t n = recv(s->fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return;
    if (cli_wait(s->fd, POLLIN, deadline) != CLI_IO_OK) return;
  }
}

void symm_store_close(symm_store_t *store) {
  if (!store) return;
  cli_lock(store);
  if (store->fd >= 0 && !store->torn_request) cli_say_bye(store);
  pthread_mutex_unlock(&store->lock);
  cli_free(store, true);
}

/* No BYE, and the mutex is left alone: in a fork()ed child it may be held
 * by a thread that does not exist here. */
void symm_store_abandon(symm_store_t *store) {
  if (!store) return;
  cli_free(store, false);
}
