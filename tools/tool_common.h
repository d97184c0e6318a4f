/* Small helpers shared by the command-line tools. */
#ifndef SYMM_TOOL_COMMON_H
#define SYMM_TOOL_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
