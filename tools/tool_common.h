/* Small helpers shared by the command-line tools. */
#ifndef SYMM_TOOL_COMMON_H
#define SYMM_TOOL_COMMON_H

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

/* Parses a whole decimal integer in [lo, hi]. */
static inline bool tool_parse_int(const char *text, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

/* "TOOL: message", a blank line, the usage text; returns `code`. */
static inline int tool_usage_error(const char *tool, void (*usage)(FILE *), int code,
                                   const char *fmt, va_list ap) {
  fprintf(stderr, "%s: ", tool);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n\n");
  usage(stderr);
  return code;
}

/* Parses a size: digits, then K, M, G or T (powers of 1024) with an
 * optional "i" and "B" ("64M", "1GiB", "4096"); -1 if it is not one. */
static inline int64_t tool_parse_size(const char *text) {
  if (!text || !*text) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || v < 0) return -1;
  while (isspace((unsigned char)*end)) end++;
  int64_t mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mult = 1LL << 10; end++; break;
    case 'M': mult = 1LL << 20; end++; break;
    case 'G': mult = 1LL << 30; end++; break;
    case 'T': mult = 1LL << 40; end++; break;
    default: return -1;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end || v > INT64_MAX / mult) return -1;
  return (int64_t)v * mult;
}

/* Monotonic clock in nanoseconds. */
static inline uint64_t tool_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* nbytes random bytes as 2 * nbytes hex digits and a NUL in out; false
 * when the kernel gives no random bytes. */
static inline bool tool_random_hex(char *out, size_t nbytes) {
  static const char digits[] = "0123456789abcdef";
  unsigned char raw[64];
  if (nbytes > sizeof raw) return false;
  for (size_t got = 0; got < nbytes;) {
    ssize_t n = getrandom(raw + got, nbytes - got, 0);
    if (n < 0 && errno != EINTR) return false;
    if (n > 0) got += (size_t)n;
  }
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = digits[raw[i] >> 4];
    out[2 * i + 1] = digits[raw[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return true;
}

#endif
