/* libFuzzer target: the settings parsers.  The input is a list of
 * assignments, one per line: a byte choosing the setting (its index in the
 * table, modulo the count), then the value up to the newline.  Each is put
 * in the environment, and then
 *   - symm_setting_get parses each setting as symm_comm_init would and
 *     reports a problem for a value it refuses;
 *   - symm_settings_read parses the whole SYMM_* environment;
 *   - symm_settings_load must refuse it (SYMM_ERR_INVALID_ARG, naming the
 *     first refused variable) exactly when some setting reported a
 *     problem; when none did it is not called, since every new set of
 *     values it accepts is kept for the life of the process;
 *   - symm_parse_size and the tools' tool_parse_size, documented alike,
 *     must agree on every value; tool_parse_int stays in its bounds;
 *   - a subsystem list (SYMM_DEBUG_SUBSYS) that is accepted is refused
 *     once an unknown name is appended: no part of it goes unread;
 *   - symm_store_parse_addr (SYMM_STORE_ADDR) yields a host that fits
 *     and a port in 1..65535, or refuses;
 *   - neither the listing nor a refusal's message depends on a secret's
 *     value (SYMM_TOKEN): they read the same with another value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store.h"
#include "symm_test_access.h"
#include "symm_settings.h"
#include "tool_common.h"

#define FUZZ_MAX_VARS 8
#define FUZZ_MAX_VALUE 512

extern char **environ;

static void fail(const char *what, const char *value) {
  fprintf(stderr, "fuzz-settings: %s (value \"%s\")\n", what, value);
  __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* The fuzzer owns every SYMM_* variable.  The logger reads its settings
   * once, now, from a clean environment: a fuzzed SYMM_DEBUG_FILE must
   * never make it open a file. */
  for (;;) {
    char **e = environ;
    while (e && *e && strncmp(*e, "SYMM_", 5) != 0) e++;
    if (!e || !*e) break;
    char name[256];
    size_t n = strcspn(*e, "=");
    snprintf(name, sizeof name, "%.*s", (int)n, *e);
    unsetenv(name);
  }
  symm_log_level();
  return 0;
}

static void check_subsys_list(const char *v) {
  char why[512];
  if (!symm_log_subsys_check(v, why, sizeof why)) return;
  size_t n = strlen(v);
  char *longer = malloc(n + sizeof ",NOSUCH");
  if (!longer) abort();
  memcpy(longer, v, n);
  memcpy(longer + n, ",NOSUCH", sizeof ",NOSUCH");
  bool taken = symm_log_subsys_check(longer, why, sizeof why);
  free(longer);
  if (taken) fail("a subsystem list with an unknown name appended is accepted", v);
}

static void check_store_addr(const char *v) {
  char host[64];
  memset(host, 'x', sizeof host);
  int port = -1;
  if (symm_store_parse_addr(v, host, sizeof host, &port) != SYMM_SUCCESS) return;
  if (port < 1 || port > 65535) fail("store address with a port out of range", v);
  if (!memchr(host, 0, sizeof host) || !host[0]) fail("store address with a bad host", v);
}

static void check_sizes(const char *v) {
  int64_t a = symm_parse_size(v), b = tool_parse_size(v);
  if (a != b) fail("symm_parse_size and tool_parse_size disagree", v);
  if (a < -1) fail("symm_parse_size below -1", v);
  int iv;
  if (tool_parse_int(v, -5, 1000, &iv) && (iv < -5 || iv > 1000))
    fail("tool_parse_int out of its bounds", v);
}

/* The variables set, as putenv strings (owned here: no copy is left in
 * the environment after unsetenv). */
typedef struct assignment {
  const symm_setting_desc_t *d;
  char *text; /* "NAME=value" */
} assignment_t;

static size_t parse_input(const uint8_t *data, size_t size, assignment_t *as) {
  size_t count, n = 0;
  const symm_setting_desc_t *table = symm_settings_table(&count);
  for (size_t at = 0; at < size && n < FUZZ_MAX_VARS;) {
    const symm_setting_desc_t *d = &table[data[at++] % count];
    size_t len = 0;
    while (at + len < size && data[at + len] != '\n') len++;
    const uint8_t *v = data + at;
    at += len + 1;
    if (len > FUZZ_MAX_VALUE) len = FUZZ_MAX_VALUE;
    size_t name_len = strlen(d->name);
    char *text = malloc(name_len + 1 + len + 1);
    if (!text) abort();
    memcpy(text, d->name, name_len);
    text[name_len] = '=';
    memcpy(text + name_len + 1, v, len);
    text[name_len + 1 + len] = 0; /* a NUL inside the value ends it, as in a real environment */
    as[n++] = (assignment_t){d, text};
  }
  return n;
}

/* The message of symm_settings_load with secret setting d set to other
 * instead of its value in as (restored after). */
static void load_message_with(const assignment_t *as, const char *other, char *msg,
                              size_t cap) {
  char *text = malloc(strlen(as->d->name) + 1 + strlen(other) + 1);
  if (!text) abort();
  sprintf(text, "%s=%s", as->d->name, other);
  unsetenv(as->d->name);
  putenv(text);
  symm_settings_load();
  snprintf(msg, cap, "%s", symm_last_error());
  unsetenv(as->d->name);
  putenv(as->text);
  free(text);
}

/* A refusal's message does not depend on a secret's value: it is the
 * same with the secret set to something else. */
static void check_secrets_unshown(const assignment_t *as, size_t n) {
  char with[2048], without[2048];
  snprintf(with, sizeof with, "%s", symm_last_error());
  for (size_t i = 0; i < n; i++) {
    if (!as[i].d->secret || getenv(as[i].d->name) != strchr(as[i].text, '=') + 1) continue;
    load_message_with(&as[i], strcmp(getenv(as[i].d->name), "other") ? "other" : "else",
                      without, sizeof without);
    if (strcmp(with, without) != 0) fail("a refusal's message shows a secret", as[i].d->name);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  assignment_t as[FUZZ_MAX_VARS];
  size_t n = parse_input(data, size, as);
  for (size_t i = 0; i < n; i++) {
    unsetenv(as[i].d->name); /* a later line for the same variable wins */
    putenv(as[i].text);
    const char *v = strchr(as[i].text, '=') + 1;
    check_sizes(v);
    check_subsys_list(v);
    check_store_addr(v);
  }
  const char *first_bad = NULL;
  for (size_t i = 0; i < symm_setting_count(); i++) {
    symm_setting_info_t info;
    if (symm_setting_get(i, &info) != SYMM_SUCCESS) fail("symm_setting_get failed", "");
    if (info.problem && !first_bad) first_bad = info.name;
    if (info.problem && !info.value) fail("a problem with an unset variable", info.name);
    if (info.secret && info.value && strcmp(info.value, symm_setting_shown(
            &symm_settings_table(NULL)[i], "other")) != 0)
      fail("a secret's listing depends on its value", info.name);
  }
  symm_settings_t parsed;
  symm_settings_read(&parsed);
  if (first_bad) {
    if (symm_settings_load() != SYMM_ERR_INVALID_ARG)
      fail("symm_settings_load took a value symm_setting_get refused", first_bad);
    if (!strstr(symm_last_error(), first_bad))
      fail("symm_settings_load's message does not name the variable", first_bad);
    check_secrets_unshown(as, n);
  }
  for (size_t i = 0; i < n; i++) unsetenv(as[i].d->name);
  for (size_t i = 0; i < n; i++) free(as[i].text);
  return 0;
}
