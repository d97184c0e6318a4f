/*
 * The store client's private header, shared by its files:
 *   store_client_connect.c  connecting: resolving, retrying refusals, the
 *                           public connect calls
 *   store_client_hello.c    the handshake (HELLO, AUTH) that proves the
 *                           token both ways
 *   store_client_handle.c   the handle's settings and its end (BYE, close,
 *                           abandon)
 *   store_client_gather.c   MGET and the bootstrap's exchange
 *   store_client_wait.c     WAIT, CHECK, the lost-rank probe and STATS
 *   store_client_ops.c      the requests on one key (set, get, add,
 *                           compare_set, delete)
 *   store_client_check.c    checks of the callers' arguments
 *   store_client_call.c     one request and its reply, the handle's lock
 *   store_client_io.c       socket I/O bounded by deadlines
 * in that order of calls: each calls only those below it, so that no two
 * call each other.  Store addresses are parsed in store_addr.c.
 *
 * The store client: one TCP connection per handle, one request at a time
 * (a mutex serialises callers), every wait bounded by poll() deadlines.
 *
 * Deadlines.  Every call has one deadline, from its entry: its timeout
 * (blocking requests) or the handle's (the others, and connecting), never
 * later than the calling operation's (symm_deadline_after: a store call
 * inside symm_comm_init takes what is left of init's timeout).  Blocking
 * requests carry what is left of it to the server, which answers
 * SYMM_ERR_TIMEOUT when it passes.  The start of the reply must come by the
 * deadline plus a grace (the handle's timeout's symm_timeout_grace_ms, at
 * most CLI_REPLY_GRACE_MAX_MS: cli_grace_end), which only runs out when the
 * server is stuck or gone; sending the request and reading a reply that
 * has begun get the whole grace (cli_transfer_end); so a call returns within its timeout plus the slack that
 * symmem.h states, whatever the server does.
 *
 * Broken handles.  After a socket-level timeout, a malformed reply or a
 * dropped connection, the handle is marked broken: a reply may still be in
 * flight, and reading it as the answer to a later request would be wrong,
 * so every later call fails with SYMM_ERR_PEER_LOST instead.  Request ids
 * are checked only as a sanity test of the stream, not to skip stale
 * replies.
 */
#ifndef SYMM_STORE_CLIENT_INT_H
#define SYMM_STORE_CLIENT_INT_H

#include <pthread.h>

#include "store_proto.h"

#define CLI_DEFAULT_TIMEOUT_MS 60000

struct symm_store {
  pthread_mutex_t lock;
  int fd;
  int rank;
  uint32_t comm; /* said in HELLO unless SYMM_STORE_NO_COMM */
  bool job_ranks;  /* said in HELLO: rank is the process's launcher rank */
  int timeout_ms;      /* used for negative timeouts and non-blocking ops */
  int server_rank;     /* the rank serving the store, for messages; -1: not a rank */
  int size;            /* ranks of the communicator (lost ranks are below it); 0: not said */
  uint32_t next_id;
  uint32_t reply_id;   /* id the next reply must carry */
  bool broken;         /* see the file comment */
  bool torn_request;   /* broken while sending: the server holds half a message */
  char addr[300];      /* for messages */
  symm_proto_buf_t req;
  uint8_t *reply;
  size_t reply_cap;
};

typedef enum { CLI_IO_OK, CLI_IO_TIMEOUT, CLI_IO_CLOSED, CLI_IO_ERROR } cli_io_t;

typedef struct cli_reply {
  symm_result_t status;
  int lost_rank;
  symm_proto_reader_t r; /* payload after status and lost rank */
} cli_reply_t;

/* ---------------------------------------------------- store_client_io.c */
cli_io_t cli_wait(int fd, short events, uint64_t deadline);
cli_io_t cli_send_all(int fd, const uint8_t *p, size_t len, uint64_t deadline);
cli_io_t cli_recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline);

/* -------------------------------------------------- store_client_call.c */
symm_result_t cli_io_error(symm_store_t *s, cli_io_t io, const char *what, int timeout_ms);
symm_result_t cli_bad_reply(symm_store_t *s, const char *what, const char *why);
size_t cli_begin(symm_store_t *s, uint8_t op);
uint64_t cli_grace_end(uint64_t deadline, int timeout_ms);
uint64_t cli_transfer_end(const symm_store_t *s, uint64_t deadline);
symm_result_t cli_read_reply(symm_store_t *s, uint8_t op, const char *what, uint64_t deadline,
                             int timeout_ms, cli_reply_t *rep);
symm_result_t cli_call(symm_store_t *s, uint8_t op, size_t at, uint64_t deadline,
                       int timeout_ms, const char *what, cli_reply_t *rep);
symm_result_t cli_call_plain(symm_store_t *s, uint8_t op, size_t at, const char *what,
                             cli_reply_t *rep);
symm_result_t cli_status_error(const cli_reply_t *rep, const char *what, const char *key,
                               size_t nkeys, int timeout_ms, const char *detail);
void cli_lock(symm_store_t *s);
void cli_trim(symm_store_t *s);
void cli_unlock(symm_store_t *s);
int cli_resolve_timeout(const symm_store_t *s, int timeout_ms);
void cli_put_keys(symm_store_t *s, const char *const *keys, size_t n);
symm_result_t cli_keys_call(symm_store_t *store, uint8_t op, const char *what,
                            const char *const *keys, size_t n, int t, cli_reply_t *rep);

/* ------------------------------------------------- store_client_check.c */
symm_result_t cli_check_key(const char *what, const char *key);
symm_result_t cli_check_user_key(const char *what, const char *key);
symm_result_t cli_check_keys(const char *what, const char *const *keys, size_t n);
symm_result_t cli_check_value(const char *what, const void *v, size_t len);

/* ------------------------------------------------- store_client_hello.c */
symm_result_t cli_hello(symm_store_t *s, const char *token, uint64_t deadline, int timeout_ms);

/* ------------------------------------------------ store_client_handle.c */
/* Closes the socket and frees the handle; destroy_lock false leaves the
 * mutex alone (symm_store_abandon). */
void cli_free(symm_store_t *s, bool destroy_lock);

#endif /* SYMM_STORE_CLIENT_INT_H */
