/* Symmetric tensors: shape logic, allocation through the backend, the pool
 * of freed-but-mapped allocations, rendezvous with cross-rank validation,
 * views, lookup and validation through the registry. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "symm_fault.h"

/* A pooled allocation is a whole tensor struct kept with its mappings. */
struct symm_pool_entry {
  symm_tensor_t *tensor;
  struct symm_pool_entry *next;
};

/* ---------------------------------------------------------------- shapes */

static symm_result_t check_shape(const int64_t *sizes, int ndim, symm_dtype_t dtype,
                                 size_t *numel, size_t *nbytes) {
  if (!sizes) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: sizes is NULL");
  if (ndim < 1 || ndim > SYMM_MAX_DIMS)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: ndim %d not in [1, %d]", ndim,
                      SYMM_MAX_DIMS);
  size_t esize = symm_dtype_size(dtype);
  if (!esize) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: bad dtype %d", (int)dtype);
  size_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] <= 0)
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "symm_tensor_alloc: size %lld of dimension %d must be positive",
                        (long long)sizes[d], d);
    if (__builtin_mul_overflow(n, (size_t)sizes[d], &n))
      return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: element count overflows");
  }
  size_t bytes;
  if (__builtin_mul_overflow(n, esize, &bytes) || bytes > ((size_t)1 << 56))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: byte size overflows");
  *numel = n;
  *nbytes = bytes;
  return SYMM_SUCCESS;
}

static void set_shape(symm_tensor_t *t, const int64_t *sizes, int ndim, symm_dtype_t dtype,
                      size_t numel, size_t nbytes) {
  t->ndim = ndim;
  t->dtype = dtype;
  t->numel = numel;
  t->nbytes = nbytes;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t->sizes[d] = sizes[d];
    t->strides[d] = stride;
    stride *= sizes[d];
  }
  for (int d = ndim; d < SYMM_MAX_DIMS; d++) t->sizes[d] = t->strides[d] = 0;
}

static inline void *data_of(const symm_tensor_t *t) {
  return (char *)t->mem.base + t->mem.data_offset;
}

/* Registered span of one rank's allocation: the data and the rounding
 * behind it (interior pointers anywhere in there find the tensor). */
static inline size_t data_span(const symm_tensor_t *t) {
  return t->mem.alloc_bytes - t->mem.data_offset;
}

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

/* ------------------------------------------------------------ mappings */

static void unregister_peers(symm_tensor_t *t) {
  for (int r = 0; t->peers && r < t->comm->size; r++)
    if (r != t->comm->rank && t->peers[r].base)
      symm_registry_remove((char *)t->peers[r].base + t->infos[r].data_offset);
}

/* Registers the mapped peers, each with one of the registry's promised
 * slots (symm_registry_reserve); *used counts those taken. */
static symm_result_t register_peers(symm_tensor_t *t, size_t *used) {
  for (int r = 0; r < t->comm->size; r++) {
    if (r == t->comm->rank || !t->peers[r].base) continue;
    size_t span = t->infos[r].alloc_bytes - t->infos[r].data_offset;
    symm_result_t res = symm_registry_add_reserved(
        (char *)t->peers[r].base + t->infos[r].data_offset, span, t, r);
    if (res == SYMM_SUCCESS) ++*used;
    if (res != SYMM_SUCCESS) {
      for (int q = 0; q < r; q++)
        if (q != t->comm->rank && t->peers[q].base)
          symm_registry_remove((char *)t->peers[q].base + t->infos[q].data_offset);
      return res;
    }
  }
  return SYMM_SUCCESS;
}

static void drop_contiguous(symm_tensor_t *t) {
  if (!t->contig_base) return;
  symm_registry_remove(t->contig_base);
  t->comm->ops->contiguous_unmap(t->comm, t->contig_base, t->contig_bytes, t->contig_priv);
  t->contig_base = NULL;
  t->contig_priv = NULL;
}

static void unmap_peer_slot(symm_tensor_t *t, int r) {
  if (!t->peers[r].base) return;
  t->comm->ops->unmap_peer(t->comm, &t->peers[r]);
  memset(&t->peers[r], 0, sizeof t->peers[r]);
  t->peer_data[r] = NULL;
}

/* The device arrays of peer pointers (data, pads): made on demand, gone
 * when the peers' addresses change. */
static void drop_peer_data_dev(symm_tensor_t *t) {
  if (t->peer_data_dev) t->comm->engine->device_free(t->comm, t->peer_data_dev);
  if (t->pad_ptrs_dev) t->comm->engine->device_free(t->comm, t->pad_ptrs_dev);
  t->peer_data_dev = t->pad_ptrs_dev = NULL;
}

symm_result_t symm_tensor_usable(const symm_tensor_t *t, const char *fn) {
  if (!t) return symm_error(SYMM_ERR_INVALID_ARG, "%s: tensor is NULL", fn);
  if (t->state == SYMM_TENSOR_LIVE) return SYMM_SUCCESS;
  if (t->state == SYMM_TENSOR_ORPHANED)
    return symm_error(SYMM_ERR_STATE, "%s: the tensor's communicator was destroyed (only "
                      "symm_tensor_free may still be called on it)", fn);
  return symm_error(SYMM_ERR_INVALID_ARG, "%s: not a tensor handle (freed already?)", fn);
}

/* Releases everything the tensor holds but the struct, which `orphan`
 * keeps (state ORPHANED) for a handle the user still holds; else frees it. */
static void release_tensor(symm_tensor_t *t, bool orphan) {
  symm_comm_t *comm = t->comm;
  drop_peer_data_dev(t);
  drop_contiguous(t);
  if (t->peers)
    for (int r = 0; r < comm->size; r++)
      if (r != comm->rank) unmap_peer_slot(t, r);
  if (t->registered) comm->ops->deregister_mem(comm, &t->mem);
  if (t->mem.base) comm->ops->free(comm, &t->mem);
  free(t->peers);
  free(t->infos);
  free(t->peer_data);
  if (!orphan) {
    t->state = 0;
    free(t);
    return;
  }
  t->peers = NULL;
  t->infos = NULL;
  t->peer_data = NULL;
  t->peer_data_dev = t->pad_ptrs_dev = t->contig_base = NULL;
  memset(&t->mem, 0, sizeof t->mem);
  t->rendezvoused = false;
  t->comm = NULL;
  t->state = SYMM_TENSOR_ORPHANED;
}

static void destroy_tensor(symm_tensor_t *t) { release_tensor(t, false); }

/* ----------------------------------------------------------------- alloc */

/* Takes a pooled allocation of exactly this rounded size (and, when
 * alloc_seq is not 0, that collective allocation), if any.  With take
 * false it stays in the pool. */
static symm_tensor_t *pool_find(symm_comm_t *comm, size_t alloc_bytes, uint64_t alloc_seq,
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

static symm_result_t fresh_tensor(symm_comm_t *comm, size_t data_offset, size_t nbytes,
                                  size_t alloc_bytes, symm_tensor_t **out) {
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
  t->mem.data_offset = data_offset;
  t->mem.alloc_bytes = alloc_bytes;
  t->mem.pad_bytes = comm->pad_bytes;
  t->mem.device = comm->device;
  pthread_mutex_lock(&comm->lock);
  t->mem.id = ++comm->next_mem_id;
  pthread_mutex_unlock(&comm->lock);
  symm_result_t res = comm->ops->alloc(comm, &t->mem);
  if (res != SYMM_SUCCESS) {
    t->mem.base = NULL;
    destroy_tensor(t);
    return res;
  }
  *out = t;
  return SYMM_SUCCESS;
}

/* Signals left by the last user of a pooled allocation must not leak into
 * the new one.  An allocation whose pad cannot be reset is released, not
 * lost. */
static symm_result_t reuse_pooled(symm_comm_t *comm, symm_tensor_t *t) {
  void *pad = (char *)t->mem.base + t->mem.pad_offset;
  symm_result_t res = SYMM_OPS_HAS(comm->ops, 1, reset_pad)
                          ? comm->ops->reset_pad(comm, &t->mem)
                          : comm->engine->zero(comm, pad, t->mem.pad_bytes);
  if (res != SYMM_SUCCESS) {
    SYMM_INFO(ALLOC, "pooled mem %llu: resetting its pad failed: %s",
              (unsigned long long)t->mem.id, symm_last_error());
    destroy_tensor(t);
    return res;
  }
  SYMM_TRACE(ALLOC, "pool hit: %zu bytes (mem %llu)", t->mem.alloc_bytes,
             (unsigned long long)t->mem.id);
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
  symm_tensor_t *pooled = pool_find(comm, mine.alloc_bytes, 0, false);
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
    symm_tensor_t *t = room ? pool_find(comm, mine.alloc_bytes, mine.pooled_seq, true) : NULL;
    if (room) local = t ? reuse_pooled(comm, t) : SYMM_ERR_INTERNAL;
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
    if (t) destroy_tensor(t);
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
  symm_tensor_t *t = pool_find(comm, alloc_bytes, 0, true);
  if (t) {
    SYMM_CHECK(reuse_pooled(comm, t));
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
  SYMM_CHECK(check_shape(sizes, ndim, dtype, numel, nbytes));
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
static symm_result_t tensor_alloc(symm_comm_t *comm, const int64_t *sizes, int ndim,
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
  set_shape(t, sizes, ndim, dtype, numel, nbytes);
  t->rendezvoused = false;
  t->mempool = false; /* a pooled block of symm_mempool_alloc is the user's now */
  t->peer_data[comm->rank] = data_of(t);
  /* A collective allocation's slot was promised in its agreement. */
  symm_result_t res = collective
                          ? symm_registry_add_reserved(data_of(t), data_span(t), t, comm->rank)
                          : symm_registry_add(data_of(t), data_span(t), t, comm->rank);
  if (res != SYMM_SUCCESS) {
    *alone = true;
    destroy_tensor(t);
    return res;
  }
  pthread_mutex_lock(&comm->lock);
  link_tensor(comm, t);
  pthread_mutex_unlock(&comm->lock);
  *out = t;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_alloc(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                symm_dtype_t dtype, symm_tensor_t **out) {
  if (!comm || !out)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: %s is NULL", comm ? "tensor" : "comm");
  bool alone;
  return tensor_alloc(comm, sizes, ndim, dtype, out, &alone);
}

/* ------------------------------------------------------------ rendezvous */

/* What the ranks compare and exchange; the same layout on every rank. */
typedef struct {
  int32_t ndim, dtype;
  int64_t sizes[SYMM_MAX_DIMS];
  uint64_t peer_sig; /* signature of the peer ids this allocation maps now */
  int32_t status;    /* SYMM_SUCCESS, or why this rank has nothing to exchange */
  char why[256];     /* with a status: this rank's message, for its peers' */
  symm_exchange_info_t info;
} rendezvous_info_t;

static void describe_shape(const rendezvous_info_t *r, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < r->ndim && d < SYMM_MAX_DIMS && n < cap; d++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)r->sizes[d]);
  if (n < cap) snprintf(out + n, cap - n, "] %s", symm_dtype_name((symm_dtype_t)r->dtype) ?
                        symm_dtype_name((symm_dtype_t)r->dtype) : "?");
}

static symm_result_t check_same_shape(const symm_tensor_t *t, const rendezvous_info_t *all) {
  const rendezvous_info_t *mine = &all[t->comm->rank];
  for (int r = 0; r < t->comm->size; r++) {
    const rendezvous_info_t *o = &all[r];
    if (o->ndim == mine->ndim && o->dtype == mine->dtype &&
        memcmp(o->sizes, mine->sizes, sizeof o->sizes) == 0)
      continue;
    char a[160], b[160];
    describe_shape(o, a, sizeof a);
    describe_shape(mine, b, sizeof b);
    return symm_error(SYMM_ERR_MISMATCH,
                      "rendezvous: rank %d passed a tensor of %s, rank %d of %s", r, a,
                      t->comm->rank, b);
  }
  return SYMM_SUCCESS;
}

/* Of every rank's allocation as advertised (id and layout): a peer that
 * advertises another layout under the same id is mapped, and checked, anew. */
static uint64_t ids_signature(const rendezvous_info_t *all, int n) {
  uint64_t h = 0;
  for (int r = 0; r < n; r++)
    h = symm_hash64(&all[r].info, offsetof(symm_exchange_info_t, blob), h);
  return h ? h : 1;
}

/* Maps the peers whose current allocation this one does not map yet, within
 * the rendezvous's deadline. */
static symm_result_t map_missing_peers(symm_tensor_t *t, const rendezvous_info_t *all) {
  symm_comm_t *comm = t->comm;
  symm_result_t res = SYMM_SUCCESS;
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++) {
    if (r == comm->rank) continue;
    if (t->peers[r].base && t->peers[r].peer_id == all[r].info.id &&
        memcmp(&t->infos[r], &all[r].info, offsetof(symm_exchange_info_t, blob)) == 0)
      continue;
    unmap_peer_slot(t, r);
    res = comm->ops->map_peer(comm, &t->mem, r, &all[r].info, &t->peers[r]);
    if (res != SYMM_SUCCESS) {
      memset(&t->peers[r], 0, sizeof t->peers[r]);
      symm_error_context("rendezvous: mapping rank %d", r);
      break;
    }
    t->peers[r].peer_id = all[r].info.id;
  }
  return res;
}

static symm_result_t rendezvous(symm_tensor_t *t);

static void shape_info(rendezvous_info_t *info, const int64_t *sizes, int ndim,
                       symm_dtype_t dtype) {
  memset(info, 0, sizeof *info);
  info->ndim = ndim;
  info->dtype = (int32_t)dtype;
  memcpy(info->sizes, sizes, sizeof *sizes * (size_t)ndim);
}

/* symm_tensor_rendezvous's call, on every rank under the same name. */
static void rendezvous_call_begin(symm_comm_t *comm, const rendezvous_info_t *shape) {
  char desc[80];
  describe_shape(shape, desc, sizeof desc);
  symm_call_begin(comm, true, "symm_tensor_rendezvous", "symm_tensor_rendezvous(%s)", desc);
}

symm_result_t symm_tensor_rendezvous(symm_tensor_t *t) {
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_rendezvous"));
  if (t->rendezvoused) return SYMM_SUCCESS; /* alike on every rank: no round */
  rendezvous_info_t shape;
  shape_info(&shape, t->sizes, t->ndim, t->dtype);
  rendezvous_call_begin(t->comm, &shape);
  symm_result_t res = rendezvous(t);
  symm_call_end(t->comm);
  return res;
}

/* The exchange of a rendezvous, into all[] (NULL: nothing is kept, which
 * only a rank that cannot take part passes).  A rank that cannot take part
 * (mine->status: its export or its allocation failed) still comes, so that
 * its peers learn it in this round instead of waiting out the timeout for
 * it; every rank then fails: that one with its own error, the others with
 * its code and a message that names it. */
static symm_result_t rendezvous_round(symm_comm_t *comm, rendezvous_info_t *mine,
                                      rendezvous_info_t *all) {
  char saved[1024] = "";
  if (mine->status != SYMM_SUCCESS) {
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    snprintf(mine->why, sizeof mine->why, "%s", saved);
  }
  symm_result_t res =
      symm_comm_allgather_op(comm, SYMM_TAG_RENDEZVOUS, mine, sizeof *mine, all);
  if (mine->status != SYMM_SUCCESS) return symm_error((symm_result_t)mine->status, "%s", saved);
  if (res != SYMM_SUCCESS) return res;
  for (int r = 0; r < comm->size; r++) {
    rendezvous_info_t *o = &all[r];
    if (o->status == SYMM_SUCCESS) continue;
    o->why[sizeof o->why - 1] = '\0';
    return symm_error((symm_result_t)o->status, "%s: rank %d could not take part (%s): %s",
                      symm_call_desc(comm), r, symm_strerror((symm_result_t)o->status), o->why);
  }
  return SYMM_SUCCESS;
}

/* Takes the place of a rendezvous of sizes[ndim] of dtype that this rank
 * cannot make (`failure`, whose message is the last error): its peers'
 * rendezvous fail at once, naming this rank.  Returns `failure`. */
static symm_result_t rendezvous_refused(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                        symm_dtype_t dtype, symm_result_t failure) {
  rendezvous_info_t mine;
  shape_info(&mine, sizes, ndim, dtype);
  mine.status = (int32_t)failure;
  rendezvous_call_begin(comm, &mine);
  const uint64_t outer = symm_op_deadline_begin(comm->timeout_ms);
  symm_result_t res = rendezvous_round(comm, &mine, NULL);
  symm_op_deadline_end(outer);
  symm_call_end(comm);
  return res;
}

static symm_result_t rendezvous(symm_tensor_t *t) {
  symm_comm_t *comm = t->comm;
  rendezvous_info_t mine;
  shape_info(&mine, t->sizes, t->ndim, t->dtype);
  mine.peer_sig = t->peer_sig;
  mine.info.id = t->mem.id;
  mine.info.alloc_bytes = t->mem.alloc_bytes;
  mine.info.data_offset = t->mem.data_offset;
  mine.info.pad_offset = t->mem.pad_offset;
  if (comm->ops->export_mem)
    mine.status = (int32_t)comm->ops->export_mem(comm, &t->mem, &mine.info);
  rendezvous_info_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all && mine.status == SYMM_SUCCESS)
    mine.status = (int32_t)symm_error(SYMM_ERR_NO_MEMORY, "rendezvous: out of memory");
  /* Registering the peers' memory comes after the last agreement: its room
   * is made now, so that a rank short of it says so in the exchange. */
  const size_t promised = (size_t)comm->size - 1;
  size_t used = 0;
  bool reserved = false;
  if (mine.status == SYMM_SUCCESS) {
    mine.status = (int32_t)symm_registry_reserve(promised);
    reserved = mine.status == SYMM_SUCCESS;
  }
  symm_result_t res;
  /* One timeout for the whole call: the exchange, every peer's fetch and
   * the agreement on them wait within it, so that a peer stopped half-way
   * costs one timeout, not one for the mapping and one for the agreement. */
  const uint64_t outer = symm_op_deadline_begin(comm->timeout_ms);
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu: exchanging", (unsigned long long)t->mem.id);
  SYMM_CHECK_GOTO(rendezvous_round(comm, &mine, mine.status == SYMM_SUCCESS ? all : NULL), res,
                  out);
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu: exchanged", (unsigned long long)t->mem.id);
  symm_fault_point(SYMM_FAULT_RENDEZVOUS, comm->rank);
  /* Every rank sees the same table, so every rank reaches the same verdict. */
  SYMM_CHECK_GOTO(check_same_shape(t, all), res, out);

  uint64_t sig = ids_signature(all, comm->size);
  bool all_cached = true;
  for (int r = 0; r < comm->size; r++) all_cached &= all[r].peer_sig == sig;
  if (!all_cached) {
    /* Rank-local mapping can fail on one rank only; agree so that nobody
     * returns success while a peer could not map.  Until it succeeds, the
     * slots it unmapped are not what peer_sig says. */
    t->peer_sig = 0;
    symm_result_t mapped = map_missing_peers(t, all);
    SYMM_TRACE(ALLOC, "rendezvous of mem %llu: peers mapped", (unsigned long long)t->mem.id);
    res = symm_comm_agree(comm, mapped, "rendezvous mapping");
    if (res != SYMM_SUCCESS) goto out;
    drop_peer_data_dev(t); /* the peers' addresses changed */
  }
  for (int r = 0; r < comm->size; r++) {
    t->infos[r] = all[r].info;
    t->peer_data[r] = r == comm->rank ? data_of(t)
                                      : (t->peers[r].base ? (char *)t->peers[r].base +
                                                                all[r].info.data_offset
                                                          : NULL);
  }
  SYMM_CHECK_GOTO(register_peers(t, &used), res, out);
  t->peer_sig = sig;
  t->rendezvoused = true;
  comm->rendezvous_seq++;
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu done (%s)", (unsigned long long)t->mem.id,
             all_cached ? "pooled mappings" : "mapped");
out:
  if (reserved) symm_registry_unreserve(promised - used);
  symm_op_deadline_end(outer);
  free(all);
  return res;
}

int symm_tensor_is_rendezvoused(const symm_tensor_t *t) { return t && t->rendezvoused; }

/* ------------------------------------------------------------- accessors */

void *symm_tensor_data(const symm_tensor_t *t) { return t ? data_of(t) : NULL; }
int symm_tensor_ndim(const symm_tensor_t *t) { return t ? t->ndim : -1; }
const int64_t *symm_tensor_sizes(const symm_tensor_t *t) { return t ? t->sizes : NULL; }
const int64_t *symm_tensor_strides(const symm_tensor_t *t) { return t ? t->strides : NULL; }
symm_dtype_t symm_tensor_dtype(const symm_tensor_t *t) { return t ? t->dtype : (symm_dtype_t)-1; }
size_t symm_tensor_numel(const symm_tensor_t *t) { return t ? t->numel : 0; }
size_t symm_tensor_nbytes(const symm_tensor_t *t) { return t ? t->nbytes : 0; }
symm_comm_t *symm_tensor_comm(const symm_tensor_t *t) { return t ? t->comm : NULL; }
size_t symm_signal_pad_bytes(void) { return SYMM_SIGNAL_PAD_MIN_BYTES; }

size_t symm_comm_signal_pad_bytes(const symm_comm_t *comm) { return comm ? comm->pad_bytes : 0; }

static void fill_view(const symm_tensor_t *t, void *data, int rank, symm_view_t *v) {
  memset(v, 0, sizeof *v);
  v->data = data;
  v->ndim = t->ndim;
  memcpy(v->sizes, t->sizes, sizeof v->sizes);
  memcpy(v->strides, t->strides, sizeof v->strides);
  v->dtype = t->dtype;
  v->device = t->mem.device;
  v->rank = rank;
}

symm_result_t symm_tensor_local_view(const symm_tensor_t *t, symm_view_t *view) {
  if (!view) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_local_view: NULL argument");
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_local_view"));
  fill_view(t, data_of(t), t->comm->rank, view);
  return SYMM_SUCCESS;
}

static symm_result_t check_peer(const symm_tensor_t *t, int rank, const char *fn) {
  if (rank < 0 || rank >= t->comm->size)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: rank %d out of range [0, %d)", fn, rank,
                      t->comm->size);
  if (rank != t->comm->rank && !t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "%s: tensor not rendezvoused yet (call "
                      "symm_tensor_rendezvous on every rank first)", fn);
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_remote_view(const symm_tensor_t *t, int rank, symm_view_t *view) {
  if (!t || !view)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_remote_view: NULL argument");
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_remote_view"));
  SYMM_CHECK(check_peer(t, rank, "symm_tensor_remote_view"));
  if (!t->peer_data[rank]) {
    char why[384] = "";
    if (SYMM_OPS_HAS(t->comm->ops, 3, unreachable_why))
      t->comm->ops->unreachable_why(t->comm, rank, why, sizeof why);
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_tensor_remote_view: rank %d's memory is not "
                      "load/store reachable with the %s backend%s%s", rank, t->comm->ops->name,
                      why[0] ? ": " : "", why);
  }
  fill_view(t, t->peer_data[rank], rank, view);
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_peer_ptrs(const symm_tensor_t *t, void *const **ptrs) {
  if (!t || !ptrs) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_peer_ptrs: NULL argument");
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_peer_ptrs"));
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "symm_tensor_peer_ptrs: tensor not rendezvoused yet");
  *ptrs = t->peer_data;
  return SYMM_SUCCESS;
}

/* Whether fn may hand out a device array of peer pointers of t. */
static symm_result_t check_device_array(const symm_tensor_t *t, const char *fn,
                                        const char *host_fn) {
  SYMM_CHECK(symm_tensor_usable(t, fn));
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "%s: tensor not rendezvoused yet", fn);
  symm_comm_t *comm = t->comm;
  if (comm->caps.device_peer_array && comm->engine->device_copy) return SYMM_SUCCESS;
  char who[128];
  symm_backend_names_with(offsetof(symm_backend_caps_t, device_peer_array), who, sizeof who);
  return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the %s backend gives no device array of peer "
                    "pointers%s (the %s backend%s do); use %s", fn, comm->ops->name,
                    comm->ops->mem_kind == SYMM_MEM_HOST ? ": its memory is CPU memory" : "",
                    who, strchr(who, ' ') ? "s" : "", host_fn);
}

symm_result_t symm_tensor_peer_ptrs_device(symm_tensor_t *t, void *const **dev_ptrs) {
  if (!t || !dev_ptrs)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_peer_ptrs_device: NULL argument");
  SYMM_CHECK(check_device_array(t, "symm_tensor_peer_ptrs_device", "symm_tensor_peer_ptrs"));
  symm_comm_t *comm = t->comm;
  if (!t->peer_data_dev)
    SYMM_CHECK(comm->engine->device_copy(comm, t->peer_data, sizeof(void *) * (size_t)comm->size,
                                      &t->peer_data_dev));
  *dev_ptrs = (void *const *)t->peer_data_dev;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_signal_pad_ptrs_device(symm_tensor_t *t, void *const **dev_ptrs) {
  static const char fn[] = "symm_tensor_signal_pad_ptrs_device";
  if (!t || !dev_ptrs) return symm_error(SYMM_ERR_INVALID_ARG, "%s: NULL argument", fn);
  SYMM_CHECK(check_device_array(t, fn, "symm_tensor_signal_pad"));
  symm_comm_t *comm = t->comm;
  if (!t->pad_ptrs_dev) {
    void **pads = calloc((size_t)comm->size, sizeof *pads);
    if (!pads) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", fn);
    for (int r = 0; r < comm->size; r++)
      if (symm_tensor_signal_pad(t, r, &pads[r]) != SYMM_SUCCESS) {
        pads[r] = NULL; /* not load/store reachable: as in peer_data */
        symm_error_clear();
      }
    symm_result_t res = comm->engine->device_copy(comm, pads, sizeof(void *) * (size_t)comm->size,
                                    &t->pad_ptrs_dev);
    free(pads);
    SYMM_CHECK(res);
  }
  *dev_ptrs = (void *const *)t->pad_ptrs_dev;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_signal_pad(const symm_tensor_t *t, int rank, void **pad) {
  if (!t || !pad) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_signal_pad: NULL argument");
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_signal_pad"));
  SYMM_CHECK(check_peer(t, rank, "symm_tensor_signal_pad"));
  if (rank == t->comm->rank) {
    *pad = (char *)t->mem.base + t->mem.pad_offset;
  } else if (t->peers[rank].base) {
    *pad = (char *)t->peers[rank].base + t->infos[rank].pad_offset;
  } else {
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_tensor_signal_pad: rank %d not reachable", rank);
  }
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_contiguous_view(symm_tensor_t *t, symm_view_t *view) {
  if (!t || !view)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_contiguous_view: NULL argument");
  SYMM_CHECK(symm_tensor_usable(t, "symm_tensor_contiguous_view"));
  symm_comm_t *comm = t->comm;
  if (!comm->caps.contiguous_view || !comm->ops->contiguous_map || !comm->ops->contiguous_unmap) {
    char who[128];
    symm_backend_names_with(offsetof(symm_backend_caps_t, contiguous_view), who, sizeof who);
    return symm_error(SYMM_ERR_UNSUPPORTED, "contiguous view needs the %s backend (this "
                      "communicator uses %s)", who, comm->ops->name);
  }
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "symm_tensor_contiguous_view: tensor not rendezvoused yet");
  if (t->ndim >= SYMM_MAX_DIMS)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_contiguous_view: ndim %d leaves no room "
                      "for the rank dimension (max %d)", t->ndim, SYMM_MAX_DIMS);
  if (!t->contig_base) {
    void *base = NULL, *priv = NULL;
    size_t stride = 0;
    SYMM_CHECK(comm->ops->contiguous_map(comm, &t->mem, t->peers, t->infos, &base, &stride, &priv));
    size_t esize = symm_dtype_size(t->dtype);
    size_t bytes = stride * (size_t)comm->size;
    if (stride % esize) {
      comm->ops->contiguous_unmap(comm, base, bytes, priv);
      return symm_error(SYMM_ERR_INTERNAL, "contiguous view stride %zu not a multiple of %zu",
                        stride, esize);
    }
    symm_result_t res = symm_registry_add(base, bytes, t, -1);
    if (res != SYMM_SUCCESS) {
      comm->ops->contiguous_unmap(comm, base, bytes, priv);
      return res;
    }
    t->contig_base = base;
    t->contig_stride = stride;
    t->contig_bytes = bytes;
    t->contig_priv = priv;
  }
  memset(view, 0, sizeof *view);
  view->data = t->contig_base;
  view->ndim = t->ndim + 1;
  view->sizes[0] = comm->size;
  view->strides[0] = (int64_t)(t->contig_stride / symm_dtype_size(t->dtype));
  for (int d = 0; d < t->ndim; d++) {
    view->sizes[d + 1] = t->sizes[d];
    view->strides[d + 1] = t->strides[d];
  }
  view->dtype = t->dtype;
  view->device = t->mem.device;
  view->rank = -1;
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------ lookup, validate */

/* Whether ptr, found in the registered range at base of rank r's data (-1:
 * a contiguous view), is one of the tensor's bytes rather than the rounding
 * behind them. */
static bool in_tensor_bytes(const symm_tensor_t *t, int r, const void *base, const void *ptr) {
  size_t off = (size_t)((const char *)ptr - (const char *)base);
  if (r < 0) off %= t->contig_stride;
  return off < t->nbytes;
}

symm_result_t symm_tensor_lookup(const void *ptr, symm_tensor_t **tensor, int *rank,
                                 size_t *offset) {
  if (!ptr || !tensor)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_lookup: NULL argument");
  const void *base;
  size_t len;
  int r;
  symm_tensor_t *t;
  if (!symm_registry_find(ptr, &base, &len, &t, &r) || !in_tensor_bytes(t, r, base, ptr))
    return symm_error(SYMM_ERR_NOT_FOUND, "%p is not inside any live symmetric tensor", ptr);
  *tensor = t;
  if (rank) *rank = r;
  if (offset) *offset = (size_t)((const char *)ptr - (const char *)base);
  return SYMM_SUCCESS;
}

symm_result_t symm_validate(symm_comm_t *comm, const void *ptr, size_t nbytes) {
  if (!comm || !ptr || !nbytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_validate: %s", !comm ? "comm is NULL" :
                      !ptr ? "pointer is NULL" : "nbytes is 0");
  const void *base;
  size_t len;
  int r;
  symm_tensor_t *t;
  if (!symm_registry_find(ptr, &base, &len, &t, &r) || !in_tensor_bytes(t, r, base, ptr))
    return symm_error(SYMM_ERR_NOT_FOUND, "%p is not inside any live symmetric tensor (not "
                      "allocated by symm_tensor_alloc, freed, or in the rounding past a "
                      "tensor's bytes)", ptr);
  if (t->comm != comm)
    return symm_error(SYMM_ERR_MISMATCH, "%p belongs to another communicator", ptr);
  size_t off = (size_t)((const char *)ptr - (const char *)base);
  /* One rank's data ends with the tensor's bytes; a contiguous view spans
   * every rank's (the rounding between them included). */
  const size_t end = r >= 0 ? t->nbytes : len;
  if (nbytes > end - off)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_validate: range %p + %zu bytes runs %zu bytes "
                      "past the end of its tensor (%zu bytes)", ptr, nbytes, nbytes - (end - off),
                      t->nbytes);
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "%p is symmetric memory that is not rendezvoused yet", ptr);
  if (comm->ops->validate) return comm->ops->validate(comm, ptr, nbytes);
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------------ free */

/* Takes t out of the registry (its peers' and contiguous mappings too): no
 * lookup finds it any more.  Its memory and peer mappings stay. */
static void detach_tensor(symm_tensor_t *t) {
  symm_registry_remove(data_of(t));
  if (t->rendezvoused) unregister_peers(t);
  drop_contiguous(t);
  t->rendezvoused = false;
}

/* Puts t in the pool when `pool` and there is room, else releases it. */
static void retire_tensor(symm_comm_t *comm, symm_tensor_t *t, bool pool) {
  pthread_mutex_lock(&comm->lock);
  unlink_tensor(comm, t);
  struct symm_pool_entry *e = NULL;
  if (pool && (e = malloc(sizeof *e))) {
    t->pooled = true;
    e->tensor = t;
    e->next = comm->pool;
    comm->pool = e;
    comm->pool_bytes += t->mem.alloc_bytes;
  }
  pthread_mutex_unlock(&comm->lock);
  if (!e) destroy_tensor(t);
}

static bool pool_has_room(symm_comm_t *comm, size_t bytes) {
  pthread_mutex_lock(&comm->lock);
  bool room = comm->pool_limit && comm->pool_bytes + bytes <= comm->pool_limit;
  pthread_mutex_unlock(&comm->lock);
  return room;
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
  free_args_t mine = {t->alloc_seq, pool_has_room(comm, t->mem.alloc_bytes), 0};
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
  detach_tensor(t);
  retire_tensor(comm, t, pool);
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
  detach_tensor(t);
  retire_tensor(comm, t, pool_has_room(comm, t->mem.alloc_bytes));
  return SYMM_SUCCESS;
}

/* Releases `n` tensors; where free is collective, in the order of their
 * allocation, which is the same on every rank. */
static int by_alloc_seq(const void *a, const void *b) {
  uint64_t x = (*(symm_tensor_t *const *)a)->alloc_seq, y = (*(symm_tensor_t *const *)b)->alloc_seq;
  return x < y ? -1 : x > y;
}

static void destroy_in_order(symm_comm_t *comm, symm_tensor_t **list, size_t n, bool orphan) {
  if (comm->caps.collective_free) qsort(list, n, sizeof *list, by_alloc_seq);
  for (size_t i = 0; i < n; i++)
    release_tensor(list[i], orphan && !list[i]->pooled && !list[i]->internal);
}

/* Empties the pool: its tensors in *list (malloc'd), their count in *n. */
static symm_result_t pool_drain(symm_comm_t *comm, symm_tensor_t ***list, size_t *n,
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
  SYMM_CHECK(pool_drain(comm, &list, &n, &bytes));
  destroy_in_order(comm, list, n, false);
  free(list);
  if (released) *released = bytes;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_scratch(symm_comm_t *comm, size_t bytes, symm_tensor_t **out) {
  if (comm->scratch && comm->scratch->nbytes >= bytes) {
    *out = comm->scratch;
    return SYMM_SUCCESS;
  }
  /* Collective: the callers make every rank ask for the same size at the
   * same call (the engines say what happens when they do not). */
  /* The setting is what staging gets: the backend's fixed areas (its
   * need, `bytes`, includes them) come on top. */
  size_t want = symm_settings()->SYMM_SCRATCH_BYTES;
  const size_t fixed = comm->engine->scratch_fixed ? comm->engine->scratch_fixed(comm) : 0;
  want = want > SIZE_MAX - fixed ? SIZE_MAX : want + fixed;
  if (want < bytes) want = bytes;
  /* At least double: retired scratches are kept (see below), so growth must
   * be geometric to bound what they hold to the size of the current one. */
  if (comm->scratch && want < 2 * comm->scratch->nbytes) want = 2 * comm->scratch->nbytes;
  if (want < 4096) want = 4096;
  int64_t n = (int64_t)want;
  symm_tensor_t *t;
  bool alone;
  symm_result_t res = tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t, &alone);
  /* Growing is one step of a collective: peers whose allocation succeeded
   * go on to the rendezvous, where this rank's failure must meet them. */
  if (res != SYMM_SUCCESS && alone) res = rendezvous_refused(comm, &n, 1, SYMM_DTYPE_U8, res);
  if (res == SYMM_SUCCESS) {
    t->internal = true;
    res = symm_tensor_rendezvous(t);
    if (res != SYMM_SUCCESS) symm_tensor_free(t);
  }
  if (res != SYMM_SUCCESS) {
    symm_error_context("reserving %zu bytes of collective scratch", want);
    return res;
  }
  /* The old scratch is not freed: GPU work enqueued on streams we cannot
   * see may still read it, and freed memory could be handed to the next
   * allocation at once.  It stays a live tensor of the communicator (freed
   * with it); growth at least doubles, so all retired ones together are
   * smaller than the current one. */
  if (comm->scratch) SYMM_INFO(COLL, "collective scratch grows from %zu to %zu bytes per rank",
                               comm->scratch->nbytes, want);
  comm->scratch = t;
  *out = t;
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
      detach_tensor(t);
      release_tensor(t, !t->internal);
    }
  }
  pthread_mutex_unlock(&comm->lock);
  for (size_t k = 0; k < i; k++) detach_tensor(live[k]);
  symm_tensor_t **pooled = NULL;
  size_t np = 0;
  if (pool_drain(comm, &pooled, &np, NULL) != SYMM_SUCCESS) np = 0;
  /* Live and pooled together, so that a collective free sees one order. */
  symm_tensor_t **all = live ? realloc(live, sizeof *all * (i + np + 1)) : NULL;
  if (all) {
    memcpy(all + i, pooled, sizeof *all * np);
    destroy_in_order(comm, all, i + np, true);
  } else {
    destroy_in_order(comm, live, i, true);
    destroy_in_order(comm, pooled, np, true);
    free(live);
  }
  free(all);
  free(pooled);
}
