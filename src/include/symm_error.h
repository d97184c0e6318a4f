/*
 * Errors and logging of every layer: the thread's last error, the log
 * levels and subsystems, the check macros.  Not installed.
 */
#ifndef SYMM_ERROR_H
#define SYMM_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "symmem.h"

#define SYMM_HIDDEN __attribute__((visibility("hidden")))

/* ---------------------------------------------------------------- errors */

/* Records code + formatted message as the thread's last error and returns
 * code, so that `return symm_error(SYMM_ERR_..., "...")` reads naturally.
 * Also logged at INFO (WARN for SYMM_ERR_INTERNAL). */
symm_result_t symm_error(symm_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Like symm_error, appending ": strerror(errno)"; returns SYMM_ERR_SYSTEM. */
symm_result_t symm_error_errno(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
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

/* Check macros: on failure, leave a trail at INFO and propagate. */
#define SYMM_CHECK(call)                                                      \
  do {                                                                        \
    symm_result_t res_ = (call);                                              \
    if (res_ != SYMM_SUCCESS) {                                               \
      SYMM_INFO(ALL, "%s failed: %s", #call, symm_last_error());              \
      return res_;                                                            \
    }                                                                         \
  } while (0)
#define SYMM_CHECK_GOTO(call, res, label)                                     \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != SYMM_SUCCESS) {                                              \
      SYMM_INFO(ALL, "%s failed: %s", #call, symm_last_error());              \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#endif /* SYMM_ERROR_H */
