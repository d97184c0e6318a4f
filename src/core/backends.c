/* The backends: the built-in list's table, those registered, their names. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "backends/builtin.h"
#include "internal.h"

/* The built-in list (backends/builtin.h), in `auto` preference order. */
#define SYMM_TABLE_ENTRY(name) &symm_##name##_ops,
static const symm_backend_ops_t *const backend_table[] = {SYMM_BUILTIN_BACKENDS(SYMM_TABLE_ENTRY)};
#undef SYMM_TABLE_ENTRY

/* The table above, then backends registered at run time (tests), last in
 * `auto` order.  Registration happens before any communicator exists. */
#define MAX_BACKENDS (sizeof backend_table / sizeof backend_table[0] + 4)
static const symm_backend_ops_t *all_backends[MAX_BACKENDS];
static size_t backend_count;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* What a table must hold: the required members, a known version and
 * kind, and for every capability it claims the members it implies.  NULL
 * if it holds all that, else what it lacks. */
const char *symm_backend_table_lacks(const symm_backend_ops_t *o) {
  if (o->version < 1 || o->version > 6) return "a version in 1..6";
  if (o->mem_kind != SYMM_MEM_HOST && o->mem_kind != SYMM_MEM_DEVICE)
    return "a mem_kind (SYMM_MEM_HOST or SYMM_MEM_DEVICE)";
  if (!o->probe || !o->init || !o->fini || !o->granularity || !o->alloc || !o->free ||
      !o->map_peer || !o->unmap_peer)
    return "one of the required members (probe, init, fini, granularity, alloc, free, "
           "map_peer, unmap_peer)";
  if (o->caps.contiguous_view && (!o->contiguous_map || !o->contiguous_unmap))
    return "contiguous_map and contiguous_unmap, which caps.contiguous_view implies";
  if (o->caps.registers && (!o->register_mem || !o->deregister_mem))
    return "register_mem and deregister_mem, which caps.registers implies";
  if (o->caps.backend_handle && !o->backend_handle)
    return "backend_handle, which caps.backend_handle implies";
  if ((o->caps.takes_stream || o->caps.device_peer_array) && o->mem_kind != SYMM_MEM_DEVICE)
    return "mem_kind SYMM_MEM_DEVICE, which caps.takes_stream and caps.device_peer_array imply";
  if (o->caps.collective_free && !o->caps.collective_alloc)
    return "caps.collective_alloc, which caps.collective_free implies";
  if (o->version >= 4 && o->split && !o->split_release)
    return "split_release, which split implies";
  if (o->caps.registers_user &&
      (o->version < 6 || !o->register_user || !o->deregister_user))
    return "register_user and deregister_user (version 6), which caps.registers_user implies";
  return NULL;
}

static void table_init(void) {
  for (size_t i = 0; i < sizeof backend_table / sizeof backend_table[0]; i++) {
    const char *lacks = symm_backend_table_lacks(backend_table[i]);
    if (lacks) { /* a build that lists an incomplete table: left out, said loudly */
      SYMM_WARN(INIT, "backend %s left out: its table lacks %s", backend_table[i]->name, lacks);
      continue;
    }
    all_backends[backend_count++] = backend_table[i];
  }
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
  const char *lacks = symm_backend_table_lacks(ops);
  if (lacks)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_backend_register: backend %s's table lacks %s",
                      ops->name, lacks);
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
  if (backend == SYMM_BACKEND_AUTO) return "auto";
  const symm_backend_ops_t *ops = symm_backend_find(backend);
  return ops ? ops->name : NULL;
}

/* The backend named `name` (any case), else false with the valid names in
 * valid: "auto", then every table's, by id. */
static bool backend_by_name(const char *name, symm_backend_t *backend, char *valid, size_t cap) {
  if (strcasecmp(name, "auto") == 0) {
    *backend = SYMM_BACKEND_AUTO;
    return true;
  }
  size_t n;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  for (size_t i = 0; i < n; i++)
    if (strcasecmp(name, list[i]->name) == 0) {
      *backend = list[i]->id;
      return true;
    }
  size_t used = (size_t)snprintf(valid, cap, "auto");
  for (int id = 1; id < 32 && used < cap; id++) {
    const symm_backend_ops_t *ops = symm_backend_find((symm_backend_t)id);
    if (ops) used += (size_t)snprintf(valid + used, cap - used, ", %s", ops->name);
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
