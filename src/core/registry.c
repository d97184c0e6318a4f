/* Process-wide registry: address range -> (tensor, rank).  A sorted array of
 * disjoint ranges under a reader-writer lock: lookups (the hot path, from any
 * thread) are a binary search; inserts and removals move the tail, which is
 * cheap for the few thousand live allocations a process has. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
  uintptr_t base;
  size_t len;
  symm_tensor_t *tensor;
  int rank;
} registry_entry_t;

static pthread_rwlock_t registry_lock = PTHREAD_RWLOCK_INITIALIZER;
static registry_entry_t *entries;
static size_t n_entries, cap_entries;
/* Slots promised to symm_registry_reserve's callers: room that other adds
 * leave alone, so that a promised add needs no memory. */
static size_t n_reserved;

/* Room for `more` entries beyond the live and the promised ones; under the
 * write lock. */
static symm_result_t make_room(size_t more) {
  const size_t need = n_entries + n_reserved + more;
  if (need <= cap_entries) return SYMM_SUCCESS;
  size_t cap = cap_entries ? cap_entries * 2 : 64;
  if (cap < need) cap = need;
  registry_entry_t *grown = realloc(entries, cap * sizeof *grown);
  if (!grown) return symm_error(SYMM_ERR_NO_MEMORY, "registry: out of memory");
  entries = grown;
  cap_entries = cap;
  return SYMM_SUCCESS;
}

/* Index of the first entry whose base is > addr. */
static size_t upper_bound(uintptr_t addr) {
  size_t lo = 0, hi = n_entries;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (entries[mid].base <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

symm_result_t symm_registry_reserve(size_t n) {
  pthread_rwlock_wrlock(&registry_lock);
  symm_result_t res = make_room(n);
  if (res == SYMM_SUCCESS) n_reserved += n;
  pthread_rwlock_unlock(&registry_lock);
  return res;
}

void symm_registry_unreserve(size_t n) {
  pthread_rwlock_wrlock(&registry_lock);
  n_reserved -= n < n_reserved ? n : n_reserved;
  pthread_rwlock_unlock(&registry_lock);
}

static symm_result_t registry_insert(const void *base, size_t len, symm_tensor_t *tensor,
                                     int rank, bool reserved) {
  uintptr_t b = (uintptr_t)base;
  if (!base || len == 0) return symm_error(SYMM_ERR_INTERNAL, "registry: empty range");
  symm_result_t res = SYMM_SUCCESS;
  pthread_rwlock_wrlock(&registry_lock);
  size_t pos = upper_bound(b);
  if ((pos > 0 && entries[pos - 1].base + entries[pos - 1].len > b) ||
      (pos < n_entries && b + len > entries[pos].base)) {
    res = symm_error(SYMM_ERR_INTERNAL, "registry: range %p+%zu overlaps a live entry", base, len);
    goto out;
  }
  if (reserved && n_reserved > 0) n_reserved--; /* its slot is there: no memory needed */
  else SYMM_CHECK_GOTO(make_room(1), res, out);
  memmove(&entries[pos + 1], &entries[pos], (n_entries - pos) * sizeof *entries);
  entries[pos] = (registry_entry_t){b, len, tensor, rank};
  n_entries++;
out:
  pthread_rwlock_unlock(&registry_lock);
  return res;
}

symm_result_t symm_registry_add(const void *base, size_t len, symm_tensor_t *tensor, int rank) {
  return registry_insert(base, len, tensor, rank, false);
}

symm_result_t symm_registry_add_reserved(const void *base, size_t len, symm_tensor_t *tensor,
                                         int rank) {
  return registry_insert(base, len, tensor, rank, true);
}

void symm_registry_remove(const void *base) {
  uintptr_t b = (uintptr_t)base;
  pthread_rwlock_wrlock(&registry_lock);
  size_t pos = upper_bound(b);
  if (pos > 0 && entries[pos - 1].base == b) {
    memmove(&entries[pos - 1], &entries[pos], (n_entries - pos) * sizeof *entries);
    n_entries--;
  }
  if (n_entries == 0 && n_reserved == 0) {
    free(entries);
    entries = NULL;
    cap_entries = 0;
  }
  pthread_rwlock_unlock(&registry_lock);
}

bool symm_registry_find(const void *ptr, const void **base, size_t *len,
                        symm_tensor_t **tensor, int *rank) {
  uintptr_t p = (uintptr_t)ptr;
  bool found = false;
  pthread_rwlock_rdlock(&registry_lock);
  size_t pos = upper_bound(p);
  if (pos > 0 && p < entries[pos - 1].base + entries[pos - 1].len) {
    const registry_entry_t *e = &entries[pos - 1];
    if (base) *base = (const void *)e->base;
    if (len) *len = e->len;
    if (tensor) *tensor = e->tensor;
    if (rank) *rank = e->rank;
    found = true;
  }
  pthread_rwlock_unlock(&registry_lock);
  return found;
}

bool symm_registry_overlap(const void *base, size_t len, const void **ebase, size_t *elen,
                           symm_tensor_t **tensor, int *rank) {
  const uintptr_t b = (uintptr_t)base;
  bool found = false;
  pthread_rwlock_rdlock(&registry_lock);
  size_t pos = upper_bound(b);
  const registry_entry_t *e = NULL;
  if (pos > 0 && entries[pos - 1].base + entries[pos - 1].len > b) e = &entries[pos - 1];
  else if (pos < n_entries && b + len > entries[pos].base) e = &entries[pos];
  if (e) {
    *ebase = (const void *)e->base;
    *elen = e->len;
    *tensor = e->tensor;
    *rank = e->rank;
    found = true;
  }
  pthread_rwlock_unlock(&registry_lock);
  return found;
}

size_t symm_registry_count(void) {
  pthread_rwlock_rdlock(&registry_lock);
  size_t n = n_entries;
  pthread_rwlock_unlock(&registry_lock);
  return n;
}
