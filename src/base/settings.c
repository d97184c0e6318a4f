/* Settings: the table made from every layer's list, the one parser that
 * every reader shares (symm_comm_init, the logger, symmem-info through
 * symm_setting_get), the snapshot in force, and the warning about SYMM_*
 * variables that are no setting. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "symm_settings.h"

extern char **environ;

#define SYMM_UNPAREN(...) __VA_ARGS__

/* Each ENUM's choices, NULL-terminated. */
#define SYMM_SETTING_INT(...)
#define SYMM_SETTING_SIZE(...)
#define SYMM_SETTING_BOOL(...)
#define SYMM_SETTING_STRING(...)
#define SYMM_SETTING_ENUM(name, def, noun, choices, flags, help) \
  static const char *const name##_choices[] = {SYMM_UNPAREN choices, NULL};
#define SYMM_SETTING_ALIAS(old, name)
#include "symm_settings.def"

/* Old names and the settings they stand for. */
static const char *const setting_aliases[][2] = {
#define SYMM_SETTING_INT(...)
#define SYMM_SETTING_SIZE(...)
#define SYMM_SETTING_BOOL(...)
#define SYMM_SETTING_STRING(...)
#define SYMM_SETTING_ENUM(...)
#define SYMM_SETTING_ALIAS(old, name) {#old, #name},
#include "symm_settings.def"
    {NULL, NULL}};

#define SETTING_DESC(name, kind, def, flags, help, lo, hi, noun, choices, check)              \
  {#name, kind, def, help, ((flags) & SYMM_SETTING_SECRET) != 0,                                \
   ((flags) & SYMM_SETTING_PER_JOB) != 0, ((flags) & SYMM_SETTING_AGREE) != 0,                  \
   offsetof(symm_settings_t, name), lo, hi, noun, choices, check,                              \
   ((flags) >> 8) ? (int64_t)((flags) >> 8) : 1},
static const symm_setting_desc_t settings[] = {
#define SYMM_SETTING_INT(name, def, lo, hi, flags, help) \
  SETTING_DESC(name, SYMM_SETTING_KIND_INT, def, flags, help, lo, hi, NULL, NULL, NULL)
#define SYMM_SETTING_SIZE(name, def, lo, hi, flags, help) \
  SETTING_DESC(name, SYMM_SETTING_KIND_SIZE, def, flags, help, lo, hi, NULL, NULL, NULL)
#define SYMM_SETTING_BOOL(name, def, flags, help) \
  SETTING_DESC(name, SYMM_SETTING_KIND_BOOL, def, flags, help, 0, 1, NULL, NULL, NULL)
#define SYMM_SETTING_STRING(name, def, check, flags, help) \
  SETTING_DESC(name, SYMM_SETTING_KIND_STRING, def, flags, help, 0, 0, NULL, NULL, check)
#define SYMM_SETTING_ENUM(name, def, noun, choices, flags, help) \
  SETTING_DESC(name, SYMM_SETTING_KIND_ENUM, def, flags, help, 0, 0, noun, name##_choices, NULL)
#define SYMM_SETTING_ALIAS(old, name)
#include "symm_settings.def"
};
#define SETTING_COUNT (sizeof settings / sizeof settings[0])

/* SYMM_-prefixed variables that are not settings of the library but are
 * read by the project's own scripts and tests; they draw no warning. */
static const char *const known_other_vars[] = {
    "SYMM_TEST_BACKEND",     /* tests: the backend the conformance tests run on */
    "SYMM_GPU_TEST_TIMEOUT", /* tests/gpu/run-gpu-tests.sh: time limit of a step */
    "SYMM_GPU_TEST_STATE",   /* tests/gpu/run-gpu-tests.sh: the steps that passed */
    "SYMM_BENCH_RANKS",      /* bench/run-gpu-bench.sh: the rank counts it sweeps */
};

const symm_setting_desc_t *symm_settings_table(size_t *count) {
  if (count) *count = SETTING_COUNT;
  return settings;
}

const char *symm_setting_shown(const symm_setting_desc_t *d, const char *v) {
  return v && d && d->secret ? "(set; hidden: a secret)" : v;
}

/* The value of variable `name`, or of an old name of it when it is unset
 * (symm_settings_load warns about old names; the logger reads settings
 * too, so nothing here logs). */
static const char *env_value(const char *name) {
  const char *v = getenv(name);
  if (v && *v) return v;
  for (size_t i = 0; setting_aliases[i][0]; i++) {
    if (strcmp(setting_aliases[i][1], name) != 0) continue;
    v = getenv(setting_aliases[i][0]);
    if (v && *v) return v;
  }
  return NULL;
}

/* The setting that `name` is an old name of, or NULL. */
static const char *alias_of(const char *name, size_t len) {
  for (size_t i = 0; setting_aliases[i][0]; i++)
    if (strlen(setting_aliases[i][0]) == len && !strncmp(setting_aliases[i][0], name, len))
      return setting_aliases[i][1];
  return NULL;
}

static void *field_of(symm_settings_t *s, const symm_setting_desc_t *d) {
  return (char *)s + d->offset;
}

static const void *field_in(const symm_settings_t *s, const symm_setting_desc_t *d) {
  return (const char *)s + d->offset;
}

/* ---------------------------------------------------------------- parsing */

int64_t symm_parse_size(const char *text) {
  if (!text || !*text) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || v < 0 || errno == ERANGE) return -1;
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
  if (*end) return -1;
  if (v > INT64_MAX / mult) return -1;
  return (int64_t)v * mult;
}

/* Decimal integer, an optional sign and digits only: 0, or 1 if it is no
 * integer, 2 if it does not fit 64 bits. */
static int parse_int(const char *text, int64_t *out) {
  const char *digits = text + (*text == '+' || *text == '-');
  if (!isdigit((unsigned char)*digits)) return 1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (*end) return 1;
  if (errno == ERANGE) return 2;
  *out = v;
  return 0;
}

static bool parse_bool(const char *text, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (!strcasecmp(text, yes[i])) return *out = true, true;
    if (!strcasecmp(text, no[i])) return *out = false, true;
  }
  return false;
}

/* Why a value is refused.  `bare`: the problem does not say what is
 * accepted (symmem-info prints the help next to it; an error adds it). */
#define VERDICT_MAX 384
typedef struct verdict {
  char problem[VERDICT_MAX];
  bool bare;
} verdict_t;

/* What setting d accepts, in words. */
static void accepted_text(const symm_setting_desc_t *d, char *out, size_t len) {
  size_t n = 0;
  out[0] = 0;
  switch (d->type) {
  case SYMM_SETTING_KIND_INT:
    if (d->min == INT64_MIN && d->max == INT64_MAX) snprintf(out, len, "any integer");
    else if (d->step > 1)
      snprintf(out, len, "a multiple of %" PRId64 " in %" PRId64 "..%" PRId64, d->step, d->min,
               d->max);
    else snprintf(out, len, "an integer in %" PRId64 "..%" PRId64, d->min, d->max);
    break;
  case SYMM_SETTING_KIND_SIZE:
    n = (size_t)snprintf(out, len, "bytes, or a number with a K, M or G suffix: 4096, 64K, 1M, 4G");
    if (d->step > 1 && n < len)
      snprintf(out + n, len - n, "; a multiple of %" PRId64 " in %" PRId64 "..%" PRId64 " bytes",
               d->step, d->min, d->max);
    else if ((d->min > 0 || d->max < INT64_MAX) && n < len)
      snprintf(out + n, len - n, "; %" PRId64 "..%" PRId64 " bytes", d->min, d->max);
    break;
  case SYMM_SETTING_KIND_BOOL: snprintf(out, len, "1/0, true/false, yes/no, on/off"); break;
  case SYMM_SETTING_KIND_ENUM:
    for (size_t i = 0; d->choices[i] && n < len; i++)
      n += (size_t)snprintf(out + n, len - n, "%s%s", i ? ", " : "", d->choices[i]);
    break;
  case SYMM_SETTING_KIND_STRING: break;
  }
}

/* Parses text as setting d into field; false with v filled if refused. */
static bool parse_setting(const symm_setting_desc_t *d, const char *text, void *field,
                          verdict_t *v) {
  char accepted[256];
  int64_t x = 0;
  v->problem[0] = 0;
  v->bare = false;
  switch (d->type) {
  case SYMM_SETTING_KIND_INT: {
    int bad = parse_int(text, &x);
    if (bad == 1) {
      snprintf(v->problem, sizeof v->problem, "not an integer");
      v->bare = true;
      return false;
    }
    if (bad || x < d->min || x > d->max || x % d->step) break;
    *(int64_t *)field = x;
    return true;
  }
  case SYMM_SETTING_KIND_SIZE:
    x = symm_parse_size(text);
    if (x < 0) {
      accepted_text(d, accepted, sizeof accepted);
      snprintf(v->problem, sizeof v->problem, "not a size (accepted: %s)", accepted);
      return false;
    }
    if (x < d->min || x > d->max || x % d->step) break;
    *(size_t *)field = (size_t)x;
    return true;
  case SYMM_SETTING_KIND_BOOL:
    if (parse_bool(text, field)) return true;
    accepted_text(d, accepted, sizeof accepted);
    snprintf(v->problem, sizeof v->problem, "not a boolean (accepted: %s)", accepted);
    return false;
  case SYMM_SETTING_KIND_STRING:
    if (d->check && !d->check(text, v->problem, sizeof v->problem)) return false;
    *(const char **)field = text;
    return true;
  case SYMM_SETTING_KIND_ENUM:
    for (int i = 0; d->choices[i]; i++)
      if (!strcasecmp(text, d->choices[i])) {
        *(symm_setting_choice_t *)field = (symm_setting_choice_t){i, d->choices[i]};
        return true;
      }
    accepted_text(d, accepted, sizeof accepted);
    snprintf(v->problem, sizeof v->problem, "unknown %s; valid names: %s", d->noun, accepted);
    return false;
  }
  accepted_text(d, accepted, sizeof accepted);
  snprintf(v->problem, sizeof v->problem, "out of range (accepted: %s)", accepted);
  return false;
}

static void set_default(const symm_setting_desc_t *d, void *field) {
  verdict_t v;
  if (d->default_value && parse_setting(d, d->default_value, field, &v)) return;
  switch (d->type) {
  case SYMM_SETTING_KIND_INT: *(int64_t *)field = -1; break;
  case SYMM_SETTING_KIND_SIZE: *(size_t *)field = 0; break;
  case SYMM_SETTING_KIND_BOOL: *(bool *)field = false; break;
  case SYMM_SETTING_KIND_STRING: *(const char **)field = NULL; break;
  case SYMM_SETTING_KIND_ENUM:
    *(symm_setting_choice_t *)field = (symm_setting_choice_t){0, d->choices[0]};
    break;
  }
}

/* Fills *out from the environment.  A refused value leaves the default;
 * the first one's index and verdict are returned (-1: none refused), and
 * `refused`, if given, hears of each. */
static long parse_env(symm_settings_t *out, verdict_t *first,
                      void (*refused)(const symm_setting_desc_t *, const verdict_t *)) {
  long first_bad = -1;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    const symm_setting_desc_t *d = &settings[i];
    void *field = field_of(out, d);
    set_default(d, field);
    const char *text = env_value(d->name);
    verdict_t v;
    if (!text || parse_setting(d, text, field, &v)) continue; /* refused: field untouched */
    if (first_bad < 0) {
      first_bad = (long)i;
      *first = v;
    }
    if (refused) refused(d, &v);
  }
  return first_bad;
}

void symm_settings_read(symm_settings_t *out) {
  verdict_t v;
  parse_env(out, &v, NULL);
}

/* -------------------------------------------------------------- snapshots */

/* Settings in force are immutable snapshots: a reader's pointer stays good
 * while a later symm_comm_init publishes another.  They are never freed (a
 * new one is made only when a value changed), so none is ever read after
 * free. */
typedef struct snapshot {
  struct snapshot *next;
  symm_settings_t values;
  char text[]; /* the STRING values, copied */
} snapshot_t;

static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;
static snapshot_t *snapshots; /* every one made, newest first */
static _Atomic(snapshot_t *) current;

static bool same_values(const symm_settings_t *a, const symm_settings_t *b) {
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    const symm_setting_desc_t *d = &settings[i];
    const void *x = field_in(a, d), *y = field_in(b, d);
    bool same = true;
    switch (d->type) {
    case SYMM_SETTING_KIND_INT: same = *(const int64_t *)x == *(const int64_t *)y; break;
    case SYMM_SETTING_KIND_SIZE: same = *(const size_t *)x == *(const size_t *)y; break;
    case SYMM_SETTING_KIND_BOOL: same = *(const bool *)x == *(const bool *)y; break;
    case SYMM_SETTING_KIND_ENUM:
      same = ((const symm_setting_choice_t *)x)->index == ((const symm_setting_choice_t *)y)->index;
      break;
    case SYMM_SETTING_KIND_STRING: {
      const char *s = *(const char *const *)x, *t = *(const char *const *)y;
      same = s == t || (s && t && !strcmp(s, t));
      break;
    }
    }
    if (!same) return false;
  }
  return true;
}

/* Makes parsed the settings in force, copying its strings; the caller holds
 * snapshot_lock.  false: out of memory. */
static bool publish(const symm_settings_t *parsed) {
  snapshot_t *cur = atomic_load(&current);
  if (cur && same_values(&cur->values, parsed)) return true;
  size_t text_bytes = 0;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    if (settings[i].type != SYMM_SETTING_KIND_STRING) continue;
    const char *s = *(const char *const *)field_in(parsed, &settings[i]);
    if (s) text_bytes += strlen(s) + 1;
  }
  snapshot_t *snap = malloc(sizeof *snap + text_bytes);
  if (!snap) return false;
  snap->values = *parsed;
  char *p = snap->text;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    if (settings[i].type != SYMM_SETTING_KIND_STRING) continue;
    const char **s = field_of(&snap->values, &settings[i]);
    if (!*s) continue;
    size_t n = strlen(*s) + 1;
    memcpy(p, *s, n);
    *s = p;
    p += n;
  }
  snap->next = snapshots;
  snapshots = snap;
  atomic_store(&current, snap);
  return true;
}

/* What symm_settings() returns when not even a snapshot can be made. */
static symm_settings_t defaults_only;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
static void fill_defaults(void) {
  for (size_t i = 0; i < SETTING_COUNT; i++)
    set_default(&settings[i], field_of(&defaults_only, &settings[i]));
}

static void log_refused_default(const symm_setting_desc_t *d, const verdict_t *v) {
  SYMM_INFO(INIT, "setting %s=%s: %s; the default applies (symm_comm_init refuses it)",
            d->name, symm_setting_shown(d, env_value(d->name)), v->problem);
}

const symm_settings_t *symm_settings(void) {
  snapshot_t *snap = atomic_load_explicit(&current, memory_order_acquire);
  if (snap) return &snap->values;
  symm_settings_t parsed;
  verdict_t first;
  parse_env(&parsed, &first, log_refused_default);
  pthread_mutex_lock(&snapshot_lock);
  bool made = atomic_load(&current) || publish(&parsed);
  pthread_mutex_unlock(&snapshot_lock);
  if (made) return &atomic_load(&current)->values;
  /* Out of memory: the defaults, which need no copy. */
  pthread_once(&defaults_once, fill_defaults);
  return &defaults_only;
}

/* ------------------------------------------------- unknown SYMM_* names */

static const symm_setting_desc_t *find_setting(const char *name, size_t len) {
  for (size_t i = 0; i < SETTING_COUNT; i++)
    if (strlen(settings[i].name) == len && !strncmp(settings[i].name, name, len))
      return &settings[i];
  return NULL;
}

static bool known_other(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof known_other_vars / sizeof known_other_vars[0]; i++)
    if (strlen(known_other_vars[i]) == len && !strncmp(known_other_vars[i], name, len))
      return true;
  return false;
}

/* Edit distance (insertions, deletions, substitutions; case ignored) of
 * the first 63 characters of each. */
static size_t edit_distance(const char *a, size_t la, const char *b) {
  enum { MAX = 63 };
  size_t lb = strlen(b);
  if (la > MAX) la = MAX;
  if (lb > MAX) lb = MAX;
  size_t row[MAX + 1];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t sub = diag + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
      size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      diag = up;
    }
  }
  return row[lb];
}

static const char *closest_setting(const char *name, size_t len) {
  const char *best = settings[0].name;
  size_t best_d = SIZE_MAX;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    size_t d = edit_distance(name, len, settings[i].name);
    if (d < best_d) {
      best_d = d;
      best = settings[i].name;
    }
  }
  return best;
}

/* A misspelt variable is otherwise silently ignored: the job runs with the
 * default the user meant to change. */
static void warn_unknown_once(void) {
  static atomic_flag checked = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&checked)) return;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "SYMM_", 5) != 0) continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    const char *renamed = alias_of(*e, len);
    if (renamed) {
      SYMM_WARN(INIT, "%.*s is an old name of %s, read while %s is unset; use %s", (int)len, *e,
                renamed, renamed, renamed);
      continue;
    }
    if (find_setting(*e, len) || known_other(*e, len)) continue;
    SYMM_WARN(INIT, "unknown setting %.*s; did you mean %s? (symmem-info --env lists them all)",
              (int)len, *e, closest_setting(*e, len));
  }
}

symm_result_t symm_settings_load(void) {
  warn_unknown_once();
  symm_settings_t parsed;
  verdict_t v;
  long bad = parse_env(&parsed, &v, NULL);
  if (bad >= 0) {
    const symm_setting_desc_t *d = &settings[bad];
    char accepted[256] = "";
    if (v.bare) accepted_text(d, accepted, sizeof accepted);
    return symm_error(SYMM_ERR_INVALID_ARG, "setting %s=%s refused: %s%s%s%s", d->name,
                      symm_setting_shown(d, env_value(d->name)), v.problem,
                      v.bare ? " (accepted: " : "", accepted, v.bare ? ")" : "");
  }
  pthread_mutex_lock(&snapshot_lock);
  bool made = publish(&parsed);
  pthread_mutex_unlock(&snapshot_lock);
  if (!made) return symm_error(SYMM_ERR_NO_MEMORY, "settings: out of memory");
  return SYMM_SUCCESS;
}

/* ------------------------------------------------ settings ranks share */

/* Setting d's value in s as text, the same for the same value on every
 * rank (sizes in bytes, booleans 0/1, choices by their declared name). */
static void value_text(const symm_settings_t *s, const symm_setting_desc_t *d, char *out,
                       size_t cap) {
  const void *f = field_in(s, d);
  switch (d->type) {
  case SYMM_SETTING_KIND_INT: {
    int64_t v = *(const int64_t *)f;
    if (v < 0 && d->min >= 0) snprintf(out, cap, "(unset)");
    else snprintf(out, cap, "%" PRId64, v);
    break;
  }
  case SYMM_SETTING_KIND_SIZE: snprintf(out, cap, "%zu", *(const size_t *)f); break;
  case SYMM_SETTING_KIND_BOOL: snprintf(out, cap, "%d", *(const bool *)f ? 1 : 0); break;
  case SYMM_SETTING_KIND_ENUM:
    snprintf(out, cap, "%s", d->choices[((const symm_setting_choice_t *)f)->index]);
    break;
  case SYMM_SETTING_KIND_STRING: {
    const char *v = *(const char *const *)f;
    snprintf(out, cap, "%s", v ? v : "(unset)");
    break;
  }
  }
  /* One line per setting: a value cannot end it early. */
  for (char *p = out; *p; p++)
    if (*p == '\n') *p = ' ';
}

size_t symm_settings_agreed_text(const symm_settings_t *s, char *out, size_t cap) {
  size_t n = 0;
  if (cap) out[0] = 0;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    const symm_setting_desc_t *d = &settings[i];
    if (!d->agree) continue;
    char v[512];
    value_text(s, d, v, sizeof v);
    int k = snprintf(n < cap ? out + n : NULL, n < cap ? cap - n : 0, "%s=%s\n", d->name,
                     d->secret ? "(secret)" : v);
    if (k > 0) n += (size_t)k;
  }
  return n;
}

/* Copies the line at *p (without its newline) into out and moves *p past
 * it; false at the end. */
static bool next_line(const char **p, char *out, size_t cap) {
  if (!**p) return false;
  const char *nl = strchr(*p, '\n');
  size_t len = nl ? (size_t)(nl - *p) : strlen(*p);
  snprintf(out, cap, "%.*s", (int)len, *p);
  *p += len + (nl != NULL);
  return true;
}

/* Splits "NAME=value" into name and value. */
static void split_line(const char *line, char *name, char *value, size_t cap) {
  const char *eq = strchr(line, '=');
  size_t len = eq ? (size_t)(eq - line) : strlen(line);
  snprintf(name, cap, "%.*s", (int)len, line);
  snprintf(value, cap, "%s", eq ? eq + 1 : "(none)");
}

bool symm_settings_first_difference(const char *mine, const char *theirs, char *name, char *a,
                                    char *b, size_t cap) {
  char la[600], lb[600], other[600];
  for (;;) {
    bool ha = next_line(&mine, la, sizeof la), hb = next_line(&theirs, lb, sizeof lb);
    if (!ha && !hb) return false;
    if (ha && hb && strcmp(la, lb) == 0) continue;
    /* A line only one side has: a library with other settings. */
    split_line(ha ? la : lb, name, ha ? a : b, cap);
    if (ha && hb) split_line(lb, other, b, cap);
    else snprintf(ha ? b : a, cap, "(no such setting)");
    return true;
  }
}

/* ------------------------------------------------------ public listing */

size_t symm_setting_count(void) { return SETTING_COUNT; }

symm_result_t symm_setting_get(size_t index, symm_setting_info_t *info) {
  static const char *const kind_names[] = {"int", "size", "bool", "string", "enum"};
  static _Thread_local char value[2048], problem[VERDICT_MAX];
  if (!info) return symm_error(SYMM_ERR_INVALID_ARG, "symm_setting_get: info is NULL");
  if (index >= SETTING_COUNT)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "symm_setting_get: index %zu out of range (symm_setting_count() is %zu)",
                      index, (size_t)SETTING_COUNT);
  const symm_setting_desc_t *d = &settings[index];
  *info = (symm_setting_info_t){.name = d->name, .type = kind_names[d->type],
                                .default_value = d->default_value, .help = d->help,
                                .secret = d->secret, .per_job = d->per_job};
  const char *text = env_value(d->name);
  if (!text) return SYMM_SUCCESS;
  snprintf(value, sizeof value, "%s", symm_setting_shown(d, text));
  info->value = value;
  symm_settings_t scratch;
  verdict_t v;
  if (!parse_setting(d, text, field_of(&scratch, d), &v)) {
    snprintf(problem, sizeof problem, "%s", v.problem);
    info->problem = problem;
  }
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------ multicast */

void symm_multicast_status(char *why, size_t why_len) {
  static const char *const vetoes[][2] = {{"NCCL_NVLS_ENABLE", "0"},
                                          {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
                                          {"NVSHMEM_DISABLE_NVLS", "1"}};
  if (!why || !why_len) return;
  size_t n = (size_t)snprintf(why, why_len, "symmem never creates NVLink multicast objects "
                              "(they can take a shared host's GPUs out of service)");
  for (size_t i = 0; i < 3 && n < why_len; i++) {
    const char *v = getenv(vetoes[i][0]);
    if (v && strcmp(v, vetoes[i][1]) == 0)
      n += (size_t)snprintf(why + n, why_len - n, "; %s=%s is set", vetoes[i][0], v);
  }
}
