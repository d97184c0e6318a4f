/* The store client's checks of its callers' arguments: keys, the
 * library's own prefix, key lists and values. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <string.h>

#include "store_client_int.h"

symm_result_t cli_check_key(const char *what, const char *key) {
  if (!key) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key is NULL", what);
  size_t n = strnlen(key, SYMM_STORE_MAX_KEY + 1);
  if (n == 0 || n > SYMM_STORE_MAX_KEY)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key length must be 1..%d bytes",
                      what, SYMM_STORE_MAX_KEY);
  return SYMM_SUCCESS;
}

/* A key the application may write: symm/ is the library's own prefix (every
 * communicator's bootstrap lives there), which a user's write could corrupt. */
symm_result_t cli_check_user_key(const char *what, const char *key) {
  SYMM_CHECK(cli_check_key(what, key));
  if (strncmp(key, SYMM_STORE_OWN_PREFIX, strlen(SYMM_STORE_OWN_PREFIX)) == 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: key \"%s\" is under %s, symmem's own "
                      "prefix; use another one", what, key, SYMM_STORE_OWN_PREFIX);
  return SYMM_SUCCESS;
}

symm_result_t cli_check_keys(const char *what, const char *const *keys,
                             size_t n) {
  if (n > SYMM_STORE_MAX_KEYS)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: %zu keys, at most %d", what, n,
                      SYMM_STORE_MAX_KEYS);
  if (n && !keys) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: keys is NULL", what);
  for (size_t i = 0; i < n; i++) SYMM_CHECK(cli_check_key(what, keys[i]));
  return SYMM_SUCCESS;
}

symm_result_t cli_check_value(const char *what, const void *v, size_t len) {
  if (len > SYMM_STORE_MAX_VALUE)
    return symm_error(SYMM_ERR_INVALID_ARG, "store %s: value of %zu bytes over the %u-byte limit",
                      what, len, SYMM_STORE_MAX_VALUE);
  if (len && !v) return symm_error(SYMM_ERR_INVALID_ARG, "store %s: value is NULL", what);
  return SYMM_SUCCESS;
}
