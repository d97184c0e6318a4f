/* Small helpers: hashing, clocks, randomness. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "symm_util.h"
#include "symm_peer_watch.h"

/* Seeded 64-bit hash, eight bytes per step (collectives hash their
 * arguments on every call), good enough for signatures and hash tables:
 * multiply-xorshift rounds, the length folded in, a final avalanche. */
uint64_t symm_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = (seed ^ 0xcbf29ce484222325ull) + (uint64_t)len * 0x9e3779b97f4a7c15ull, w;
  for (; len >= 8; p += 8, len -= 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  if (len) {
    w = 0;
    memcpy(&w, p, len);
    h = (h ^ w ^ ((uint64_t)len << 56)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

uint64_t symm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int symm_ms_until(uint64_t deadline_ns) {
  uint64_t now = symm_now_ns();
  if (now >= deadline_ns) return 0;
  uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

int symm_poll_until(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    /* Checked before every poll: poll may return early, and a deadline that
     * has passed gives a 0 ms poll, which still reports a ready fd. */
    int ms = symm_ms_until(deadline_ns);
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, ms);
    if (rc > 0) return 1;
    if (rc == 0 && ms == 0) return 0;
    if (rc < 0 && errno != EINTR) return -1;
  }
}

static _Thread_local uint64_t op_deadline_ns, op_grace_ns;
static _Thread_local uint64_t op_start_ns; /* when the outermost operation began */

uint64_t symm_op_deadline_begin(int timeout_ms) {
  uint64_t previous = op_deadline_ns;
  op_deadline_ns = symm_deadline_after(timeout_ms); /* an enclosing op's, if earlier */
  if (!previous) {
    op_grace_ns = (uint64_t)symm_timeout_grace_ms(timeout_ms) * 1000000ull;
    op_start_ns = op_deadline_ns - (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  }
  return previous;
}

void symm_op_deadline_end(uint64_t previous) {
  op_deadline_ns = previous;
  if (!previous) op_grace_ns = 0;
}

symm_result_t symm_file_size_check(size_t bytes, const char *what) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
      (uint64_t)bytes <= (uint64_t)rl.rlim_cur)
    return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_NO_MEMORY, "%s: %zu bytes exceed this process's file size limit "
                    "of %llu bytes (RLIMIT_FSIZE, ulimit -f), which memfds count against", what,
                    bytes, (unsigned long long)rl.rlim_cur);
}

int symm_timeout_slack_ms(int timeout_ms) {
  return timeout_ms / 10 > 250 ? timeout_ms / 10 : 250;
}

int symm_timeout_grace_ms(int timeout_ms) {
  const int slack = symm_timeout_slack_ms(timeout_ms);
  return slack - slack / 10;
}

uint64_t symm_op_limit(uint64_t end_ns) {
  if (!op_deadline_ns) return end_ns;
  const uint64_t limit = op_deadline_ns + op_grace_ns;
  return end_ns < limit ? end_ns : limit;
}

uint64_t symm_deadline_after(int timeout_ms) {
  uint64_t d = symm_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  return op_deadline_ns && op_deadline_ns < d ? op_deadline_ns : d;
}

uint64_t symm_deadline_before_agreeing(int timeout_ms) {
  const uint64_t d = symm_deadline_after(timeout_ms);
  if (!op_deadline_ns || d < op_deadline_ns) return d;
  /* A tenth of the operation's timeout (at most 1 s) for the agreement. */
  uint64_t reserve = op_deadline_ns > op_start_ns ? (op_deadline_ns - op_start_ns) / 10 : 0;
  if (reserve > 1000000000ull) reserve = 1000000000ull;
  const uint64_t now = symm_now_ns();
  return op_deadline_ns - reserve > now ? op_deadline_ns - reserve : now;
}

void symm_hex(char *out, const void *bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void symm_random_hex(char *out, size_t nbytes) {
  unsigned char raw[64];
  if (nbytes > sizeof raw) nbytes = sizeof raw;
  symm_random_bytes(raw, nbytes);
  symm_hex(out, raw, nbytes);
}

void symm_random_bytes(void *buf, size_t len) {
  unsigned char *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      /* No entropy source: fall back to clock + pid mixing (never in practice). */
      uint64_t h = symm_hash64(&len, sizeof len, symm_now_ns() ^ (uint64_t)getpid());
      size_t k = len < sizeof h ? len : sizeof h;
      memcpy(p, &h, k);
      p += k;
      len -= k;
      continue;
    }
    p += n;
    len -= (size_t)n;
  }
}

/* A rank's process is gone, or a zombie nobody reaped yet. */
char symm_process_state(int32_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *paren = strrchr(buf, ')'); /* the state follows "(comm) " */
  return paren && paren[1] == ' ' ? paren[2] : 0;
}

bool symm_process_gone(int32_t pid) {
  const int watched = symm_peer_watch_gone(pid); /* a pidfd, where init opened one */
  if (watched >= 0) return watched;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  return symm_process_state(pid) == 'Z';
}

int symm_first_gone(const int32_t *pids, int n, int self) {
  for (int r = 0; pids && r < n; r++)
    if (r != self && pids[r] > 0 && symm_process_gone(pids[r])) return r;
  return -1;
}

bool symm_pid_namespace(uint64_t *ino, uint64_t *dev) {
  struct stat st;
  *ino = *dev = 0;
  if (stat("/proc/self/ns/pid", &st) != 0 || st.st_ino == 0) return false;
  *ino = (uint64_t)st.st_ino;
  *dev = (uint64_t)st.st_dev;
  return true;
}
