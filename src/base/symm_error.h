/*
 * Errors and logging of every layer: the thread's last error, the log
 * levels and subsystems, the check macros.  Not installed.
 */
#ifndef SYMM_ERROR_H
#define SYMM_ERROR_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "symmem.h"

#define SYMM_HIDDEN __attribute__((visibility("hidden")))

/* ---------------------------------------------------------------- errors
 *
 * Who logs what.  One failure prints one message where it arose, then one
 * short line per check on the way up:
 *
 *   host:pid:tid symm INFO fd_exchange.c:445 error SYMM_ERR_TIMEOUT: fd server ... of
 *       rank 1 did not accept within 100 ms (Connection refused)
 *   host:pid:tid symm INFO fd_exchange.c:561 -> SYMM_ERR_TIMEOUT
 *   host:pid:tid symm INFO host_exchange.c:13 -> SYMM_ERR_TIMEOUT
 *
 * - symm_error / symm_error_errno raise: they record the message as the
 *   thread's last error, which symm_last_error() returns without any
 *   location, and log it once with the call site's file:line, at INFO;
 *   SYMM_ERR_INTERNAL (a bug) at WARN, whatever SYMM_DEBUG_SUBSYS selects.
 * - SYMM_CHECK / SYMM_CHECK_GOTO propagate: they log "-> CODE" and their
 *   own file:line at INFO, never the message again.  A function that gets
 *   a failure without a message (a code from a table, a library) raises
 *   one with symm_error instead of checking it.
 * - SYMM_SYSCHECK / SYMM_SYSCHECK_GOTO / SYMM_PTHREADCHECK raise for a
 *   failed system or pthread call, with the message given and strerror.
 * - Lines are logged under the file's subsystem: a .c file that is not
 *   "ALL" defines SYMM_LOG_SUBSYS (e.g. SYMM_SUBSYS_COLL) before its first
 *   #include (a later definition is a redefinition warning).
 */
#ifndef SYMM_LOG_SUBSYS
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALL
#endif

/* Records code + formatted message as the thread's last error and returns
 * code, so that `return symm_error(SYMM_ERR_..., "...")` reads naturally. */
#define symm_error(code, ...) \
  symm_error_at(__FILE__, __LINE__, SYMM_LOG_SUBSYS, (code), __VA_ARGS__)
/* Like symm_error, appending ": strerror(errno)"; returns SYMM_ERR_SYSTEM
 * and leaves errno as it was. */
#define symm_error_errno(...) \
  symm_error_errno_at(__FILE__, __LINE__, SYMM_LOG_SUBSYS, __VA_ARGS__)
symm_result_t symm_error_at(const char *file, int line, unsigned subsys, symm_result_t code,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
symm_result_t symm_error_errno_at(const char *file, int line, unsigned subsys,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The code's enumerator name ("SYMM_ERR_TIMEOUT"), for logs; NULL for a
 * value outside the enum. */
const char *symm_result_name(symm_result_t code);
/* Prefixes the current last-error message with context ("rendezvous: ..."). */
void symm_error_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void symm_error_clear(void);
/* Puts back a message saved from symm_last_error() (cleanup paths). */
void symm_error_restore(const char *saved);

/* --------------------------------------------------------------- logging */
enum symm_log_level { SYMM_LOG_NONE = 0, SYMM_LOG_WARN = 1, SYMM_LOG_INFO = 2, SYMM_LOG_TRACE = 3 };
enum symm_subsys {
  SYMM_SUBSYS_INIT = 1u << 0,
  SYMM_SUBSYS_BOOTSTRAP = 1u << 1,
  SYMM_SUBSYS_STORE = 1u << 2,
  SYMM_SUBSYS_ALLOC = 1u << 3,
  SYMM_SUBSYS_BACKEND = 1u << 4,
  SYMM_SUBSYS_COLL = 1u << 5,
  SYMM_SUBSYS_ALL = ~0u
};
/* Level and subsystem mask from SYMM_DEBUG / SYMM_DEBUG_SUBSYS (read once). */
int symm_log_level(void);
void symm_log(int level, unsigned subsys, const char *file, int line,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Device ordinal printed in log prefixes ("[dev]"); -1 prints nothing. */
void symm_log_set_device(int device);

#define SYMM_WARN(sub, ...) symm_log(SYMM_LOG_WARN, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__)
#define SYMM_INFO(sub, ...)                                                   \
  do {                                                                        \
    if (symm_log_level() >= SYMM_LOG_INFO)                                    \
      symm_log(SYMM_LOG_INFO, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define SYMM_TRACE(sub, ...)                                                  \
  do {                                                                        \
    if (symm_log_level() >= SYMM_LOG_TRACE)                                   \
      symm_log(SYMM_LOG_TRACE, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* ---------------------------------------------------------------- checks */
/* The "-> CODE" line of a check that propagates a failure (INFO). */
void symm_log_trail(const char *file, int line, unsigned subsys, symm_result_t code);

/* call returns symm_result_t; a failure is returned (or kept in res and
 * sent to label, for one cleanup path) after its trail line. */
#define SYMM_CHECK(call)                                                      \
  do {                                                                        \
    symm_result_t res_ = (call);                                              \
    if (res_ != SYMM_SUCCESS) {                                               \
      symm_log_trail(__FILE__, __LINE__, SYMM_LOG_SUBSYS, res_);              \
      return res_;                                                            \
    }                                                                         \
  } while (0)
#define SYMM_CHECK_GOTO(call, res, label)                                     \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != SYMM_SUCCESS) {                                              \
      symm_log_trail(__FILE__, __LINE__, SYMM_LOG_SUBSYS, (res));             \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* System calls that return -1 with errno set: a failure raises
 * symm_error_errno(fmt, ...) here (SYMM_ERR_SYSTEM, ": strerror" appended)
 * and returns it, or keeps it in res and goes to label.  No retry: a call
 * that may fail with EINTR or EAGAIN as part of its protocol keeps its own
 * loop. */
#define SYMM_SYSCHECK(call, ...)                                              \
  do {                                                                        \
    if ((call) == -1) return symm_error_errno(__VA_ARGS__);                   \
  } while (0)
#define SYMM_SYSCHECK_GOTO(call, res, label, ...)                             \
  do {                                                                        \
    if ((call) == -1) {                                                       \
      (res) = symm_error_errno(__VA_ARGS__);                                  \
      goto label;                                                             \
    }                                                                         \
  } while (0)
/* pthread calls, which return the error number instead of setting errno. */
#define SYMM_PTHREADCHECK(call, ...)                                          \
  do {                                                                        \
    int err_ = (call);                                                        \
    if (err_ != 0) {                                                          \
      errno = err_;                                                           \
      return symm_error_errno(__VA_ARGS__);                                   \
    }                                                                         \
  } while (0)
#define SYMM_PTHREADCHECK_GOTO(call, res, label, ...)                         \
  do {                                                                        \
    int err_ = (call);                                                        \
    if (err_ != 0) {                                                          \
      errno = err_;                                                           \
      (res) = symm_error_errno(__VA_ARGS__);                                  \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#endif /* SYMM_ERROR_H */
