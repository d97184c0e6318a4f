/* The static table of bootstrap implementations and the choice among them.
 *
 * The ranks first meet through a bootstrap that needs nothing but the
 * launcher's facts (the store today; MPI or the user's callbacks are the
 * same kind of entry).  Once they agreed on who they are, a layered entry
 * that fits them better (shared memory, when every rank is on one host)
 * is set up through the first one and takes over. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <stdio.h>

#include "store.h"

/* In preference order. */
static const symm_bootstrap_impl_t *const bootstrap_table[] = {
    &symm_bootstrap_shm_impl,
    &symm_bootstrap_cb_impl,
    &symm_bootstrap_store_impl,
};

const symm_bootstrap_impl_t *const *symm_bootstrap_list(size_t *count) {
  if (count) *count = sizeof bootstrap_table / sizeof bootstrap_table[0];
  return bootstrap_table;
}

/* The first usable entry whose layering is `layered`, NULL if none. */
static const symm_bootstrap_impl_t *first_usable(const symm_bootstrap_env_t *env, bool layered) {
  for (size_t i = 0; i < sizeof bootstrap_table / sizeof bootstrap_table[0]; i++) {
    const symm_bootstrap_impl_t *impl = bootstrap_table[i];
    char why[256] = "";
    if (impl->layered != layered) continue;
    if (impl->usable(env, why, sizeof why)) return impl;
    SYMM_TRACE(BOOTSTRAP, "comm %d: bootstrap %s not usable: %s", env->index, impl->name, why);
  }
  return NULL;
}

symm_result_t symm_bootstrap_open(const symm_bootstrap_env_t *env, symm_bootstrap_t **out) {
  *out = NULL;
  const symm_bootstrap_impl_t *impl = first_usable(env, false);
  if (!impl)
    return symm_error(SYMM_ERR_UNSUPPORTED, "bootstrap: no way for the ranks to meet (no store "
                      "connection, no callbacks)");
  return impl->init(env, out);
}

symm_result_t symm_bootstrap_upgrade(const symm_bootstrap_env_t *env, symm_bootstrap_t **out) {
  *out = NULL;
  const symm_bootstrap_impl_t *impl = first_usable(env, true);
  if (!impl) return SYMM_SUCCESS;
  symm_result_t res = impl->init(env, out);
  if (res == SYMM_SUCCESS) {
    SYMM_INFO(BOOTSTRAP, "comm %d: bootstrap through %s", env->index, impl->what);
    return SYMM_SUCCESS;
  }
  *out = NULL;
  /* Staying with the first bootstrap is for a layer that cannot work here,
   * which every rank learns alike.  A rank that ran out of memory setting
   * it up may have left a round its peers are in: falling back alone, it
   * would pair its next round with their last one. */
  if (res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST || res == SYMM_ERR_NO_MEMORY)
    return res;
  SYMM_INFO(BOOTSTRAP, "comm %d: bootstrap stays with the %s bootstrap: %s", env->index,
            env->over->ops->name, symm_last_error());
  symm_error_clear();
  return SYMM_SUCCESS;
}
