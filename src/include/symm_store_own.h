/*
 * The job's store for the library's own keys, which live under "symm/"
 * (every communicator's symm_comm_key_prefix): the public symm_store_set,
 * _add, _compare_set and _delete refuse that prefix, these are the same
 * calls without the check (store_client_ops.c).  Not installed.
 */
#ifndef SYMM_STORE_OWN_H
#define SYMM_STORE_OWN_H

#include <stddef.h>

#include "symmem.h"

#define SYMM_STORE_OWN_PREFIX "symm/"

symm_result_t symm_store_set_own(symm_store_t *store, const char *key, const void *value,
                                 size_t len);
symm_result_t symm_store_compare_set_own(symm_store_t *store, const char *key,
                                         const void *expected, size_t expected_len,
                                         const void *desired, size_t desired_len, void *buf,
                                         size_t cap, size_t *len);
symm_result_t symm_store_delete_own(symm_store_t *store, const char *key);
/* A rank of the connection's communicator that the store has recorded as
 * lost (gone, or refused for a wrong token), or -1: none, or the store
 * cannot say now (NULL store, a broken connection).  One request that does
 * not wait; records no error. */
int symm_store_lost_rank(symm_store_t *store);

#endif /* SYMM_STORE_OWN_H */
