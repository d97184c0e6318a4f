/*
 * Settings: every SYMM_* environment variable, declared once.  Not installed.
 */
#ifndef SYMM_SETTINGS_H
#define SYMM_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_error.h"

/* -------------------------------------------------------------- settings */
/* Every SYMM_* variable is declared once in settings.c with its default and
 * help text; these read the environment, falling back to the default. */
typedef enum { SYMM_SETTING_STRING, SYMM_SETTING_INT, SYMM_SETTING_BOOL, SYMM_SETTING_SIZE } symm_setting_type_t;
typedef struct symm_setting_desc {
  const char *name;
  symm_setting_type_t type;
  const char *default_value; /* as text; NULL = unset */
  const char *help;
  bool secret; /* a tool shows that it is set, never its value */
  bool per_job; /* a job's identity that the launcher sets, not a choice */
} symm_setting_desc_t;
/* What a tool may print for setting d's value v: v, or a placeholder for a
 * secret (the job's token must not end up in logs). */
const char *symm_setting_shown(const symm_setting_desc_t *d, const char *v);
const symm_setting_desc_t *symm_settings_table(size_t *count);
/* Value of the setting: environment if set and non-empty, else default
 * (NULL if neither).  Aborts in debug builds for undeclared names. */
const char *symm_setting_str(const char *name);
int64_t symm_setting_int(const char *name);  /* 0 if unset or unparsable */
bool symm_setting_bool(const char *name);    /* 1/true/yes/on */
/* Parses "64M", "1G", "4096" ... ; returns -1 on error. */
int64_t symm_parse_size(const char *text);

/* symmem never creates NVLink multicast objects (DESIGN.md's GPU safety
 * rule: they can take a shared host's GPUs out of service).  Writes that
 * into why, naming the NVLS-disabling variables that are set, for
 * symmem-info. */
void symm_multicast_status(char *why, size_t why_len);

#endif /* SYMM_SETTINGS_H */
