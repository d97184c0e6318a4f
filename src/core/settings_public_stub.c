/* Placeholder of the public settings API (symm_setting_count/_get) that
 * another branch adds in settings.c; symmem-bench codes against it.  When
 * that branch lands this file goes, and so does the block of symmem.h that
 * declares symm_setting_info_t and the two functions (that branch declares
 * them itself). */
#include <stdlib.h>

#include "internal.h"

size_t symm_setting_count(void) {
  size_t n = 0;
  symm_settings_table(&n);
  return n;
}

symm_result_t symm_setting_get(size_t index, symm_setting_info_t *info) {
  static const char *const types[] = {"string", "int", "bool", "size"};
  size_t n = 0;
  const symm_setting_desc_t *table = symm_settings_table(&n);
  if (!info || index >= n)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_setting_get: %s",
                      info ? "index out of range" : "info is NULL");
  const symm_setting_desc_t *d = &table[index];
  const char *v = getenv(d->name);
  *info = (symm_setting_info_t){.name = d->name, .type = types[d->type],
                                .default_value = d->default_value, .help = d->help,
                                .value = v && *v ? symm_setting_shown(d, v) : NULL,
                                .secret = d->secret, .per_job = d->per_job};
  return SYMM_SUCCESS;
}
