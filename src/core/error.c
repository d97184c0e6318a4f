/* Result codes, their names, and the per-thread detailed last error. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define SYMM_ERROR_MAX 1024
static _Thread_local char last_error[SYMM_ERROR_MAX];

int symm_version(void) { return SYMM_VERSION_CODE; }

const char *symm_strerror(symm_result_t result) {
  switch (result) {
    case SYMM_SUCCESS: return "success";
    case SYMM_ERR_INVALID_ARG: return "invalid argument";
    case SYMM_ERR_NO_MEMORY: return "out of memory";
    case SYMM_ERR_UNSUPPORTED: return "unsupported";
    case SYMM_ERR_MISMATCH: return "mismatch across ranks";
    case SYMM_ERR_TIMEOUT: return "timeout";
    case SYMM_ERR_PEER_LOST: return "peer lost";
    case SYMM_ERR_SYSTEM: return "system call failed";
    case SYMM_ERR_BACKEND: return "backend library failed";
    case SYMM_ERR_NOT_FOUND: return "not found";
    case SYMM_ERR_STATE: return "invalid state";
    case SYMM_ERR_PERMISSION: return "permission denied";
    case SYMM_ERR_PROTOCOL: return "protocol error";
    case SYMM_ERR_INTERNAL: return "internal error";
  }
  return "unknown error";
}

const char *symm_last_error(void) { return last_error; }

void symm_error_clear(void) { last_error[0] = 0; }

void symm_error_restore(const char *saved) {
  if (saved != last_error) snprintf(last_error, sizeof last_error, "%s", saved ? saved : "");
}

static symm_result_t record(symm_result_t code, const char *fmt, va_list ap,
                            const char *suffix) {
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  if (suffix && n >= 0 && (size_t)n < sizeof last_error)
    snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", suffix);
  if (code == SYMM_ERR_INTERNAL)
    symm_log(SYMM_LOG_WARN, SYMM_SUBSYS_ALL, __FILE__, __LINE__, "%s", last_error);
  else if (symm_log_level() >= SYMM_LOG_INFO)
    symm_log(SYMM_LOG_INFO, SYMM_SUBSYS_ALL, __FILE__, __LINE__, "error %s: %s",
             symm_strerror(code), last_error);
  return code;
}

symm_result_t symm_error(symm_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, fmt, ap, NULL);
  va_end(ap);
  return code;
}

symm_result_t symm_error_errno(const char *fmt, ...) {
  char errbuf[128];
  int saved = errno;
  const char *msg = strerror_r(saved, errbuf, sizeof errbuf);
  va_list ap;
  va_start(ap, fmt);
  record(SYMM_ERR_SYSTEM, fmt, ap, msg);
  va_end(ap);
  errno = saved;
  return SYMM_ERR_SYSTEM;
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
