/* CPU engine: cross-memory attach (process_vm_readv), how a rank reads a
 * peer's ordinary memory (malloc'd, a NumPy array) with one copy; when a
 * call does is cpu_coll.c's to say (its top comment).
 *
 * Whether it can is proved once per communicator, never assumed: every
 * rank publishes at init its pid and the address of a random nonce it
 * keeps (with the nonce), and reads every peer's nonce there at its first
 * call that could read a peer's memory (a read per peer: at hundreds of
 * ranks a cost that jobs which never make such a call should not pay at
 * init).
 * The kernel allows the read only where this process may ptrace the peer
 * (same user, Yama's ptrace_scope 0, no seccomp filter against the call).
 * The pid must be the one the core watches for this peer (this host, this
 * PID namespace), and the value read must be the nonce: a pid that names
 * another process here cannot pass.  Any failure leaves cross-memory
 * attach off on this rank, which says why at INFO and stages its calls
 * as before.  Nothing is loosened to make the read work (no
 * PR_SET_PTRACER). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "symm_util.h"

void cpu_cma_init(cpu_state_t *st, cpu_cma_card_t *card) {
  do symm_random_bytes(&st->cma_nonce, sizeof st->cma_nonce);
  while (!st->cma_nonce); /* 0 is what a zeroed page would hold */
  *card = (cpu_cma_card_t){(uint64_t)getpid(), (uint64_t)(uintptr_t)&st->cma_nonce,
                           st->cma_nonce};
}

#define PIECES_PER_CALL 1024 /* Linux's UIO_MAXIOV, the most iovecs a call takes */

/* n pieces of process pid, remote[i] into local[i], in system calls of
 * at most PIECES_PER_CALL pieces; 0 or errno.  A read that comes short
 * met a fault (the kernel stops there): EFAULT. */
static int read_pieces(int32_t pid, const struct iovec *local, const struct iovec *remote,
                       size_t n) {
  while (n) {
    const size_t k = n < PIECES_PER_CALL ? n : PIECES_PER_CALL;
    size_t want = 0;
    for (size_t i = 0; i < k; i++) want += local[i].iov_len;
    ssize_t got;
    do got = process_vm_readv(pid, local, k, remote, k, 0);
    while (got < 0 && errno == EINTR);
    if (got < 0) return errno;
    if ((size_t)got != want) return EFAULT;
    local += k;
    remote += k;
    n -= k;
  }
  return 0;
}

/* len bytes at addr in process pid into dst, whole; 0 or errno. */
static int read_whole(int32_t pid, void *dst, uint64_t addr, size_t len) {
  const struct iovec local = {dst, len}, remote = {(void *)(uintptr_t)addr, len};
  return read_pieces(pid, &local, &remote, 1);
}

/* The kernel copies as glibc's memcpy does, with `rep movsb`, and as
 * slowly where the destination lies 1-63 bytes past the source modulo the
 * page (cpu_memcpy.c): 512 KiB read at 1.5 GB/s at 8 to 24 bytes, 8.7
 * GB/s at 0, 32, 64 (docs/tuning.md).  Such a piece is read through a
 * bounce buffer half a page from the source, then copied where it goes. */
#define BOUNCE_BYTES ((size_t)256 << 10) /* a read a round: within the L2 */
/* A bounced piece costs a system call of its own where it splits a list
 * that one call would read: ~2 us, what the slow copy of a piece costs
 * beyond the fast one at about 8 KiB (4.1 us extra at 8 KiB, 1.1 at 2
 * KiB; docs/tuning.md).  Smaller pieces are read in place, slowly. */
#define BOUNCE_MIN_BYTES ((size_t)8 << 10)

/* One piece through st's bounce buffer (made at the first need, kept
 * until fini); without one, read straight (slowly, but read). */
static int read_bounced(cpu_state_t *st, int32_t pid, const struct iovec *local,
                        const struct iovec *remote) {
  if (!st->cma_bounce) st->cma_bounce = malloc(BOUNCE_BYTES + 4096);
  if (!st->cma_bounce) return read_pieces(pid, local, remote, 1);
  const uintptr_t from = (uintptr_t)remote->iov_base;
  char *tmp = cpu_bounce_in(st->cma_bounce, remote->iov_base);
  for (size_t done = 0; done < local->iov_len; done += BOUNCE_BYTES) {
    const size_t len = local->iov_len - done < BOUNCE_BYTES ? local->iov_len - done
                                                            : BOUNCE_BYTES;
    const struct iovec into = {tmp, len}, at = {(void *)(from + done), len};
    const int err = read_pieces(pid, &into, &at, 1);
    if (err) return err;
    cpu_memcpy((char *)local->iov_base + done, tmp, len);
  }
  return 0;
}

int cpu_cma_readv(symm_comm_t *comm, int peer, const struct iovec *local,
                  const struct iovec *remote, size_t n) {
  /* The probe proved that the pid the core watches is the peer's. */
  const int32_t pid = symm_comm_peer_pid(comm, peer);
  int err = 0;
  size_t start = 0; /* the pieces from here on read together, up to a bounced one */
  for (size_t i = 0; i < n && !err; i++) {
    if (local[i].iov_len < BOUNCE_MIN_BYTES ||
        !cpu_copy_slow_at(local[i].iov_base, remote[i].iov_base, local[i].iov_len))
      continue;
    err = read_pieces(pid, local + start, remote + start, i - start);
    if (!err) err = read_bounced(cpu_state(comm), pid, &local[i], &remote[i]);
    start = i + 1;
  }
  if (!err) err = read_pieces(pid, local + start, remote + start, n - start);
  /* Only a process still there was the one that published: a pid freed
   * by a death may already name another process (peer_watch.h). */
  if (!err && symm_process_gone(pid)) return ESRCH;
  return err;
}

int cpu_cma_read(symm_comm_t *comm, int peer, void *dst, uint64_t addr, size_t len) {
  const struct iovec local = {dst, len}, remote = {(void *)(uintptr_t)addr, len};
  return cpu_cma_readv(comm, peer, &local, &remote, 1);
}

static const char *read_failure(int err) {
  switch (err) {
    case EPERM: return "not permitted (Yama ptrace_scope 1 or more, a seccomp filter, or "
                       "another user)";
    case ENOSYS: return "process_vm_readv is not available (a seccomp filter, or the kernel)";
    case ESRCH: return "no process of that pid here (another PID namespace?)";
    case EFAULT: return "nothing there in the process of that pid (another PID namespace?)";
    default: return strerror(err);
  }
}

/* Whether this rank reads peer r's nonce where r's card says; else why.
 * The pid must be the one the core watches (symm_comm_peer_pid: this host,
 * this PID namespace), so that cpu_cma_read can tell that the process it
 * read is still r's. */
static bool probe_peer(symm_comm_t *comm, int r, const cpu_cma_card_t *card, char *why,
                       size_t cap) {
  if (!symm_comm_peer_same_host(comm, r)) {
    snprintf(why, cap, "rank %d runs on another host", r);
    return false;
  }
  const int32_t watched = symm_comm_peer_pid(comm, r);
  if (watched <= 0 || (uint64_t)watched != card->pid) {
    snprintf(why, cap, "rank %d's process (pid %llu) is not one this process watches (another "
             "PID namespace?)", r, (unsigned long long)card->pid);
    return false;
  }
  uint64_t seen = 0;
  const int err = read_whole(watched, &seen, card->nonce_addr, sizeof seen);
  if (!err && seen == card->nonce && card->nonce) return true;
  if (err == ESRCH && symm_process_gone(watched))
    snprintf(why, cap, "rank %d's process (pid %llu) is gone", r, (unsigned long long)card->pid);
  else if (err)
    snprintf(why, cap, "reading rank %d's memory (pid %llu): %s", r,
             (unsigned long long)card->pid, read_failure(err));
  else
    snprintf(why, cap, "pid %llu here is not rank %d's process (another PID namespace?)",
             (unsigned long long)card->pid, r);
  return false;
}

/* The group a call publishes when peers may read its send data with
 * cross-memory attach: the same on every rank, drawn from the
 * communicator's own names so that it is nobody's tensor's (a hash, as
 * those are), never 0. */
static uint64_t cma_group(const symm_comm_t *comm) {
  const char *prefix = symm_comm_key_prefix(comm), *nonce = symm_comm_name_nonce(comm);
  uint64_t h = symm_hash64("cpu-cma", 7, 0);
  if (prefix) h = symm_hash64(prefix, strlen(prefix), h);
  if (nonce) h = symm_hash64(nonce, strlen(nonce), h);
  return h ? h : 1;
}

void cpu_cma_startup(symm_comm_t *comm, cpu_cma_card_t *cards) {
  cpu_state_t *st = cpu_state(comm);
  st->cma_group = cma_group(comm);
  if (symm_comm_size(comm) < 2) {
    free(cards);
    return;
  }
  if (symm_settings()->SYMM_HOST_CMA.index == 1) {
    free(cards);
    SYMM_INFO(COLL, "CPU engine: cross-memory attach off: SYMM_HOST_CMA=off; calls from "
              "ordinary memory stage their data");
    return;
  }
  st->cma_cards = cards;
}

static void drop_cards(cpu_state_t *st) {
  free(st->cma_cards);
  st->cma_cards = NULL;
}

bool cpu_cma_ready(symm_comm_t *comm) {
  cpu_state_t *st = cpu_state(comm);
  if (!st->cma_cards) return st->cma;
  const int w = symm_comm_size(comm), me = symm_comm_rank(comm);
  char why[256] = "";
  for (int r = 0; r < w && !why[0]; r++)
    if (r != me) probe_peer(comm, r, &st->cma_cards[r], why, sizeof why);
  drop_cards(st);
  if (why[0]) {
    SYMM_INFO(COLL, "CPU engine: cross-memory attach off: %s; calls from ordinary memory "
              "stage their data", why);
    return false;
  }
  st->cma = true;
  SYMM_INFO(COLL, "CPU engine: cross-memory attach on: read %d peer%s memory with "
            "process_vm_readv", w - 1, w > 2 ? "s'" : "'s");
  return true;
}

void cpu_cma_fini(cpu_state_t *st) {
  drop_cards(st);
  free(st->cma_bounce);
  st->cma_bounce = NULL;
}
