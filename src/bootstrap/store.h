/*
 * The embedded TCP key-value store: server (run by rank 0 or symmem-run) and
 * client.  The public half of the client API (symm_store_set/get/add/
 * compare_set/wait/delete/check) is declared in symmem.h; this header adds
 * what the core, the tools and the tests need, and the policy of serving a
 * communicator's store.
 *
 * Protocol: length-checked binary messages over TCP (store_proto.h).  Every
 * connection starts with a handshake in which each side proves it holds
 * the job's token without sending it: HELLO carries a nonce, the client's
 * rank (-1 for tools) and, optionally, the index of its communicator; the
 * server answers with its nonce and proof, the client with AUTH and its
 * proof.  A client whose proof is wrong is answered SYMM_ERR_PERMISSION,
 * logged, and the connection closed; a server whose proof is wrong is
 * refused by the client (SYMM_ERR_PERMISSION).  A malformed message (bad magic, unknown opcode,
 * length over the limit, truncated body) closes that connection only.  A
 * connection that sends nothing is dropped after the handshake timeout.
 *
 * Lost ranks: when a connection that said HELLO with rank r >= 0 closes
 * without BYE, the server records rank r as lost; every pending and later
 * blocking request (GET, WAIT, MGET) that cannot complete then fails with
 * SYMM_ERR_PEER_LOST naming rank r, so survivors do not wait out the timeout.
 * A client process that is gone is also lost in the communicators numbered
 * as the job's that it never joined (store_server_proc.c).
 */
#ifndef SYMM_STORE_H
#define SYMM_STORE_H

#include "symm_bootstrap.h"
#include "symm_error.h"
#include "symm_settings.h"
#include "symm_util.h"

#define SYMM_STORE_MAX_KEY 255
#define SYMM_STORE_MAX_VALUE (16u << 20)
#define SYMM_STORE_MAX_KEYS 65536 /* keys in one WAIT / MGET / CHECK */

/* A connection that belongs to no communicator (tools, tests). */
#define SYMM_STORE_NO_COMM UINT32_MAX

/* ---------------------------------------------------------------- server */
/* symm_store_server_start, _port, _mark_lost and _stop are in symmem.h;
 * what the core and the tests use besides: */
/* Waits until no connection with a rank >= 0 remains open, or timeout_ms
 * passes (returns SYMM_ERR_TIMEOUT then).  Used by the serving rank so that
 * it does not stop the store under peers that are still finishing. */
symm_result_t symm_store_server_drain(symm_store_server_t *server,
                                      int timeout_ms);
/* The same for the rank connections whose HELLO named communicator comm
 * (symm_store_connect_comm); SYMM_STORE_NO_COMM: all, as above. */
symm_result_t symm_store_server_drain_comm(symm_store_server_t *server, uint32_t comm,
                                           int timeout_ms);
/* Rank connections open now, of any communicator.  0 for NULL.  For tests. */
int symm_store_server_ranks_open(symm_store_server_t *server);
/* Blocking requests (GET, WAIT, MGET) parked now, waiting for keys; 0 for
 * NULL.  For tests, which order events after a request is parked. */
int symm_store_server_parked(symm_store_server_t *server);
/* Waits until at least n requests are parked (SYMM_ERR_TIMEOUT after
 * timeout_ms).  For tests. */
symm_result_t symm_store_server_wait_parked(symm_store_server_t *server, int n, int timeout_ms);
/* Stops it as symm_store_server_stop does if no rank connection is open
 * but those of communicators up to index upto_comm (stragglers of ended
 * ones; SYMM_STORE_NO_COMM: none at all),
 * decided by the server thread between two requests, so that no HELLO is
 * accepted after the decision (clients whose HELLO was not answered
 * connect again: symm_store_connect).  true: stopped and freed (also for
 * NULL); false: serving on.  One owner calls it, not concurrently with
 * symm_store_server_stop. */
bool symm_store_server_stop_if_idle(symm_store_server_t *server, uint32_t upto_comm);

/* ------------------------------------------------------------ serving */
/* Which rank serves a communicator's store, and this process's part in
 * serving it (store_serving.c). */
/* Whether this rank serves its communicator's store: as store_server (the
 * config's) says when it is 0 or 1, else (negative) rank 0 unless
 * SYMM_STORE_EXTERNAL; always without an address (have_addr false): a lone
 * process serves itself on an ephemeral port. */
bool symm_store_serves(int store_server, int rank, bool have_addr);
/* The rank that serves the store as every rank can tell from its own
 * settings (rank itself when it serves, else rank 0 unless a launcher
 * does), for messages about a store that does not answer; -1: no rank. */
int symm_store_serving_rank(int store_server, bool serves, int rank);
/* The number of the next communicator this process makes on store
 * address addr: how many it made there before (0 for "", a lone process's
 * own store); every rank counts alike.  -1 if out of memory. */
int symm_store_next_comm_number(const char *addr);

typedef struct symm_store_serve_args {
  int port;          /* the address's port; 0: an ephemeral one (no address) */
  const char *token; /* the job's token ("" warns when size > 1) */
  int rank, size;    /* this rank, of a communicator of size ranks */
  uint32_t index;    /* the communicator's number (symm_store_next_comm_number) */
} symm_store_serve_args_t;
/* Serves the store of a communicator at addr (cap bytes; "": a lone
 * process's own store on loopback, whose address is then written there):
 * on SYMM_STORE_BIND:port, or loopback.  A store this process serves on the
 * same address and token already is shared (*shared true, one per process);
 * otherwise a new one is started, and shared while the process serves no
 * other on a fixed port.  *server is what symm_store_stop_serving takes.
 * Errors: those of symm_store_server_start, with the rank and address. */
symm_result_t symm_store_serve(const symm_store_serve_args_t *args, char *addr, size_t cap,
                               symm_store_server_t **server, bool *shared);
/* The serving rank's end of a communicator (number index): waits, within
 * the calling operation's deadline and slack (symm_op_limit: destroy's,
 * or what is left of a failed init's, so peers failing it too can read
 * their answers), until that communicator's ranks have closed their
 * connections, then stops the store, unless a shared one still serves
 * other communicators or ranks of a later one are connected. */
void symm_store_stop_serving(symm_store_server_t *server, bool shared, uint32_t index);

/* ---------------------------------------------------------------- client */
/* Connects to addr ("host:port", host a name or IPv4/IPv6 literal,
 * "[v6]:port" accepted), retrying refused connections until timeout_ms, then
 * says HELLO with token and rank; a connection that the server closes
 * before it answers HELLO (a store stopping while the next one on the same
 * address starts) is tried again within timeout_ms too.  Errors: SYMM_ERR_INVALID_ARG (bad addr),
 * SYMM_ERR_TIMEOUT (nobody listening in time), SYMM_ERR_PERMISSION (token
 * refused, or the server did not prove the token: not this job's store),
 * SYMM_ERR_PROTOCOL, SYMM_ERR_SYSTEM. */
symm_result_t symm_store_connect(const char *addr, const char *token, int rank,
                                 int timeout_ms, symm_store_t **store);
/* The same, saying in HELLO which communicator of the client's process
 * (its index) the connection belongs to: a server that serves several
 * communicators of the same job in turn drains them one by one
 * (symm_store_server_drain_comm). */
symm_result_t symm_store_connect_comm(const char *addr, const char *token, int rank,
                                      uint32_t comm, int timeout_ms, symm_store_t **store);
/* The same, saying in HELLO whether rank is this process's rank in the
 * job (job_ranks: the communicator numbers its ranks as the launcher
 * does, SYMM_RANK and its world size).  Where it is, the server takes a
 * process of the job that is gone (store_server_proc.c) for lost in every
 * such communicator of the job, also those it never joined. */
symm_result_t symm_store_connect_rank(const char *addr, const char *token, int rank,
                                      uint32_t comm, bool job_ranks, int timeout_ms,
                                      symm_store_t **store);
/* Says BYE (not lost) and closes.  NULL ok. */
void symm_store_close(symm_store_t *store);
/* The library's own keys, and the calls that write them. */
#include "symm_store_own.h"
/* Closes without BYE (the server then treats the rank as lost); for tests
 * and for fork()ed children. */
void symm_store_abandon(symm_store_t *store);
/* Default timeout used when a call passes a negative timeout, and the one
 * requests that do not wait are bounded by; calls return within their
 * timeout plus the slack of this one (symm_timeout_slack_ms). */
void symm_store_set_timeout(symm_store_t *store, int timeout_ms);
/* The rank that serves the store (-1: none, the default), named in the
 * messages of a store that stops answering. */
void symm_store_set_server_rank(symm_store_t *store, int rank);
/* The communicator's number of ranks (0: not said, the default): a reply
 * that names a lost rank outside [0, size) is refused as SYMM_ERR_PROTOCOL
 * (symm_store_lost_rank: -1), never passed on. */
void symm_store_set_size(symm_store_t *store, int size);

/* Waits (timeout as in symm_store_get) until all n keys exist, then returns
 * their values in one reply: values[i] is malloc'd (caller frees) with
 * lens[i] bytes.  On error nothing is allocated. */
symm_result_t symm_store_multi_get(symm_store_t *store, const char *const *keys,
                                   size_t n, void **values, size_t *lens,
                                   int timeout_ms);

/* One round trip for the bootstrap's all-gather: deletes del_key (if not
 * NULL; absent is fine), sets key to value, then waits for all n keys and
 * returns their values as symm_store_multi_get does.  absent (NULL, or n
 * bytes): on SYMM_ERR_TIMEOUT from the server, 1 for each key it still
 * lacked then (all 0 when it did not say). */
symm_result_t symm_store_exchange(symm_store_t *store, const char *del_key, const char *key,
                                  const void *value, size_t len, const char *const *keys,
                                  size_t n, void **values, size_t *lens, int timeout_ms,
                                  uint8_t *absent);

/* Parses "host:port" into host (cap bytes) and port. */
symm_result_t symm_store_parse_addr(const char *addr, char *host, size_t cap,
                                    int *port);

#endif /* SYMM_STORE_H */
