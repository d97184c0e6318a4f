/* The static backend table, backend and dtype names. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* In `auto` preference order: GPU first, host last. */
static const symm_backend_ops_t *const backend_table[] = {
    &symm_native_ops, &symm_cuda_ops, &symm_nccl_ops, &symm_nvshmem_ops, &symm_host_ops,
};

static const char *const backend_names[SYMM_BACKEND_COUNT_] = {
    "auto", "host", "native", "cuda", "nccl", "nvshmem"};

const symm_backend_ops_t *const *symm_backend_list(size_t *count) {
  if (count) *count = sizeof backend_table / sizeof backend_table[0];
  return backend_table;
}

const symm_backend_ops_t *symm_backend_find(symm_backend_t id) {
  for (size_t i = 0; i < sizeof backend_table / sizeof backend_table[0]; i++)
    if (backend_table[i]->id == id) return backend_table[i];
  return NULL;
}

const char *symm_backend_name(symm_backend_t backend) {
  if ((unsigned)backend >= SYMM_BACKEND_COUNT_) return NULL;
  return backend_names[backend];
}

symm_result_t symm_backend_from_name(const char *name, symm_backend_t *backend) {
  if (!name || !backend)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_from_name: NULL argument");
  for (int i = 0; i < SYMM_BACKEND_COUNT_; i++)
    if (strcasecmp(name, backend_names[i]) == 0) {
      *backend = (symm_backend_t)i;
      return SYMM_SUCCESS;
    }
  return symm_error(SYMM_ERR_INVALID_ARG,
                    "unknown backend \"%s\"; valid names: auto, host, native, cuda, nccl, nvshmem",
                    name);
}

symm_result_t symm_backend_available(symm_backend_t backend, char *why, size_t why_len) {
  char reason[512] = "";
  if (backend == SYMM_BACKEND_AUTO) return SYMM_SUCCESS; /* host always remains */
  const symm_backend_ops_t *ops = symm_backend_find(backend);
  if (!ops) {
    snprintf(reason, sizeof reason, "backend value %d out of range", (int)backend);
  } else if (ops->probe(reason, sizeof reason) == SYMM_SUCCESS) {
    return SYMM_SUCCESS;
  }
  if (why && why_len) snprintf(why, why_len, "%s", reason);
  return symm_error(SYMM_ERR_UNSUPPORTED, "backend %s unavailable: %s",
                    ops ? ops->name : "?", reason);
}

static const struct {
  const char *name;
  size_t size;
} dtypes[SYMM_DTYPE_COUNT_] = {
    {"f16", 2}, {"bf16", 2}, {"f32", 4}, {"f64", 8}, {"i8", 1},  {"i16", 2},
    {"i32", 4}, {"i64", 8},  {"u8", 1},  {"u16", 2}, {"u32", 4}, {"u64", 8},
};

size_t symm_dtype_size(symm_dtype_t dtype) {
  return (unsigned)dtype < SYMM_DTYPE_COUNT_ ? dtypes[dtype].size : 0;
}

const char *symm_dtype_name(symm_dtype_t dtype) {
  return (unsigned)dtype < SYMM_DTYPE_COUNT_ ? dtypes[dtype].name : NULL;
}

symm_result_t symm_dtype_from_name(const char *name, symm_dtype_t *dtype) {
  if (!name || !dtype)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_dtype_from_name: NULL argument");
  for (int i = 0; i < SYMM_DTYPE_COUNT_; i++)
    if (strcasecmp(name, dtypes[i].name) == 0) {
      *dtype = (symm_dtype_t)i;
      return SYMM_SUCCESS;
    }
  return symm_error(SYMM_ERR_INVALID_ARG,
                    "unknown dtype \"%s\"; valid names: f16, bf16, f32, f64, i8, i16, i32, "
                    "i64, u8, u16, u32, u64",
                    name);
}
