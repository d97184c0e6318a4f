/* Symmetric tensors: allocation through the backend (local, or collective
 * with cross-rank checks), free (to the pool or released), and the release
 * of every tensor of a communicator at its destroy. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "symm_fault.h"

/* ------------------------------------------------------------------ list */

static void link_tensor(symm_comm_t *comm, symm_tensor_t *t) {
  t->prev = NULL;
  t->next = comm->tensors;
  if (comm->tensors) comm->tensors->prev = t;
  comm->tensors = t;
}

static void unlink_tensor(symm_comm_t *comm, symm_tensor_t *t) {
  if (t->prev) t->prev->next = t->next;
  else comm->tensors = t->next;
  if (t->next) t->next->prev = t->prev;
  t->prev = t->next = NULL;
}

/* ----------------------------------------------------------------- alloc */

symm_result_t symm_tensor_shell(symm_comm_t *comm, symm_tensor_t **out) {
  symm_tensor_t *t = calloc(1, sizeof *t);
  if (t) {
    t->peers = calloc((size_t)comm->size, sizeof *t->peers);
    t->infos = calloc((size_t)comm->size, sizeof *t->infos);
    t->peer_data = calloc((size_t)comm->size, sizeof *t->peer_data);
  }
  if (!t || !t->peers || !t->infos || !t->peer_data) {
    if (t) {
      free(t->peers);
      free(t->infos);
      free(t->peer_data);
      free(t);
    }
    return symm_error(SYMM_ERR_NO_MEMORY, "symm_tensor_alloc: out of host memory");
  }
  t->state = SYMM_TENSOR_LIVE;
  t->comm = comm;
  t->mem.pad_bytes = comm->pad_bytes;
  t->mem.device = comm->device;
  pthread_mutex_lock(&comm->lock);
  t->mem.id = ++comm->next_mem_id;
  pthread_mutex_unlock(&comm->lock);
  *out = t;
  return SYMM_SUCCESS;
}

static symm_result_t fresh_tensor(symm_comm_t *comm, size_t data_offset, size_t nbytes,
                                  size_t alloc_bytes, symm_tensor_t **out) {
  symm_tensor_t *t;
  SYMM_CHECK(symm_tensor_shell(comm, &t));
  t->mem.data_offset = data_offset;
  t->mem.alloc_bytes = alloc_bytes;
  symm_result_t res = comm->ops->alloc(comm, &t->mem);
  if (res != SYMM_SUCCESS) {
    t->mem.base = NULL;
    symm_tensor_destroy(t);
    return res;
  }
  *out = t;
  return SYMM_SUCCESS;
}

/* What the ranks compare before a collective allocation. */
typedef struct {
  int32_t ndim, dtype;
  int64_t sizes[SYMM_MAX_DIMS];
  uint64_t alloc_bytes;
  uint64_t alloc_seq;   /* collective allocations this rank made before */
  uint64_t pooled_seq;  /* the pooled allocation this rank could reuse, 0: none */
} alloc_args_t;

/* alloc_args_t.ndim of a rank whose call failed its argument checks:
 * it still takes its place in the round, so that its peers fail with it
 * (SYMM_ERR_MISMATCH naming it) instead of pairing with its next call. */
#define ALLOC_REFUSED (-1)

static void describe_alloc(const alloc_args_t *a, char *out, size_t cap) {
  if (a->ndim == ALLOC_REFUSED) {
    snprintf(out, cap, "arguments it refused");
    return;
  }
  size_t n = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < a->ndim && d < SYMM_MAX_DIMS && n < cap; d++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)a->sizes[d]);
  const char *dt = symm_dtype_name((symm_dtype_t)a->dtype);
  if (n < cap) snprintf(out + n, cap - n, "] %s", dt ? dt : "?");
}

/* A backend whose alloc is collective (caps.collective_alloc): every rank
 * says what it allocates first, so that ranks asking for different sizes
 * (or in a different order) all get SYMM_ERR_MISMATCH instead of a hang in
 * the provider; a pooled allocation is reused only where every rank would
 * reuse the same one. */
static symm_result_t alloc_collective(symm_comm_t *comm, const alloc_args_t *mine_in,
                                      size_t data_offset, size_t nbytes, symm_tensor_t **out) {
  alloc_args_t mine = *mine_in;
  mine.alloc_seq = comm->alloc_seq;
  symm_tensor_t *pooled = symm_pool_find(comm, mine.alloc_bytes, 0, false);
  mine.pooled_seq = pooled ? pooled->alloc_seq : 0;
  alloc_args_t *all = calloc((size_t)comm->size, sizeof *all);
  symm_result_t res;
  bool room = false; /* a registry slot is promised to the allocation */
  if (!all) {
    /* Still meets the peers, in the round and in the agreement that
     * follows it, so that they fail with this rank now. */
    res = symm_error(SYMM_ERR_NO_MEMORY, "symm_tensor_alloc: out of memory");
    char saved[256];
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    if (symm_comm_allgather_op(comm, SYMM_TAG_ALLOC, &mine, sizeof mine, NULL) != SYMM_SUCCESS)
      return symm_error(res, "%s", saved);
    symm_error_restore(saved);
    return symm_comm_agree(comm, res, "collective allocation");
  }
  SYMM_CHECK_GOTO(symm_comm_allgather_op(comm, SYMM_TAG_ALLOC, &mine, sizeof mine, all), res,
                  out);
  bool reuse = mine.pooled_seq != 0;
  for (int r = 0; r < comm->size; r++) {
    const alloc_args_t *o = &all[r];
    if (o->ndim == ALLOC_REFUSED) {
      res = symm_error(SYMM_ERR_MISMATCH,
                       "symm_tensor_alloc: rank %d's call failed its argument checks there "
                       "(SYMM_ERR_INVALID_ARG); the %s backend allocates collectively, so it "
                       "fails on every rank", r, comm->ops->name);
      goto out;
    }
    if (o->ndim != mine.ndim || o->dtype != mine.dtype || o->alloc_bytes != mine.alloc_bytes ||
        memcmp(o->sizes, mine.sizes, sizeof o->sizes) != 0 || o->alloc_seq != mine.alloc_seq) {
      char a[160], b[160];
      describe_alloc(o, a, sizeof a);
      describe_alloc(&mine, b, sizeof b);
      res = symm_error(SYMM_ERR_MISMATCH,
                       "symm_tensor_alloc: the %s backend allocates collectively, and rank %d "
                       "asked for %s (its allocation %llu) while rank %d asked for %s (its "
                       "allocation %llu)", comm->ops->name, r, a,
                       (unsigned long long)o->alloc_seq + 1, comm->rank, b,
                       (unsigned long long)mine.alloc_seq + 1);
      goto out;
    }
    reuse &= o->pooled_seq == mine.pooled_seq;
  }
  /* The registration that follows the agreement must not fail on one rank
   * alone: its room is part of what the ranks agree on. */
  symm_result_t local = symm_registry_reserve(1);
  room = local == SYMM_SUCCESS;
  if (reuse) {
    symm_tensor_t *t = room ? symm_pool_find(comm, mine.alloc_bytes, mine.pooled_seq, true) : NULL;
    if (room) local = t ? symm_pool_reuse(comm, t) : SYMM_ERR_INTERNAL;
    res = symm_comm_agree(comm, local, "pool reuse");
    if (res == SYMM_SUCCESS) *out = t;
    goto out;
  }
  symm_tensor_t *t = NULL;
  if (room) local = fresh_tensor(comm, data_offset, nbytes, mine.alloc_bytes, &t);
  res = symm_comm_agree(comm, local, "collective allocation");
  if (res == SYMM_SUCCESS && comm->caps.registers) {
    res = symm_comm_agree(comm, comm->ops->register_mem(comm, &t->mem), "registration");
    t->registered = res == SYMM_SUCCESS;
  }
  if (res != SYMM_SUCCESS) {
    if (t) symm_tensor_destroy(t);
    goto out;
  }
  t->alloc_seq = ++comm->alloc_seq;
  *out = t;
out:
  if (room && res != SYMM_SUCCESS) symm_registry_unreserve(1);
  free(all);
  return res;
}

/* A local allocation: a pooled one of this size, or a fresh one. */
static symm_result_t alloc_local(symm_comm_t *comm, size_t data_offset, size_t nbytes,
                                 size_t alloc_bytes, symm_tensor_t **out) {
  symm_tensor_t *t = symm_pool_find(comm, alloc_bytes, 0, true);
  if (t) {
    SYMM_CHECK(symm_pool_reuse(comm, t));
    *out = t;
    return SYMM_SUCCESS;
  }
  SYMM_TRACE(ALLOC, "alloc of %zu bytes: fresh", alloc_bytes);
  SYMM_CHECK(fresh_tensor(comm, data_offset, nbytes, alloc_bytes, &t));
  SYMM_TRACE(ALLOC, "alloc of %zu bytes: done (mem %llu)", alloc_bytes,
             (unsigned long long)t->mem.id);
  *out = t;
  return SYMM_SUCCESS;
}

/* The checks of symm_tensor_alloc's arguments: element and byte counts,
 * and the bytes to allocate with the pad, rounded to the granularity. */
static symm_result_t check_alloc(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                 symm_dtype_t dtype, size_t *numel, size_t *nbytes,
                                 size_t *data_offset, size_t *alloc_bytes) {
  SYMM_CHECK(symm_shape_check(sizes, ndim, dtype, numel, nbytes));
  size_t gran = comm->ops->granularity(comm);
  *data_offset = symm_round_up(comm->pad_bytes, gran);
  if (__builtin_add_overflow(*data_offset, *nbytes, alloc_bytes) ||
      *alloc_bytes + gran < *alloc_bytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: byte size overflows");
  *alloc_bytes = symm_round_up(*alloc_bytes, gran);
  return SYMM_SUCCESS;
}

/* This rank's side of a collective allocation whose arguments it refused
 * (`refused`, its error): it takes part in the allocation's round marked
 * ALLOC_REFUSED, so the call keeps its place in every rank's order, and
 * returns its own error. */
static symm_result_t refuse_collective_alloc(symm_comm_t *comm, symm_result_t refused) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  alloc_args_t args;
  memset(&args, 0, sizeof args);
  args.ndim = ALLOC_REFUSED;
  args.alloc_seq = comm->alloc_seq;
  symm_call_begin(comm, true, "symm_tensor_alloc", "symm_tensor_alloc(arguments it refused)");
  (void)symm_comm_allgather_op(comm, SYMM_TAG_ALLOC, &args, sizeof args, NULL);
  symm_call_end(comm);
  return symm_error(refused, "%s", saved);
}

/* symm_tensor_alloc.  On failure, *alone says whether this rank failed on
 * its own while its peers may have succeeded: an allocation of its own, or
 * its registration; a collective allocation fails on every rank alike. */
symm_result_t symm_tensor_alloc_step(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                     symm_dtype_t dtype, symm_tensor_t **out, bool *alone) {
  *alone = false;
  *out = NULL;
  size_t numel = 0, nbytes = 0, data_offset = 0, alloc_bytes = 0;
  /* A registration is collective, so an allocation that needs one is too. */
  const bool collective = comm->caps.collective_alloc || comm->caps.registers;
  symm_result_t checked =
      check_alloc(comm, sizes, ndim, dtype, &numel, &nbytes, &data_offset, &alloc_bytes);
  if (checked != SYMM_SUCCESS) {
    if (collective) return refuse_collective_alloc(comm, checked);
    *alone = true; /* a local allocation: its peers' may have succeeded */
    return checked;
  }
  symm_fault_point(SYMM_FAULT_ALLOC, comm->rank);

  symm_tensor_t *t = NULL;
  if (collective) {
    alloc_args_t args;
    memset(&args, 0, sizeof args);
    args.ndim = ndim;
    args.dtype = (int32_t)dtype;
    memcpy(args.sizes, sizes, sizeof *sizes * (size_t)ndim);
    args.alloc_bytes = alloc_bytes;
    char desc[80];
    describe_alloc(&args, desc, sizeof desc);
    symm_call_begin(comm, true, "symm_tensor_alloc", "symm_tensor_alloc(%s)", desc);
    symm_result_t res = alloc_collective(comm, &args, data_offset, nbytes, &t);
    symm_call_end(comm);
    SYMM_CHECK(res);
  } else {
    *alone = true;
    SYMM_CHECK(alloc_local(comm, data_offset, nbytes, alloc_bytes, &t));
  }
  symm_tensor_set_shape(t, sizes, ndim, dtype, numel, nbytes);
  t->rendezvoused = false;
  t->mempool = false; /* a pooled block of symm_mempool_alloc is the user's now */
  void *data = symm_tensor_local_data(t);
  t->peer_data[comm->rank] = data;
  /* A collective allocation's slot was promised in its agreement. */
  const size_t span = symm_tensor_data_span(t);
  symm_result_t res = collective ? symm_registry_add_reserved(data, span, t, comm->rank)
                                 : symm_registry_add(data, span, t, comm->rank);
  if (res != SYMM_SUCCESS) {
    *alone = true;
    symm_tensor_destroy(t);
    return res;
  }
  symm_tensor_link(comm, t);
  *out = t;
  return SYMM_SUCCESS;
}

void symm_tensor_link(symm_comm_t *comm, symm_tensor_t *t) {
  pthread_mutex_lock(&comm->lock);
  link_tensor(comm, t);
  pthread_mutex_unlock(&comm->lock);
}

symm_result_t symm_tensor_alloc(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                symm_dtype_t dtype, symm_tensor_t **out) {
  if (!comm || !out)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: %s is NULL", comm ? "tensor" : "comm");
  bool alone;
  return symm_tensor_alloc_step(comm, sizes, ndim, dtype, out, &alone);
}

/* ------------------------------------------------------------------ free */

/* The user's memory is never pooled: a registered tensor is released,
 * and its pad tensor goes the way of an allocation. */
void symm_tensor_retire(symm_comm_t *comm, symm_tensor_t *t, bool pool) {
  symm_tensor_t *pad = t->pad_tensor;
  pthread_mutex_lock(&comm->lock);
  unlink_tensor(comm, t);
  const bool pooled = pool && !t->mem.user && symm_pool_add_locked(comm, t);
  pthread_mutex_unlock(&comm->lock);
  if (!pooled) symm_tensor_destroy(t);
  if (pad) {
    symm_tensor_detach(pad);
    symm_tensor_retire(comm, pad, pool);
  }
}

/* The allocation a free may pool: a registered tensor's pad tensor. */
static size_t poolable_bytes(const symm_tensor_t *t) {
  return symm_tensor_pad_holder(t)->mem.alloc_bytes;
}

/* What the ranks compare before a collective free. */
typedef struct {
  uint64_t alloc_seq; /* the allocation freed */
  uint32_t pool;      /* this rank has room to pool it */
  uint32_t reserved;
} free_args_t;

/* A backend whose free is collective (caps.collective_free): every rank
 * must free the same allocation now.  Ranks that free different ones all
 * get SYMM_ERR_MISMATCH and their tensors stay as they were; the
 * allocation goes to the pool only where every rank would pool it (else
 * one rank would wait in the provider's free for the others). */
static symm_result_t free_collective(symm_comm_t *comm, symm_tensor_t *t) {
  free_args_t mine = {t->alloc_seq, symm_pool_has_room(comm, poolable_bytes(t)), 0};
  free_args_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "symm_tensor_free: out of memory");
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_FREE, &mine, sizeof mine, all);
  bool pool = mine.pool != 0;
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++) {
    if (all[r].alloc_seq != mine.alloc_seq)
      res = symm_error(SYMM_ERR_MISMATCH,
                       "symm_tensor_free: the %s backend frees collectively, and rank %d freed "
                       "its allocation %llu while rank %d freed its allocation %llu; free "
                       "tensors in the same order on every rank (nothing was freed)",
                       comm->ops->name, r, (unsigned long long)all[r].alloc_seq, comm->rank,
                       (unsigned long long)mine.alloc_seq);
    pool &= all[r].pool != 0;
  }
  free(all);
  if (res != SYMM_SUCCESS) return res;
  symm_tensor_detach(t);
  symm_tensor_retire(comm, t, pool);
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_free(symm_tensor_t *t) {
  if (!t) return SYMM_SUCCESS;
  if (t->mempool)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_free: a block of symm_mempool_alloc "
                      "belongs to its memory manager (symm_mempool_free gives it back)");
  if (t->state == SYMM_TENSOR_ORPHANED) {
    t->state = 0;
    free(t);
    return symm_error(SYMM_ERR_STATE, "symm_tensor_free: the tensor's communicator was "
                      "destroyed first, which freed its memory (the handle is released now)");
  }
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_free"));
  symm_comm_t *comm = t->comm;
  symm_fault_point(SYMM_FAULT_FREE, comm->rank);
  if (comm->caps.collective_free) {
    symm_call_begin(comm, true, "symm_tensor_free", "symm_tensor_free(its allocation %llu)",
                    (unsigned long long)t->alloc_seq);
    symm_result_t res = free_collective(comm, t);
    symm_call_end(comm);
    return res;
  }
  symm_tensor_detach(t);
  symm_tensor_retire(comm, t, symm_pool_has_room(comm, poolable_bytes(t)));
  return SYMM_SUCCESS;
}

void symm_comm_release_tensors(symm_comm_t *comm) {
  comm->scratch = NULL; /* a live tensor like the others: freed below */
  pthread_mutex_lock(&comm->lock);
  size_t n = 0;
  for (symm_tensor_t *t = comm->tensors; t; t = t->next) n++;
  symm_tensor_t **live = malloc(sizeof *live * (n ? n : 1));
  size_t i = 0;
  while (comm->tensors) {
    symm_tensor_t *t = comm->tensors;
    unlink_tensor(comm, t);
    if (live) live[i++] = t;
    else { /* out of memory: in any order */
      symm_tensor_detach(t);
      symm_tensor_release(t, !t->internal);
    }
  }
  pthread_mutex_unlock(&comm->lock);
  for (size_t k = 0; k < i; k++) symm_tensor_detach(live[k]);
  symm_tensor_t **pooled = NULL;
  size_t np = 0;
  if (symm_pool_drain(comm, &pooled, &np, NULL) != SYMM_SUCCESS) np = 0;
  /* Live and pooled together, so that a collective free sees one order. */
  symm_tensor_t **all = live ? realloc(live, sizeof *all * (i + np + 1)) : NULL;
  if (all) {
    memcpy(all + i, pooled, sizeof *all * np);
    symm_tensor_release_in_order(comm, all, i + np, true);
  } else {
    symm_tensor_release_in_order(comm, live, i, true);
    symm_tensor_release_in_order(comm, pooled, np, true);
    free(live);
  }
  free(all);
  free(pooled);
}
