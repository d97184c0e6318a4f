/* The static backend table, backend and dtype names. */
#include <pthread.h>
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

/* The table above, then backends registered at run time (tests), last in
 * `auto` order.  Registration happens before any communicator exists. */
#define MAX_BACKENDS (sizeof backend_table / sizeof backend_table[0] + 4)
static const symm_backend_ops_t *all_backends[MAX_BACKENDS];
static size_t backend_count;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static void table_init(void) {
  for (size_t i = 0; i < sizeof backend_table / sizeof backend_table[0]; i++)
    all_backends[backend_count++] = backend_table[i];
}

const symm_backend_ops_t *const *symm_backend_list(size_t *count) {
  pthread_once(&table_once, table_init);
  if (count) *count = backend_count;
  return all_backends;
}

const symm_backend_ops_t *symm_backend_find(symm_backend_t id) {
  size_t n;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  for (size_t i = 0; i < n; i++)
    if (list[i]->id == id) return list[i];
  return NULL;
}

symm_result_t symm_backend_register(const symm_backend_ops_t *ops) {
  if (!ops || !ops->name || (unsigned)ops->id < SYMM_BACKEND_COUNT_ || ops->id >= 32)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_register: a backend needs a name and "
                      "an id in [%d, 32)", (int)SYMM_BACKEND_COUNT_);
  pthread_once(&table_once, table_init);
  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < backend_count && res == SYMM_SUCCESS; i++)
    if (all_backends[i]->id == ops->id || strcasecmp(all_backends[i]->name, ops->name) == 0)
      res = symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_register: backend %s (id %d) is "
                       "taken", ops->name, (int)ops->id);
  if (res == SYMM_SUCCESS && backend_count == MAX_BACKENDS)
    res = symm_error(SYMM_ERR_NO_MEMORY, "symm_backend_register: the table is full");
  if (res == SYMM_SUCCESS) all_backends[backend_count++] = ops;
  pthread_mutex_unlock(&table_lock);
  return res;
}

/* The bool member of ops->caps at byte offset cap_offset. */
static bool has_cap(const symm_backend_ops_t *ops, size_t cap_offset) {
  return *(const bool *)((const char *)&ops->caps + cap_offset);
}

void symm_backend_names_with(size_t cap_offset, char *out, size_t len) {
  size_t n, found = 0, used = 0;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  for (size_t i = 0; i < n; i++) found += has_cap(list[i], cap_offset);
  out[0] = 0;
  for (size_t i = 0, k = 0; i < n && used < len; i++) {
    if (!has_cap(list[i], cap_offset)) continue;
    const char *sep = k == 0 ? "" : k + 1 == found ? " or " : ", ";
    used += (size_t)snprintf(out + used, len - used, "%s%s", sep, list[i]->name);
    k++;
  }
  if (!found) snprintf(out, len, "no");
}

const char *symm_backend_name(symm_backend_t backend) {
  if ((unsigned)backend < SYMM_BACKEND_COUNT_) return backend_names[backend];
  const symm_backend_ops_t *ops = symm_backend_find(backend);
  return ops ? ops->name : NULL;
}

/* The backend named `name`, or NULL; the valid names in valid. */
static bool backend_by_name(const char *name, symm_backend_t *backend, char *valid, size_t cap) {
  for (int i = 0; i < SYMM_BACKEND_COUNT_; i++)
    if (strcasecmp(name, backend_names[i]) == 0) {
      *backend = (symm_backend_t)i;
      return true;
    }
  size_t n;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  size_t used = (size_t)snprintf(valid, cap, "auto, host, native, cuda, nccl, nvshmem");
  for (size_t i = 0; i < n; i++) {
    if (strcasecmp(name, list[i]->name) == 0) {
      *backend = list[i]->id;
      return true;
    }
    if ((unsigned)list[i]->id >= SYMM_BACKEND_COUNT_ && used < cap)
      used += (size_t)snprintf(valid + used, cap - used, ", %s", list[i]->name);
  }
  return false;
}

bool symm_backend_name_check(const char *text, char *why, size_t why_len) {
  char valid[256];
  symm_backend_t b;
  if (backend_by_name(text, &b, valid, sizeof valid)) return true;
  snprintf(why, why_len, "unknown backend; valid names: %s", valid);
  return false;
}

symm_result_t symm_backend_from_name(const char *name, symm_backend_t *backend) {
  if (!name || !backend)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_from_name: NULL argument");
  char valid[256];
  if (backend_by_name(name, backend, valid, sizeof valid)) return SYMM_SUCCESS;
  return symm_error(SYMM_ERR_INVALID_ARG, "unknown backend \"%s\"; valid names: %s", name,
                    valid);
}

symm_backend_t symm_backend_preferred(int index) {
  const size_t n = sizeof backend_table / sizeof backend_table[0];
  return index >= 0 && (size_t)index < n ? backend_table[index]->id : SYMM_BACKEND_AUTO;
}

symm_result_t symm_backend_describe(symm_backend_t backend, FILE *out) {
  const symm_backend_ops_t *ops = symm_backend_find(backend);
  if (!ops || !out)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_describe: %s",
                      out ? "unknown backend" : "out is NULL");
  if (SYMM_OPS_HAS(ops, 1, describe)) ops->describe(out);
  return SYMM_SUCCESS;
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
  return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "backend %s unavailable: %s",
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
