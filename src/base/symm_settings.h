/*
 * Settings: every SYMM_* environment variable, declared once by the layer
 * that reads it, typed, and parsed once per symm_comm_init.  Not installed.
 *
 * Each layer lists its own settings beside its code, in an X-macro list
 * (src/<layer>/<layer>_settings.def, src/backends/<name>/<name>_settings.def);
 * the build collects them into one list, symm_settings.def in the build's
 * generated folder (CMakeLists.txt), which is all this floor sees of
 * them.  A list is a sequence of
 *
 *   SYMM_SETTING_INT(NAME, DEFAULT, MIN, MAX, FLAGS, HELP)        int64_t
 *   SYMM_SETTING_SIZE(NAME, DEFAULT, MIN, MAX, FLAGS, HELP)       size_t
 *   SYMM_SETTING_BOOL(NAME, DEFAULT, FLAGS, HELP)                 bool
 *   SYMM_SETTING_STRING(NAME, DEFAULT, CHECK, FLAGS, HELP)        const char *
 *   SYMM_SETTING_ENUM(NAME, DEFAULT, NOUN, (CHOICE, ...), FLAGS, HELP)
 *                                                     symm_setting_choice_t
 *   SYMM_SETTING_ALIAS(OLD, NAME)   an old name NAME still answers to: read
 *                                   when NAME is unset, with a warning
 *
 * NAME is the variable (SYMM_TIMEOUT_MS) and also its field in
 * symm_settings_t, so a misspelt name is a compile error.  DEFAULT is text
 * as a user would write it, or NULL for none: an INT without a default reads
 * -1 while unset (their MIN is >= 0), a STRING reads NULL.  MIN..MAX bound
 * an INT or SIZE (inclusive); CHECK is NULL or a symm_setting_check_fn that
 * vets a STRING; NOUN names what an ENUM's choices are ("backend") in
 * messages, and its choices keep the order of the C enum they map to (the
 * field's index is that enum's value).  FLAGS: 0 or any of SYMM_SETTING_SECRET,
 * SYMM_SETTING_PER_JOB, SYMM_SETTING_AGREE and (INT, SIZE) SYMM_SETTING_STEP(n).
 *
 * Accepted text: integers in decimal; sizes as bytes or with a K, M, G or T
 * suffix (powers of 1024; "KiB"/"KB" too); booleans 1/0, true/false,
 * yes/no, on/off; choices in any case.  A variable set empty counts as
 * unset.
 */
#ifndef SYMM_SETTINGS_H
#define SYMM_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_error.h"

#define SYMM_SETTING_SECRET 1u  /* a tool shows that it is set, never its value */
#define SYMM_SETTING_PER_JOB 2u /* a job's identity that the launcher sets, not a choice */
/* Every rank of a communicator must have the same value: symm_comm_init
 * compares them in its first exchange (symm_settings_agreed_text) and
 * fails with SYMM_ERR_MISMATCH on every rank where they differ. */
#define SYMM_SETTING_AGREE 4u
/* An INT or SIZE whose value must be a multiple of n (within MIN..MAX). */
#define SYMM_SETTING_STEP(n) ((unsigned)(n) << 8)

/* Vets a STRING setting's text: true if acceptable; else false, with why
 * (saying what is accepted) written into why.  Pure: no logging, no error
 * recorded, since the logger itself is configured through these. */
typedef bool (*symm_setting_check_fn)(const char *text, char *why, size_t why_len);
bool symm_log_subsys_check(const char *text, char *why, size_t why_len); /* log.c */
/* A backend's name: the table's and those registered (backends.c). */
bool symm_backend_name_check(const char *text, char *why, size_t why_len);
/* "<phase>:<kill|stop>[:rank]" (fault.c). */
bool symm_fault_check(const char *text, char *why, size_t why_len);

/* An ENUM's value: the index of the choice in its list, and its name as
 * declared (whatever case the user wrote). */
typedef struct symm_setting_choice {
  int index;
  const char *name;
} symm_setting_choice_t;

/* Every setting's typed value. */
typedef struct symm_settings {
#define SYMM_SETTING_INT(name, def, lo, hi, flags, help) int64_t name;
#define SYMM_SETTING_SIZE(name, def, lo, hi, flags, help) size_t name;
#define SYMM_SETTING_BOOL(name, def, flags, help) bool name;
#define SYMM_SETTING_STRING(name, def, check, flags, help) const char *name;
#define SYMM_SETTING_ENUM(name, def, noun, choices, flags, help) symm_setting_choice_t name;
#define SYMM_SETTING_ALIAS(old, name)
#include "symm_settings.def"
} symm_settings_t;

/*
 * The settings in force: those parsed by the latest successful
 * symm_comm_init of this process (symm_settings_load).  A process that has
 * made no communicator yet (symmem-run's store, a tool's backend probe)
 * gets the environment parsed at its first call, with the default standing
 * in for any value that does not parse (logged at INFO; symm_comm_init
 * would refuse it).  Never NULL; the values behind a returned pointer never
 * change, so it may be read from any thread while another communicator is
 * made.
 */
const symm_settings_t *symm_settings(void);
/*
 * Parses every setting from the environment and makes the result what
 * symm_settings() returns.  SYMM_ERR_INVALID_ARG for the first value that
 * does not parse or is out of range, naming the variable, the value and
 * what is accepted (the settings in force stay as they were).  The first
 * call of the process also warns once about each SYMM_* variable that is
 * no setting, naming the closest one.  Called by symm_comm_init.
 */
symm_result_t symm_settings_load(void);
/* Parses the environment into *out without logging or allocating: a value
 * that does not parse leaves the default.  Strings point into the
 * environment.  For the logger, which configures itself on its first line. */
void symm_settings_read(symm_settings_t *out);

/* The declaration of one setting, from the lists. */
typedef enum {
  SYMM_SETTING_KIND_INT,
  SYMM_SETTING_KIND_SIZE,
  SYMM_SETTING_KIND_BOOL,
  SYMM_SETTING_KIND_STRING,
  SYMM_SETTING_KIND_ENUM
} symm_setting_kind_t;
typedef struct symm_setting_desc {
  const char *name;
  symm_setting_kind_t type;
  const char *default_value; /* as text; NULL = unset */
  const char *help;
  bool secret;
  bool per_job;
  bool agree;                /* SYMM_SETTING_AGREE */
  size_t offset;             /* of its field in symm_settings_t */
  int64_t min, max;          /* INT, SIZE */
  const char *noun;          /* ENUM */
  const char *const *choices; /* ENUM, NULL-terminated */
  symm_setting_check_fn check; /* STRING, may be NULL */
  int64_t step;              /* INT: values are multiples of it (1: any) */
} symm_setting_desc_t;
const symm_setting_desc_t *symm_settings_table(size_t *count);
/* What a tool may print for setting d's value v: v, or a placeholder for a
 * secret (the job's token must not end up in logs). */
const char *symm_setting_shown(const symm_setting_desc_t *d, const char *v);
/* Writes "NAME=value\n" for every SYMM_SETTING_AGREE setting of s, in the
 * table's order (unset: "NAME=(unset)"), into out (cap bytes, always
 * terminated); returns the length it needs, as snprintf does.  Ranks
 * compare these texts to agree on their settings. */
size_t symm_settings_agreed_text(const symm_settings_t *s, char *out, size_t cap);
/* The first line in which two such texts differ: its setting's name and
 * each side's value, written into name, a and b (each cap bytes).  false
 * if the texts are the same. */
bool symm_settings_first_difference(const char *mine, const char *theirs, char *name, char *a,
                                    char *b, size_t cap);
/* Parses "64M", "1G", "4096" ... ; returns -1 on error. */
int64_t symm_parse_size(const char *text);

#endif /* SYMM_SETTINGS_H */
