/* Small helpers: hashing, clocks, randomness. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* FNV-1a, 64-bit, seeded; good enough for signatures of small vectors. */
uint64_t symm_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t symm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
