/*
 * The store server's private header, shared by its files:
 *   store_server.c        the thread's poll() loop, start, stop, drain
 *   store_server_conn.c   connections: input, dispatch, accept, the
 *                         handshake (HELLO, AUTH) that proves the token
 *   store_server_ops.c    the requests that write the key table
 *   store_server_proc.c   the clients' processes, and the losses of those
 *                         gone in communicators they never joined
 *   store_server_park.c   parked (blocking) requests and lost ranks
 *   store_server_table.c  the key table
 *   store_server_reply.c  replies into a connection's output
 * in that order of calls: each calls only those below it (store_server.c
 * calls any), so that no two call each other.
 *
 * The server is one thread running a poll() loop over non-blocking
 * sockets.  Each connection has its own input and output buffer, so a slow
 * or stuck peer never blocks the others.  Blocking requests (GET, WAIT,
 * MGET) park on their connection with a deadline and are answered when a
 * SET/ADD/CAS makes them satisfiable, when the deadline passes (TIMEOUT) or
 * when a rank is lost (PEER_LOST).  The wire format is in store_proto.h.
 *
 * Only the server thread touches connections and keys.  Other threads talk
 * to it through `lock` (stop flag, queue of ranks to mark lost, count of
 * open rank connections for drain) and the wake pipe.
 */
#ifndef SYMM_STORE_SERVER_INT_H
#define SYMM_STORE_SERVER_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "store_proto.h"

/* Input bytes buffered ahead of the message being served; a peer that
 * pipelines more is held back by TCP flow control instead. */
#define SRV_IN_CHUNK (64u << 10)
/* A connection whose unsent output exceeds this gets no new requests served
 * until it reads; its output is thus bounded by one reply plus this. */
#define SRV_OUT_HIGH_WATER (256u << 10)
/* Buffers grown past this for one big message are freed once empty. */
#define SRV_BUF_KEEP (1u << 20)
/* How long a refused connection gets to read its PERMISSION reply. */
#define SRV_CLOSE_LINGER_NS (1000ull * 1000000ull)
/* Pause of accept() after EMFILE/ENFILE, so the loop does not spin. */
#define SRV_ACCEPT_PAUSE_NS (100ull * 1000000ull)
#define SRV_INITIAL_BUCKETS 1024u
/* Connections that have not presented the token yet, at most, so that
 * anybody who can reach the port but lacks the token cannot use up this
 * process's fds (each would otherwise hold one until its handshake
 * deadline).  At the limit the server accepts more only once the oldest of
 * them has had SRV_UNAUTHED_GRACE_NS since it connected (a rank sends its
 * HELLO at once), and closes that one when the new one has no HELLO in.
 * Ranks that connect together thus wait in the kernel's backlog instead of
 * being closed unread; connections that sat in the backlog past their
 * grace without a word are closed as fast as they are accepted, so a rank
 * behind a flood waits about one grace, not one per SRV_MAX_UNAUTHED. */
#define SRV_MAX_UNAUTHED 64
#define SRV_UNAUTHED_GRACE_NS (200ull * 1000000ull)
/* Refused connections (wrong token, malformed or silent before HELLO) are
 * logged one by one up to this many in a window, then counted: anybody who
 * can reach the port can make any number of them. */
#define SRV_REFUSALS_LOGGED 5
#define SRV_REFUSALS_WINDOW_NS (10000ull * 1000000ull)
/* How often, while a request is parked, the pids of the clients' processes
 * on this host are looked at (store_server_proc.c). */
#define SRV_PROC_LOOK_NS (50ull * 1000000ull)
/* The communicator of a loss recorded for a process that is gone: every
 * communicator numbered as the job's (SYMM_HELLO_JOB_RANKS) that it did
 * not join.  Communicator indices never come near it. */
#define SRV_JOB_COMM (SYMM_STORE_NO_COMM - 1)

typedef struct srv_proc srv_proc_t;

/* HELLO's process fields (store_proto.h); pid 0: none said. */
typedef struct srv_hello_process {
  int32_t pid;
  uint64_t host_hash, ns_ino, ns_dev;
  uint8_t flags;
} srv_hello_process_t;
/* Connections accepted per pass of the loop, at most (srv_accept). */
#define SRV_ACCEPT_BATCH 256

typedef struct srv_entry {
  struct srv_entry *next;
  uint64_t hash;
  uint8_t *value; /* NULL when value_len == 0 */
  uint32_t value_len;
  uint16_t key_len;
  char key[];
} srv_entry_t;

typedef struct srv_table {
  srv_entry_t **buckets;
  size_t nbuckets; /* power of two */
  size_t count;
  uint64_t seed;
} srv_table_t;

typedef struct srv_keyref {
  const char *key; /* points into srv_pending_t.body */
  uint16_t len;
  uint64_t hash;
} srv_keyref_t;

/* A parked GET / WAIT / MGET.  keys[0..next_missing) are known present;
 * only a write to keys[next_missing] can move it forward. */
typedef struct srv_pending {
  uint8_t op;
  uint32_t id;
  uint64_t deadline_ns;
  uint32_t nkeys, next_missing;
  srv_keyref_t *keys;
  uint8_t *body; /* private copy of the request body the keys point into */
} srv_pending_t;

typedef struct srv_conn {
  int fd;
  char peer[80];       /* "addr:port" for log lines */
  int rank;            /* from HELLO once AUTH proved the token; -1 for tools and before */
  uint32_t comm;       /* the same: the client's communicator, or SYMM_STORE_NO_COMM */
  bool comm_counted;   /* counted in its communicator's open connections */
  bool job_ranks;      /* from HELLO: its communicator numbers ranks as the job does */
  srv_proc_t *proc;    /* its process, NULL when not followed */
  bool challenged;     /* HELLO answered: its AUTH is due */
  bool authed;         /* AUTH proved the token */
  bool auth_refused;   /* AUTH came with a wrong proof */
  bool peer_closed;    /* the client closed it (not the server) */
  uint8_t expect_proof[SYMM_PROTO_PROOF]; /* the client's, once challenged */
  int32_t hello_rank;  /* what HELLO said, taken once AUTH proves the token */
  uint32_t hello_comm;
  srv_hello_process_t hello_proc;
  bool said_bye;
  bool closing;        /* flush output, then close; read nothing more */
  bool dead;           /* closed; removed from the array after the poll pass */
  uint64_t deadline_ns;/* handshake or closing linger; 0 = none */
  uint64_t connected_ns; /* when the peer connected (before accept: srv_connected_ns) */
  /* Connections that have not proved the token, in the order accepted
   * (srv_unauthed). */
  struct srv_conn *unauthed_prev, *unauthed_next;
  bool unauthed_listed;
  uint8_t *in;
  size_t in_start, in_len, in_cap;
  symm_proto_buf_t out;
  size_t out_start;
  srv_pending_t *pending;
} srv_conn_t;

struct symm_store_server {
  int listen_fd;
  int wake_rd, wake_wr;
  int port;
  char *token;
  size_t token_len;
  bool fixed_nonce; /* every challenge's nonce all zeros: for the fuzzer only */
  uint64_t handshake_ns;
  pthread_t thread;
  bool thread_started;

  /* Owned by the server thread. */
  srv_conn_t **conns;
  size_t nconns, conns_cap;
  struct pollfd *pfds;
  size_t pfds_cap;
  srv_table_t table;
  struct srv_lost { /* lost ranks, oldest first, each of its communicator */
    uint32_t comm;   /* SYMM_STORE_NO_COMM: of every communicator */
    int rank;
    const srv_proc_t *proc; /* comm SRV_JOB_COMM: the process that is gone */
  } *lost;
  size_t nlost, lost_cap;
  size_t npending;
  uint64_t accept_paused_until;
  uint64_t unauthed_wait_until; /* at SRV_MAX_UNAUTHED: when the oldest may go */
  bool unauthed_warned; /* the warning for closing one to make room is given once */
  srv_conn_t *unauthed_head, *unauthed_tail; /* connections not authed yet */
  size_t nunauthed;
  struct srv_refusals { /* srv_refusal_logged */
    uint64_t window_start;
    unsigned logged;     /* logged one by one in this window */
    unsigned long quiet; /* counted only */
  } refusals;
  /* What the server has served (symm_store_stats_t): written by the
   * thread, read by any (symm_store_server_stats). */
  _Atomic uint64_t n_connections, n_requests, n_request_bytes, n_reply_bytes;
  srv_proc_t **procs;   /* the clients' processes (store_server_proc.c) */
  size_t nprocs, procs_cap;
  uint64_t host_hash, ns_ino, ns_dev; /* this process's, to tell whose pid it can watch */
  uint64_t next_proc_look;

  /* Shared with other threads, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t cond; /* signalled when ranked_open or parked changes, or on stop */
  bool stop;
  /* symm_store_server_stop_if_idle asks the thread (IDLE_ASKED), which
   * answers IDLE_STOP or IDLE_SERVE, not counting the connections of
   * communicators up to idle_upto. */
  enum { IDLE_NONE, IDLE_ASKED, IDLE_STOP, IDLE_SERVE } idle;
  uint32_t idle_upto;
  int *lost_queue;
  size_t nqueue, queue_cap;
  /* Processes their launcher is stopping (symm_store_server_expect_gone):
   * their losses are recorded as any, but not warned about. */
  int *expected_gone;
  size_t nexpected, expected_cap;
  int ranked_open;
  size_t parked; /* requests parked now (npending), for symm_store_server_wait_parked */
  /* Open rank connections per communicator (those whose HELLO named one),
   * for symm_store_server_drain_comm. */
  struct srv_comm_open {
    uint32_t comm;
    int open;
  } *comm_open;
  size_t ncomm_open, comm_open_cap;
};

/* ------------------------------------------------- store_server_reply.c */
size_t srv_reply_begin(srv_conn_t *c, uint8_t op, uint32_t id, symm_result_t status, int lost_rank);
void srv_reply_end(srv_conn_t *c, size_t at);
void srv_reply_status(srv_conn_t *c, uint8_t op, uint32_t id, symm_result_t status, int lost_rank);
/* The server's counters as they are now; STATS's reply of them. */
void srv_stats_read(const symm_store_server_t *s, symm_store_stats_t *out);
void srv_do_stats(symm_store_server_t *s, srv_conn_t *c, uint32_t id);

/* ------------------------------------------------- store_server_table.c */
uint64_t srv_hash(const srv_table_t *t, const char *key, size_t len);
int srv_table_init(srv_table_t *t);
void srv_table_free(srv_table_t *t);
srv_entry_t *srv_table_find(srv_table_t *t, const char *key, uint16_t len, uint64_t hash);
symm_result_t srv_table_set(srv_table_t *t, const char *key, uint16_t len, uint64_t hash,
                            const uint8_t *value, uint32_t vlen);
bool srv_table_remove(srv_table_t *t, const char *key, uint16_t len, uint64_t hash);

/* --------------------------------------------------- store_server_ops.c */
/* A malformed request leaves r->err set; the dispatcher then closes. */
void srv_do_set(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r);
void srv_do_add(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r);
void srv_do_cas(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r);
void srv_do_del(symm_store_server_t *s, srv_conn_t *c, uint32_t id, symm_proto_reader_t *r);

/* -------------------------------------------------- store_server_conn.c */
int srv_open_of(const symm_store_server_t *s, uint32_t comm);
void srv_conn_close(symm_store_server_t *s, srv_conn_t *c, bool stopping);
void srv_conn_free(srv_conn_t *c);
void srv_conn_reject(symm_store_server_t *s, srv_conn_t *c, const char *why);
void srv_flush(symm_store_server_t *s, srv_conn_t *c);
bool srv_wants_input(symm_store_server_t *s, srv_conn_t *c);
bool srv_ready(symm_store_server_t *s, srv_conn_t *c, symm_proto_header_t *h, long *size);
void srv_process(symm_store_server_t *s, srv_conn_t *c);
void srv_read(symm_store_server_t *s, srv_conn_t *c);
bool srv_accept_room(symm_store_server_t *s, uint64_t now);
void srv_accept(symm_store_server_t *s);
/* Whether a refused connection may be logged on its own now (the first
 * SRV_REFUSALS_LOGGED of a window of SRV_REFUSALS_WINDOW_NS); the others
 * are counted, and srv_refusals_summary says how many once the window is
 * over (or the server stops).  srv_refusals_next: when it will be. */
bool srv_refusal_logged(symm_store_server_t *s, uint64_t now);
void srv_refusals_summary(symm_store_server_t *s, uint64_t now, bool stopping);
uint64_t srv_refusals_next(const symm_store_server_t *s);

/* -------------------------------------------------- store_server_park.c */
void srv_clear_lost(symm_store_server_t *s, const srv_conn_t *c);
void srv_mark_lost(symm_store_server_t *s, uint32_t comm, int rank, int32_t pid,
                   const char *why);

void srv_pending_free(symm_store_server_t *s, srv_conn_t *c);
void srv_wake(symm_store_server_t *s, const char *key, uint16_t len, uint64_t hash);
void srv_rescan_pending(symm_store_server_t *s, const char *key, uint16_t len, uint64_t hash);
void srv_expire_pending(symm_store_server_t *s, uint64_t now);
void srv_do_keys_op(symm_store_server_t *s, srv_conn_t *c, uint8_t op,
                    uint32_t id, const uint8_t *body, uint32_t body_len,
                    symm_proto_reader_t *r);
void srv_do_get(symm_store_server_t *s, srv_conn_t *c, uint32_t id,
                const uint8_t *body, uint32_t body_len,
                symm_proto_reader_t *r);

/* Whether the launcher said that process pid is being stopped. */
bool srv_expected_gone(symm_store_server_t *s, int32_t pid);
/* Records the process p (pid), gone, as lost under rank (its job rank) in
 * the communicators numbered as the job's that it did not join. */
void srv_mark_process_lost(symm_store_server_t *s, const srv_proc_t *p, int32_t pid, int rank,
                           const char *why);

/* -------------------------------------------------- store_server_proc.c */
/* This process's host and PID namespace, at start. */
void srv_proc_self(symm_store_server_t *s);
/* Reads HELLO's optional process fields after the communicator. */
void srv_read_process(symm_proto_reader_t *r, srv_hello_process_t *p);
/* After a valid HELLO of a rank: follows its process. */
void srv_proc_join(symm_store_server_t *s, srv_conn_t *c, const srv_hello_process_t *h);
/* c closes (bye: it said BYE): its process may be gone. */
void srv_proc_left(symm_store_server_t *s, srv_conn_t *c, bool bye, bool stopping);
/* A client's process (store_server_proc.c follows them). */
struct srv_proc {
  int32_t pid;          /* 0: unknown */
  uint64_t host_hash, ns_ino, ns_dev;
  int job_rank;         /* its rank in communicators numbered as the job's; -1 */
  int open;             /* its open rank connections */
  bool abandoned;       /* one of them closed without BYE */
  bool gone;
  uint32_t *comms;      /* communicators it said HELLO in */
  size_t ncomms, comms_cap;
};
/* Whether p said HELLO in communicator comm. */
static inline bool srv_proc_member(const srv_proc_t *p, uint32_t comm) {
  for (size_t i = 0; i < p->ncomms; i++)
    if (p->comms[i] == comm) return true;
  return false;
}
/* While requests are parked: looks whether the processes on this host are
 * still there, every SRV_PROC_LOOK_NS. */
void srv_proc_look(symm_store_server_t *s, uint64_t now);
/* When srv_proc_look has something to do next; UINT64_MAX: nothing. */
uint64_t srv_proc_next_look(const symm_store_server_t *s);
void srv_procs_free(symm_store_server_t *s);

/* ------------------------------------------------------- store_server.c */
void srv_remove_dead(symm_store_server_t *s);
/* A server with its key table and token but no socket and no thread (what
 * symm_store_server_start builds on; the fuzzer feeds its connections
 * directly); NULL without memory.  srv_free frees one, started or not,
 * once its thread (if any) has ended. */
symm_store_server_t *srv_new(const char *token);
void srv_free(symm_store_server_t *s);

#endif /* SYMM_STORE_SERVER_INT_H */
