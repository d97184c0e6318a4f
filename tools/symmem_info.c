/*
 * symmem-info: what symmem can do on this machine, and why not.
 *
 *   symmem-info            version, every backend (available, or the reason
 *                          it is not; its own details), the backend choice,
 *                          the multicast status, SYMM_* settings that are set
 *   symmem-info --env      every SYMM_* setting: type, default, help, value
 *   symmem-info --json     all of the above as one JSON object
 *
 * Exit status: 0, or 1 when SYMM_BACKEND names no backend (the report is
 * still printed, since that is when it helps most), 2 for usage errors.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stdbool.h>

#include "symmem.h"

extern char **environ;

#define INFO_REASON_MAX 512

/* What was learnt about one backend. */
typedef struct backend_report {
  const char *name;
  bool built;       /* in the library's static table */
  bool available;
  char reason[INFO_REASON_MAX];
  char *details;    /* describe() output, malloc'd, may be NULL */
} backend_report_t;

typedef struct info {
  backend_report_t backends[SYMM_BACKEND_COUNT_];
  size_t n_backends;
  const char *backend_env;   /* SYMM_BACKEND, NULL if unset */
  char backend_env_text[INFO_REASON_MAX];
  bool backend_env_ok;
  char backend_error[INFO_REASON_MAX];
  char multicast_why[INFO_REASON_MAX];
} info_t;

/* ------------------------------------------------------------- settings */

/* Settings come from the library's own listing, which judges each value
 * with the parser symm_comm_init uses: what this tool says of a value is
 * what the library will do with it. */

/* The setting called name (len characters): true with *info filled in. */
static bool find_setting(const char *name, size_t len, symm_setting_info_t *info) {
  for (size_t i = 0; i < symm_setting_count(); i++)
    if (symm_setting_get(i, info) == SYMM_SUCCESS && strlen(info->name) == len &&
        !strncmp(info->name, name, len))
      return true;
  return false;
}

/* -------------------------------------------------------------- gathering */

/* symm_backend_describe writes to a FILE; capture it so it can be indented
 * or quoted. */
static char *capture_describe(symm_backend_t backend) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return NULL;
  symm_backend_describe(backend, mem);
  fclose(mem);
  if (text && len == 0) {
    free(text);
    text = NULL;
  }
  return text;
}

static void probe_backend(backend_report_t *rep, symm_backend_t backend) {
  rep->name = symm_backend_name(backend);
  rep->built = true;
  rep->reason[0] = 0;
  if (symm_backend_available(backend, rep->reason, sizeof rep->reason) == SYMM_SUCCESS)
    rep->available = true;
  else if (!rep->reason[0])
    snprintf(rep->reason, sizeof rep->reason, "probe failed: %s",
             *symm_last_error() ? symm_last_error() : "no reason given");
  rep->details = capture_describe(backend);
}

/* Backends in the library's order of preference (`auto`'s), then any
 * backend the API knows but this build lacks, so every name is accounted
 * for. */
static void gather_backends(info_t *info) {
  bool seen[SYMM_BACKEND_COUNT_] = {false};
  symm_backend_t b;
  for (int i = 0; (b = symm_backend_preferred(i)) != SYMM_BACKEND_AUTO &&
                  info->n_backends < SYMM_BACKEND_COUNT_; i++) {
    probe_backend(&info->backends[info->n_backends++], b);
    if ((unsigned)b < SYMM_BACKEND_COUNT_) seen[b] = true;
  }
  for (int id = SYMM_BACKEND_AUTO + 1; id < SYMM_BACKEND_COUNT_; id++) {
    if (seen[id] || info->n_backends >= SYMM_BACKEND_COUNT_) continue;
    backend_report_t *rep = &info->backends[info->n_backends++];
    rep->name = symm_backend_name((symm_backend_t)id);
    snprintf(rep->reason, sizeof rep->reason, "not built into this library");
  }
}

static void gather(info_t *info) {
  memset(info, 0, sizeof *info);
  gather_backends(info);
  symm_setting_info_t backend;
  info->backend_env_ok = true;
  if (find_setting("SYMM_BACKEND", strlen("SYMM_BACKEND"), &backend) && backend.value) {
    snprintf(info->backend_env_text, sizeof info->backend_env_text, "%s", backend.value);
    info->backend_env = info->backend_env_text;
    if (backend.problem) {
      info->backend_env_ok = false;
      snprintf(info->backend_error, sizeof info->backend_error, "%s", backend.problem);
    }
  }
  symm_multicast_status(info->multicast_why, sizeof info->multicast_why);
}

static void free_info(info_t *info) {
  for (size_t i = 0; i < info->n_backends; i++) free(info->backends[i].details);
}

/* ------------------------------------------------------------ text output */

static void print_indented(const char *text, const char *indent) {
  const char *line = text;
  while (line && *line) {
    const char *nl = strchr(line, '\n');
    int len = nl ? (int)(nl - line) : (int)strlen(line);
    printf("%s%.*s\n", indent, len, line);
    line = nl ? nl + 1 : NULL;
  }
}

static void print_backends(const info_t *info) {
  printf("backends (in auto order):\n");
  for (size_t i = 0; i < info->n_backends; i++) {
    const backend_report_t *rep = &info->backends[i];
    if (rep->available) printf("  %-8s available\n", rep->name);
    else printf("  %-8s unavailable: %s\n", rep->name, rep->reason);
    if (rep->details) print_indented(rep->details, "             ");
  }
}

static void print_selection(const info_t *info) {
  if (!info->backend_env) {
    printf("backend choice: auto (SYMM_BACKEND not set)\n");
    return;
  }
  if (!info->backend_env_ok) {
    printf("backend choice: SYMM_BACKEND=%s is not a backend\n", info->backend_env);
    return;
  }
  printf("backend choice: SYMM_BACKEND=%s\n", info->backend_env);
  for (size_t i = 0; i < info->n_backends; i++)
    if (!strcasecmp(info->backends[i].name, info->backend_env) && !info->backends[i].available)
      printf("  warning: %s is unavailable here; symm_comm_init will fail\n",
             info->backends[i].name);
}

static void print_multicast(const info_t *info) {
  printf("multicast: off (%s)\n", info->multicast_why);
}

/* SYMM_* variables of the environment: declared ones with their value (and
 * a note if it does not parse), undeclared ones flagged as likely typos. */
static void print_set_settings(void) {
  printf("settings from the environment:\n");
  int shown = 0;
  for (char **e = environ; *e; e++) {
    if (strncmp(*e, "SYMM_", 5) != 0) continue;
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    const int name_len = (int)(eq - *e);
    symm_setting_info_t d;
    if (!find_setting(*e, (size_t)name_len, &d))
      printf("  %s  (not a symmem setting; see symmem-info --env)\n", *e);
    else if (!d.value)
      printf("  %.*s=  (empty: the default applies)\n", name_len, *e);
    else if (d.problem)
      printf("  %.*s=%s  (%s)\n", name_len, *e, d.value, d.problem);
    else
      printf("  %.*s=%s\n", name_len, *e, d.value);
    shown++;
  }
  if (!shown) printf("  (none; defaults apply, see symmem-info --env)\n");
}

static void print_report(const info_t *info) {
  int v = symm_version();
  printf("symmem %d.%d.%d\n\n", v / 10000, v / 100 % 100, v % 100);
  print_backends(info);
  printf("\n");
  print_selection(info);
  print_multicast(info);
  char cpus[256];
  printf("binding: %s\n", symm_cpu_binding(cpus, sizeof cpus));
  printf("\n");
  print_set_settings();
}

static void print_env_table(void) {
  for (size_t i = 0; i < symm_setting_count(); i++) {
    symm_setting_info_t d;
    if (symm_setting_get(i, &d) != SYMM_SUCCESS) continue;
    printf("%s (%s, default %s)\n", d.name, d.type, d.default_value ? d.default_value : "unset");
    printf("    %s\n", d.help);
    if (d.value)
      printf("    current value: %s%s%s%s\n", d.value, d.problem ? " (" : "",
             d.problem ? d.problem : "", d.problem ? ")" : "");
  }
}

/* ------------------------------------------------------------ JSON output */

static void json_string(const char *s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p == '\n') fputs("\\n", stdout);
    else if (*p == '\t') fputs("\\t", stdout);
    else if (*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

static void json_lines(const char *text) {
  putchar('[');
  const char *line = text;
  bool first = true;
  while (line && *line) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char *copy = strndup(line, len);
    if (!first) putchar(',');
    json_string(copy ? copy : "");
    free(copy);
    first = false;
    line = nl ? nl + 1 : NULL;
  }
  putchar(']');
}

static void print_json(const info_t *info) {
  int v = symm_version();
  printf("{\"version\":\"%d.%d.%d\",\"backends\":[", v / 10000, v / 100 % 100, v % 100);
  for (size_t i = 0; i < info->n_backends; i++) {
    const backend_report_t *rep = &info->backends[i];
    printf("%s{\"name\":", i ? "," : "");
    json_string(rep->name);
    printf(",\"built\":%s,\"available\":%s,\"reason\":", rep->built ? "true" : "false",
           rep->available ? "true" : "false");
    json_string(rep->available ? NULL : rep->reason);
    printf(",\"details\":");
    json_lines(rep->details);
    putchar('}');
  }
  printf("],\"backend_env\":");
  json_string(info->backend_env);
  printf(",\"backend_error\":");
  json_string(info->backend_env_ok ? NULL : info->backend_error);
  printf(",\"multicast\":{\"allowed\":false,\"reason\":");
  json_string(info->multicast_why);
  char cpus[256];
  printf("},\"binding\":");
  json_string(symm_cpu_binding(cpus, sizeof cpus));
  printf(",\"settings\":[");
  for (size_t i = 0; i < symm_setting_count(); i++) {
    symm_setting_info_t d;
    if (symm_setting_get(i, &d) != SYMM_SUCCESS) continue;
    printf("%s{\"name\":", i ? "," : "");
    json_string(d.name);
    printf(",\"type\":");
    json_string(d.type);
    printf(",\"default\":");
    json_string(d.default_value);
    printf(",\"value\":");
    json_string(d.value);
    printf(",\"problem\":");
    json_string(d.problem);
    printf(",\"help\":");
    json_string(d.help);
    putchar('}');
  }
  printf("]}\n");
}

/* ---------------------------------------------------------------- main */

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: symmem-info [--env] [--json]\n"
          "\n"
          "Shows which symmem backends work on this machine (and why the others do\n"
          "not), the backend SYMM_BACKEND selects, the multicast status, and the SYMM_*\n"
          "settings in the environment.\n"
          "\n"
          "options:\n"
          "  -e, --env      list every SYMM_* setting with its type, default and help\n"
          "  -j, --json     print everything as one JSON object\n"
          "  -h, --help     show this help\n"
          "      --version  show the version\n"
          "\n"
          "Exit status: 0; 1 if SYMM_BACKEND is not a backend name; 2 for usage errors.\n");
}

enum { OPT_VERSION = 256 };

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"env", no_argument, NULL, 'e'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, OPT_VERSION},
                                           {NULL, 0, NULL, 0}};
  bool env_mode = false, json_mode = false;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "ejh", longopts, NULL)) != -1) {
    switch (c) {
    case 'e': env_mode = true; break;
    case 'j': json_mode = true; break;
    case 'h': print_usage(stdout); return 0;
    case OPT_VERSION: {
      int v = symm_version();
      printf("symmem-info (symmem) %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
      return 0;
    }
    default:
      if (optopt > 0 && optopt < 256) fprintf(stderr, "symmem-info: unknown option -%c\n\n", optopt);
      else fprintf(stderr, "symmem-info: unknown option %s\n\n", argv[optind - 1]);
      print_usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "symmem-info: unexpected argument '%s'\n\n", argv[optind]);
    print_usage(stderr);
    return 2;
  }

  info_t info;
  gather(&info);
  if (json_mode) print_json(&info);
  else if (env_mode) print_env_table();
  else print_report(&info);
  fflush(stdout);
  int rc = 0;
  if (!info.backend_env_ok) {
    fprintf(stderr, "symmem-info: error: SYMM_BACKEND=%s: %s\n", info.backend_env,
            info.backend_error);
    rc = 1;
  }
  free_info(&info);
  return rc;
}
