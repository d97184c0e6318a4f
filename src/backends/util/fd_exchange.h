/*
 * File-descriptor exchange between the ranks of one host (SCM_RIGHTS over
 * abstract-namespace Unix sockets), used by the host backend (memfd) and the
 * native backend (CUDA VMM POSIX-fd handles).
 *
 * Each rank runs a small server thread listening on the abstract socket
 * "\0symmem-<job_id>.<tag>-<comm index>-<rank>", where tag is a keyed hash
 * (SipHash-2-4) of (job id, index, rank) under the communicator's random
 * name nonce (symm_comm_name_nonce; tag and dot absent for the tests' own
 * communicators, which have none).  The nonce reaches the ranks through
 * the bootstrap and appears in no name, so another user can neither bind
 * a communicator's names before it exists nor, reading the names bound so
 * far (/proc/net/unix), work out those of the ranks still to bind theirs.
 * A rank publishes the fds of its
 * allocations under their symm_mem_t id; peers fetch them by (rank, id) at
 * any time, without the owner taking part, so rendezvous needs no pairwise
 * ordering.  Connections from a process with another uid (SO_PEERCRED) are
 * refused and logged.  Requests are length-checked; a malformed one closes
 * that connection only.
 */
#ifndef SYMM_FD_EXCHANGE_H
#define SYMM_FD_EXCHANGE_H

#include <sys/socket.h>
#include <sys/un.h>

#include "symm_error.h"
#include "symm_util.h"

typedef struct symm_fdx symm_fdx_t;

/* Wire format, exposed for the protocol tests.  One SOCK_SEQPACKET message
 * each way, host byte order (both ends are on one host).  A reply with status
 * SYMM_FDX_OK carries exactly one fd (SCM_RIGHTS); other replies carry none.
 * A connection from another uid gets one SYMM_FDX_REFUSED reply (id 0) and is
 * closed without its requests being read. */
#define SYMM_FDX_MAGIC 0x73464458u /* "XDFs" in memory order */
enum { SYMM_FDX_OP_FETCH = 1 };
enum { SYMM_FDX_OK = 0, SYMM_FDX_NOT_FOUND = 1, SYMM_FDX_REFUSED = 2 };
typedef struct symm_fdx_request {
  uint32_t magic;
  uint32_t op;
  uint64_t id;
} symm_fdx_request_t;
typedef struct symm_fdx_reply {
  uint32_t magic;
  uint32_t status;
  uint64_t id; /* echoes the request's id */
} symm_fdx_reply_t;

/* The server's check of one received request (len bytes, recvmsg's flags):
 * NULL if it is a well-formed FETCH, else why not (the server then closes
 * the connection). */
const char *symm_fdx_check_request(const symm_fdx_request_t *req, ssize_t len, int flags);

/* What one recvmsg of a reply brought: the message and any fds attached. */
typedef struct symm_fdx_received {
  symm_fdx_reply_t rep;
  ssize_t len;
  int flags;
  int fds[4];
  int nfds;
} symm_fdx_received_t;
/* Waits until deadline_ns for one reply on sock and reads it, with the
 * fds attached, into *r (zeroed by the caller): SYMM_SUCCESS, or
 * SYMM_ERR_PEER_LOST with *broken set when the connection ended first,
 * SYMM_ERR_TIMEOUT, SYMM_ERR_SYSTEM. */
symm_result_t symm_fdx_recv_reply(int sock, int peer, uint64_t deadline_ns,
                                  symm_fdx_received_t *r, bool *broken);
/* The client's reading of a reply to the request for id from rank peer:
 * SYMM_SUCCESS with *fd the one fd attached (taken out of r: r->nfds is 0
 * then), SYMM_ERR_NOT_FOUND, SYMM_ERR_PERMISSION (refused) or
 * SYMM_ERR_PROTOCOL (anything else).  The fds left in r stay the caller's
 * to close. */
symm_result_t symm_fdx_check_reply(int peer, uint64_t id, symm_fdx_received_t *r, int *fd);

/* SipHash-2-4 of msg under key (the tags in the names), exposed for its
 * test vectors. */
uint64_t symm_fdx_keyed_hash(const uint8_t key[16], const void *msg, size_t len);

/* Checks an fd fetched from rank `peer` before it is mapped as that peer's
 * memory: a memfd (a regular file on disk is refused), sealed against
 * shrinking (F_SEAL_SHRINK: an owner that could cut it short would kill
 * this process with SIGBUS on its next access), and at least `bytes` long.
 * SYMM_SUCCESS, or SYMM_ERR_PROTOCOL naming the peer and what is wrong. */
symm_result_t symm_fdx_check_memfd(int fd, int peer, uint64_t bytes);

/* Fills *addr with the abstract address "symmem-<space>-<index>-<rank>"
 * and returns its length, or 0 if the name does not fit.  A keyed server's
 * space is the job id, a dot and the rank's tag. */
socklen_t symm_fdx_address(const char *space, int index, int rank,
                           struct sockaddr_un *addr);

/* Starts the server for comm's (job id, name nonce, index, rank); comm
 * must outlive the fdx (its fetches ask it about lost ranks).
 * SYMM_ERR_SYSTEM if the socket name is taken or cannot be bound. */
symm_result_t symm_fdx_start(const symm_comm_t *comm, symm_fdx_t **fdx);
/* Stops the server thread, closes every published fd and connection. */
void symm_fdx_stop(symm_fdx_t *fdx);
/* Publishes fd (dup'ed; the caller keeps its own) under id. */
symm_result_t symm_fdx_publish(symm_fdx_t *fdx, uint64_t id, int fd);
/* Withdraws id (closes the dup).  Unknown ids are ignored. */
void symm_fdx_unpublish(symm_fdx_t *fdx, uint64_t id);
/* Fetches the fd that rank `peer` published under id; *fd is a new fd the
 * caller owns.  SYMM_ERR_UNSUPPORTED at once for a peer that the
 * communicator knows to run on another host (the message names both
 * hosts), SYMM_ERR_NOT_FOUND (peer has no such id), SYMM_ERR_PEER_LOST
 * (peer's server gone, its process gone, or, while its server refuses
 * connections, a rank that the communicator's bootstrap knows lost
 * (symm_comm_lost_rank: the store's or launcher's marks, the callbacks'
 * lost_rank, a peer's note): the message names that rank),
 * SYMM_ERR_PERMISSION (refused), SYMM_ERR_TIMEOUT.
 * Thread-safe. */
symm_result_t symm_fdx_fetch(symm_fdx_t *fdx, int peer, uint64_t id, int *fd);
/* Number of fds currently published (for leak tests). */
size_t symm_fdx_published(const symm_fdx_t *fdx);

/* One message of len bytes on a Unix socket, with fd attached (SCM_RIGHTS)
 * when fd >= 0; flags as for sendmsg (MSG_NOSIGNAL is added), retried on
 * EINTR.  Returns what sendmsg returned. */
ssize_t symm_fdx_sendmsg(int sock, const void *buf, size_t len, int fd, int flags);

#endif
