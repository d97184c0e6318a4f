/* Logging: SYMM_DEBUG level, SYMM_DEBUG_SUBSYS mask, SYMM_DEBUG_FILE target.
 * Lines look like "host:pid:tid [dev] symm WARN message". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "symm_settings.h"
#include "symm_util.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level_value = SYMM_LOG_WARN;
static unsigned log_mask = SYMM_SUBSYS_ALL;
static FILE *log_file;
static char log_host[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_device = -1;

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {
    {"INIT", SYMM_SUBSYS_INIT},       {"BOOTSTRAP", SYMM_SUBSYS_BOOTSTRAP},
    {"STORE", SYMM_SUBSYS_STORE},     {"ALLOC", SYMM_SUBSYS_ALLOC},
    {"BACKEND", SYMM_SUBSYS_BACKEND}, {"COLL", SYMM_SUBSYS_COLL},
    {"ALL", SYMM_SUBSYS_ALL},
};

/* The bit of the subsystem named by the len bytes at name, 0 for none. */
static unsigned subsys_bit(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
    if (strlen(subsys_names[i].name) == len && strncasecmp(name, subsys_names[i].name, len) == 0)
      return subsys_names[i].bit;
  return 0;
}

/* The mask that text names ("INIT,COLL", "^STORE"): false if a name is
 * none of the subsystems, with that name copied into bad.  Read in place,
 * to its end: a copy into a fixed buffer would leave a long list's tail
 * unread.  Empty names (",,") are skipped. */
static bool parse_mask(const char *text, unsigned *mask, char *bad, size_t bad_len) {
  bool invert = text[0] == '^';
  unsigned m = 0;
  for (const char *tok = text + invert;; tok++) {
    size_t len = strcspn(tok, ",");
    unsigned bit = len ? subsys_bit(tok, len) : 0;
    if (len && !bit) {
      snprintf(bad, bad_len, "%.*s", len > 63 ? 63 : (int)len, tok);
      return false;
    }
    m |= bit;
    tok += len;
    if (!*tok) break;
  }
  *mask = invert ? ~m : m;
  return true;
}

bool symm_log_subsys_check(const char *text, char *why, size_t why_len) {
  unsigned mask;
  char bad[64];
  if (parse_mask(text, &mask, bad, sizeof bad)) return true;
  snprintf(why, why_len, "unknown subsystem \"%s\"; valid names: INIT, BOOTSTRAP, STORE, ALLOC, "
           "BACKEND, COLL, ALL, after an optional ^ (exclude)", bad);
  return false;
}

/* Expands %h (hostname) and %p (pid) in the SYMM_DEBUG_FILE pattern. */
static void open_log_file(const char *pattern) {
  char path[1024];
  size_t n = 0;
  for (const char *p = pattern; *p && n + 64 < sizeof path; p++) {
    if (p[0] == '%' && p[1] == 'h') {
      n += (size_t)snprintf(path + n, sizeof path - n, "%s", log_host);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      n += (size_t)snprintf(path + n, sizeof path - n, "%d", (int)getpid());
      p++;
    } else {
      path[n++] = *p;
    }
  }
  path[n] = 0;
  log_file = fopen(path, "a");
}

static void log_init(void) {
  gethostname(log_host, sizeof log_host - 1);
  symm_settings_t s;
  symm_settings_read(&s);
  log_level_value = s.SYMM_DEBUG.index; /* the choices are in SYMM_LOG_* order */
  char bad[64]; /* symm_settings_read has left the default for a bad list */
  parse_mask(s.SYMM_DEBUG_SUBSYS, &log_mask, bad, sizeof bad);
  if (s.SYMM_DEBUG_FILE) open_log_file(s.SYMM_DEBUG_FILE);
}

int symm_log_level(void) {
  pthread_once(&log_once, log_init);
  return log_level_value;
}

void symm_log_set_device(int device) { log_device = device; }

void symm_log(int level, unsigned subsys, const char *file, int line,
              const char *fmt, ...) {
  pthread_once(&log_once, log_init);
  if (level > log_level_value || !(subsys & log_mask)) return;
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1280];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char dev[16] = "";
  if (log_device >= 0) snprintf(dev, sizeof dev, " [%d]", log_device);
  /* TRACE lines carry a monotonic time stamp (ms) so that a trace doubles
   * as a profile of where an operation spends its time. */
  char when[32] = "";
  if (log_level_value >= SYMM_LOG_TRACE)
    snprintf(when, sizeof when, " %.3f", (double)symm_now_ns() / 1e6);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  pthread_mutex_lock(&log_lock);
  FILE *out = log_file ? log_file : stderr;
  fprintf(out, "%s:%d:%ld%s%s symm %s %s:%d %s\n", log_host, (int)getpid(),
          (long)syscall(SYS_gettid), dev, when, names[level], base, line, msg);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}
