/* The names of the public enums other than the backends (whose names are
 * their tables'): element types, reductions, all-reduce algorithms.  Each
 * list is the one spelling; the messages that list the valid names are
 * made from it. */
#include <stdio.h>
#include <strings.h>

#include "internal.h"

static const char *const dtype_names[SYMM_DTYPE_COUNT_] = {
    "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
    "f8e4m3", "f8e5m2"};
static const unsigned char dtype_sizes[SYMM_DTYPE_COUNT_] = {2, 2, 4, 8, 1, 2, 4, 8,
                                                             1, 2, 4, 8, 1, 1};
static const char *const redop_names[SYMM_REDUCE_COUNT_] = {"sum", "min", "max", "prod", "avg"};
static const char *const algo_names[SYMM_ALGO_COUNT_] = {"auto", "one_shot", "two_shot", "ll",
                                                           "ll128", "ce"};

/* The index of `name` (any case) among names[0..n); else -1 with
 * "unknown <what> "name"; valid names: ..." as the thread's error. */
static int name_index(const char *const *names, int n, const char *name, const char *what) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(name, names[i]) == 0) return i;
  char valid[256];
  size_t used = 0;
  valid[0] = 0;
  for (int i = 0; i < n && used < sizeof valid; i++)
    used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s", i ? ", " : "", names[i]);
  symm_error(SYMM_ERR_INVALID_ARG, "unknown %s \"%s\"; valid names: %s", what, name, valid);
  return -1;
}

size_t symm_dtype_size(symm_dtype_t dtype) {
  return (unsigned)dtype < SYMM_DTYPE_COUNT_ ? dtype_sizes[dtype] : 0;
}

const char *symm_dtype_name(symm_dtype_t dtype) {
  return (unsigned)dtype < SYMM_DTYPE_COUNT_ ? dtype_names[dtype] : NULL;
}

symm_result_t symm_dtype_from_name(const char *name, symm_dtype_t *dtype) {
  if (!name || !dtype)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_dtype_from_name: NULL argument");
  int i = name_index(dtype_names, SYMM_DTYPE_COUNT_, name, "dtype");
  if (i < 0) return SYMM_ERR_INVALID_ARG;
  *dtype = (symm_dtype_t)i;
  return SYMM_SUCCESS;
}

const char *symm_redop_name(symm_redop_t op) {
  return (unsigned)op < SYMM_REDUCE_COUNT_ ? redop_names[op] : NULL;
}

const char *symm_algo_name(symm_algo_t algo) {
  return (unsigned)algo < SYMM_ALGO_COUNT_ ? algo_names[algo] : NULL;
}

symm_result_t symm_redop_from_name(const char *name, symm_redop_t *op) {
  if (!name || !op) return symm_error(SYMM_ERR_INVALID_ARG, "symm_redop_from_name: NULL argument");
  int i = name_index(redop_names, SYMM_REDUCE_COUNT_, name, "reduction");
  if (i < 0) return SYMM_ERR_INVALID_ARG;
  *op = (symm_redop_t)i;
  return SYMM_SUCCESS;
}

symm_result_t symm_algo_from_name(const char *name, symm_algo_t *algo) {
  if (!name || !algo)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_algo_from_name: NULL argument");
  int i = name_index(algo_names, SYMM_ALGO_COUNT_, name, "algorithm");
  if (i < 0) return SYMM_ERR_INVALID_ARG;
  *algo = (symm_algo_t)i;
  return SYMM_SUCCESS;
}
