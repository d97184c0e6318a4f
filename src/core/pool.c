/* The pool of freed allocations: a freed tensor keeps its memory and peer
 * mappings there (up to the communicator's pool limit) for the next
 * allocation of the same rounded size, until symm_comm_pool_trim or
 * symm_comm_destroy releases it. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"

/* A pooled allocation is a whole tensor struct kept with its mappings. */
struct symm_pool_entry {
  symm_tensor_t *tensor;
  struct symm_pool_entry *next;
};

/* Takes a pooled allocation of exactly this rounded size (and, when
 * alloc_seq is not 0, that collective allocation), if any.  With take
 * false it stays in the pool. */
symm_tensor_t *symm_pool_find(symm_comm_t *comm, size_t alloc_bytes, uint64_t alloc_seq,
                              bool take) {
  symm_tensor_t *t = NULL;
  pthread_mutex_lock(&comm->lock);
  for (struct symm_pool_entry **pp = &comm->pool; *pp; pp = &(*pp)->next) {
    if ((*pp)->tensor->mem.alloc_bytes != alloc_bytes) continue;
    if (alloc_seq && (*pp)->tensor->alloc_seq != alloc_seq) continue;
    if (!take) {
      t = (*pp)->tensor;
      break;
    }
    struct symm_pool_entry *e = *pp;
    *pp = e->next;
    t = e->tensor;
    t->pooled = false;
    t->internal = false;
    comm->pool_bytes -= alloc_bytes;
    free(e);
    break;
  }
  pthread_mutex_unlock(&comm->lock);
  return t;
}

/* Signals left by the last user of a pooled allocation must not leak into
 * the new one.  An allocation whose pad cannot be reset is released, not
 * lost. */
symm_result_t symm_pool_reuse(symm_comm_t *comm, symm_tensor_t *t) {
  void *pad = (char *)t->mem.base + t->mem.pad_offset;
  symm_result_t res = SYMM_OPS_HAS(comm->ops, 1, reset_pad)
                          ? comm->ops->reset_pad(comm, &t->mem)
                          : comm->engine->zero(comm, pad, t->mem.pad_bytes);
  if (res != SYMM_SUCCESS) {
    SYMM_INFO(ALLOC, "pooled mem %llu: resetting its pad failed: %s",
              (unsigned long long)t->mem.id, symm_last_error());
    symm_tensor_destroy(t);
    return res;
  }
  SYMM_TRACE(ALLOC, "pool hit: %zu bytes (mem %llu)", t->mem.alloc_bytes,
             (unsigned long long)t->mem.id);
  return SYMM_SUCCESS;
}

bool symm_pool_has_room(symm_comm_t *comm, size_t bytes) {
  pthread_mutex_lock(&comm->lock);
  bool room = comm->pool_limit && comm->pool_bytes + bytes <= comm->pool_limit;
  pthread_mutex_unlock(&comm->lock);
  return room;
}

/* Puts t in the pool (comm->lock held); false, and t stays out, when there
 * is no memory for the entry. */
bool symm_pool_add_locked(symm_comm_t *comm, symm_tensor_t *t) {
  struct symm_pool_entry *e = malloc(sizeof *e);
  if (!e) return false;
  t->pooled = true;
  e->tensor = t;
  e->next = comm->pool;
  comm->pool = e;
  comm->pool_bytes += t->mem.alloc_bytes;
  return true;
}

/* Empties the pool: its tensors in *list (malloc'd), their count in *n. */
symm_result_t symm_pool_drain(symm_comm_t *comm, symm_tensor_t ***list, size_t *n,
                              size_t *bytes) {
  pthread_mutex_lock(&comm->lock);
  size_t count = 0;
  for (struct symm_pool_entry *e = comm->pool; e; e = e->next) count++;
  symm_tensor_t **out = malloc(sizeof *out * (count ? count : 1));
  if (!out) {
    pthread_mutex_unlock(&comm->lock);
    return symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_pool_trim: out of memory");
  }
  size_t i = 0;
  for (struct symm_pool_entry *e = comm->pool, *next; e; e = next) {
    next = e->next;
    out[i++] = e->tensor;
    free(e);
  }
  if (bytes) *bytes = comm->pool_bytes;
  comm->pool = NULL;
  comm->pool_bytes = 0;
  pthread_mutex_unlock(&comm->lock);
  *list = out;
  *n = count;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_pool_trim(symm_comm_t *comm, size_t *released) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_pool_trim: comm is NULL");
  if (comm->caps.collective_free) {
    /* Every rank trims the same allocations (its pool's history is the
     * ranks' common one: pooling was agreed at each free). */
    uint64_t mine = 0;
    pthread_mutex_lock(&comm->lock);
    for (struct symm_pool_entry *e = comm->pool; e; e = e->next)
      mine = symm_hash64(&e->tensor->alloc_seq, sizeof e->tensor->alloc_seq, mine ^ 0x9e37u);
    pthread_mutex_unlock(&comm->lock);
    uint64_t *all = calloc((size_t)comm->size, sizeof *all);
    if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_pool_trim: out of memory");
    symm_call_begin(comm, true, "symm_comm_pool_trim", "symm_comm_pool_trim");
    symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_FREE, &mine, sizeof mine, all);
    symm_call_end(comm);
    for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++)
      if (all[r] != mine)
        res = symm_error(SYMM_ERR_MISMATCH, "symm_comm_pool_trim: rank %d pools other "
                         "allocations than rank %d (nothing was released)", r, comm->rank);
    free(all);
    SYMM_CHECK(res);
  }
  symm_tensor_t **list;
  size_t n, bytes = 0;
  SYMM_CHECK(symm_pool_drain(comm, &list, &n, &bytes));
  symm_tensor_release_in_order(comm, list, n, false);
  free(list);
  if (released) *released = bytes;
  return SYMM_SUCCESS;
}
