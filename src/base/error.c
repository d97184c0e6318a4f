/* Result codes, their names, the per-thread detailed last error, and the
 * log lines of a failure (symm_error.h says who logs what). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "symm_util.h"

#define SYMM_ERROR_MAX 1024
static _Thread_local char last_error[SYMM_ERROR_MAX];

int symm_version(void) { return SYMM_VERSION_CODE; }

/* Every result code: enumerator suffix, what symm_strerror says. */
#define SYMM_RESULTS(X)                               \
  X(SUCCESS, "success")                               \
  X(ERR_INVALID_ARG, "invalid argument")              \
  X(ERR_NO_MEMORY, "out of memory")                   \
  X(ERR_UNSUPPORTED, "unsupported")                   \
  X(ERR_MISMATCH, "mismatch across ranks")            \
  X(ERR_TIMEOUT, "timeout")                           \
  X(ERR_PEER_LOST, "peer lost")                       \
  X(ERR_SYSTEM, "system call failed")                 \
  X(ERR_BACKEND, "backend library failed")            \
  X(ERR_NOT_FOUND, "not found")                       \
  X(ERR_STATE, "invalid state")                       \
  X(ERR_PERMISSION, "permission denied")              \
  X(ERR_PROTOCOL, "protocol error")                   \
  X(ERR_INTERNAL, "internal error")                   \
  X(ERR_BACKEND_UNAVAILABLE, "backend unavailable")

const char *symm_strerror(symm_result_t result) {
  switch (result) {
#define X(name, text) \
  case SYMM_##name: return text;
    SYMM_RESULTS(X)
#undef X
  }
  return "unknown error";
}

const char *symm_result_name(symm_result_t result) {
  switch (result) {
#define X(name, text) \
  case SYMM_##name: return "SYMM_" #name;
    SYMM_RESULTS(X)
#undef X
  }
  return NULL;
}

const char *symm_last_error(void) { return last_error; }

void symm_error_clear(void) { last_error[0] = 0; }

void symm_error_restore(const char *saved) {
  if (saved != last_error) snprintf(last_error, sizeof last_error, "%s", saved ? saved : "");
}

/* How log lines name a code: the raise ("error CODE: ...") and the trail
 * ("-> CODE"); a value outside the enum prints its number. */
static const char *code_text(symm_result_t code, char *buf, size_t cap) {
  const char *name = symm_result_name(code);
  if (name) return name;
  snprintf(buf, cap, "result %d", (int)code);
  return buf;
}

static symm_result_t record(const char *file, int line, unsigned subsys, symm_result_t code,
                            const char *fmt, va_list ap, const char *suffix) {
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  if (suffix && n >= 0 && (size_t)n < sizeof last_error)
    snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", suffix);
  char buf[32];
  /* An internal error is a bug: shown whatever subsystems are selected. */
  if (code == SYMM_ERR_INTERNAL)
    symm_log(SYMM_LOG_WARN, SYMM_SUBSYS_ALL, file, line, "error %s: %s",
             code_text(code, buf, sizeof buf), last_error);
  else if (symm_log_level() >= SYMM_LOG_INFO)
    symm_log(SYMM_LOG_INFO, subsys, file, line, "error %s: %s", code_text(code, buf, sizeof buf),
             last_error);
  return code;
}

symm_result_t symm_error_at(const char *file, int line, unsigned subsys, symm_result_t code,
                            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(file, line, subsys, code, fmt, ap, NULL);
  va_end(ap);
  return code;
}

symm_result_t symm_error_errno_at(const char *file, int line, unsigned subsys,
                                  const char *fmt, ...) {
  char errbuf[128];
  int saved = errno;
  const char *msg = strerror_r(saved, errbuf, sizeof errbuf);
  va_list ap;
  va_start(ap, fmt);
  record(file, line, subsys, SYMM_ERR_SYSTEM, fmt, ap, msg);
  va_end(ap);
  errno = saved;
  return SYMM_ERR_SYSTEM;
}

void symm_log_trail(const char *file, int line, unsigned subsys, symm_result_t code) {
  if (symm_log_level() < SYMM_LOG_INFO) return;
  char buf[32];
  symm_log(SYMM_LOG_INFO, subsys, file, line, "-> %s", code_text(code, buf, sizeof buf));
}

void symm_error_context(const char *fmt, ...) {
  char prefix[256], old[SYMM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_error, sizeof old);
  snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
}
