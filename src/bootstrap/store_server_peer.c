/* The user of a store client's socket, where this host can tell: a
 * connection over loopback ends in a socket of this network namespace,
 * listed with its owner's uid in /proc/net/tcp (IPv4) or /proc/net/tcp6.
 * The server uses it to tell a rank of this job that presented a wrong
 * token (its user's: the job is one user's) from another user's process,
 * whose claims about ranks it must not pass on to the job's ranks. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "store_server_int.h"

/* An address as /proc/net/tcp{,6} prints it: its 32-bit words in memory
 * order, each printed as a host-order hex number. */
typedef struct {
  uint32_t word[4];
  int nwords; /* 1: IPv4, 4: IPv6 */
  unsigned port;
} srv_sock_addr_t;

static bool srv_addr_of(const struct sockaddr_storage *ss, srv_sock_addr_t *a) {
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
    memcpy(&a->word[0], &in->sin_addr, 4);
    a->nwords = 1;
    a->port = ntohs(in->sin_port);
    return true;
  }
  if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    memcpy(a->word, &in6->sin6_addr, 16);
    a->nwords = 4;
    a->port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

static bool srv_addr_loopback(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  if (ss->ss_family != AF_INET6) return false;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(a)) return true;
  return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
}

/* Parses "HEX:PORT" of nwords words at *p, moving *p past it. */
static bool srv_parse_addr(const char **p, int nwords, srv_sock_addr_t *a) {
  for (int i = 0; i < nwords; i++) {
    unsigned w;
    int used = 0;
    if (sscanf(*p, "%8x%n", &w, &used) != 1 || used != 8) return false;
    a->word[i] = w;
    *p += used;
  }
  int used = 0;
  if (sscanf(*p, ":%x%n", &a->port, &used) != 1) return false;
  *p += used;
  a->nwords = nwords;
  return true;
}

static bool srv_addr_equal(const srv_sock_addr_t *x, const srv_sock_addr_t *y) {
  return x->nwords == y->nwords && x->port == y->port &&
         memcmp(x->word, y->word, sizeof x->word[0] * (size_t)x->nwords) == 0;
}

/* The uid of the socket listed with local address `local` and remote
 * address `remote` in one of /proc/net/tcp{,6}. */
static bool srv_find_socket_uid(const char *path, const srv_sock_addr_t *local,
                                const srv_sock_addr_t *remote, uid_t *uid) {
  FILE *f = fopen(path, "re");
  if (!f) return false;
  char line[512];
  bool found = false;
  if (!fgets(line, sizeof line, f)) line[0] = 0; /* the heading */
  while (!found && fgets(line, sizeof line, f)) {
    const char *p = strchr(line, ':');
    srv_sock_addr_t l, r;
    unsigned u;
    if (!p) continue;
    p++;
    while (*p == ' ') p++;
    if (!srv_parse_addr(&p, local->nwords, &l) || *p++ != ' ' ||
        !srv_parse_addr(&p, local->nwords, &r))
      continue;
    /* then: state, tx:rx queues, timer:when, retransmits, uid */
    if (sscanf(p, " %*x %*x:%*x %*x:%*x %*x %u", &u) != 1) continue;
    if (srv_addr_equal(&l, local) && srv_addr_equal(&r, remote)) {
      *uid = (uid_t)u;
      found = true;
    }
  }
  fclose(f);
  return found;
}

bool srv_peer_uid(int fd, uid_t *uid) {
  struct sockaddr_storage self, peer;
  socklen_t sl = sizeof self, pl = sizeof peer;
  if (getsockname(fd, (struct sockaddr *)&self, &sl) != 0 ||
      getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || !srv_addr_loopback(&peer))
    return false;
  srv_sock_addr_t mine, theirs;
  if (!srv_addr_of(&self, &mine) || !srv_addr_of(&peer, &theirs)) return false;
  /* The client's socket: its local address is our peer, its remote ours. */
  return srv_find_socket_uid(peer.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6",
                             &theirs, &mine, uid);
}
