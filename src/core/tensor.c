/* Symmetric tensors: shape logic, allocation through the backend, the pool
 * of freed-but-mapped allocations, rendezvous with cross-rank validation,
 * views, lookup and validation through the registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

static symm_result_t register_peers(symm_tensor_t *t) {
  for (int r = 0; r < t->comm->size; r++) {
    if (r == t->comm->rank || !t->peers[r].base) continue;
    size_t span = t->infos[r].alloc_bytes - t->infos[r].data_offset;
    symm_result_t res = symm_registry_add((char *)t->peers[r].base + t->infos[r].data_offset,
                                          span, t, r);
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

static void drop_peer_data_dev(symm_tensor_t *t) {
  if (!t->peer_data_dev) return;
  t->comm->ops->device_free(t->comm, t->peer_data_dev);
  t->peer_data_dev = NULL;
}

/* Releases everything the tensor holds; the struct itself too. */
static void destroy_tensor(symm_tensor_t *t) {
  symm_comm_t *comm = t->comm;
  drop_peer_data_dev(t);
  drop_contiguous(t);
  if (t->peers)
    for (int r = 0; r < comm->size; r++)
      if (r != comm->rank) unmap_peer_slot(t, r);
  if (t->mem.base) comm->ops->free(comm, &t->mem);
  free(t->peers);
  free(t->infos);
  free(t->peer_data);
  free(t);
}

/* ----------------------------------------------------------------- alloc */

/* Takes a pooled allocation of exactly this rounded size, if any. */
static symm_tensor_t *pool_take(symm_comm_t *comm, size_t alloc_bytes) {
  symm_tensor_t *t = NULL;
  pthread_mutex_lock(&comm->lock);
  for (struct symm_pool_entry **pp = &comm->pool; *pp; pp = &(*pp)->next) {
    if ((*pp)->tensor->mem.alloc_bytes != alloc_bytes) continue;
    struct symm_pool_entry *e = *pp;
    *pp = e->next;
    t = e->tensor;
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
  t->comm = comm;
  t->mem.data_offset = data_offset;
  t->mem.alloc_bytes = alloc_bytes;
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

symm_result_t symm_tensor_alloc(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                symm_dtype_t dtype, symm_tensor_t **out) {
  if (!comm || !out)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: %s is NULL", comm ? "tensor" : "comm");
  *out = NULL;
  size_t numel = 0, nbytes = 0;
  SYMM_CHECK(check_shape(sizes, ndim, dtype, &numel, &nbytes));
  size_t gran = comm->ops->granularity(comm);
  size_t data_offset = symm_round_up(SYMM_SIGNAL_PAD_BYTES, gran);
  size_t alloc_bytes;
  if (__builtin_add_overflow(data_offset, nbytes, &alloc_bytes) ||
      alloc_bytes + gran < alloc_bytes)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: byte size overflows");
  alloc_bytes = symm_round_up(alloc_bytes, gran);

  symm_tensor_t *t = pool_take(comm, alloc_bytes);
  if (t) {
    /* Signals left by the last user must not leak into the new one.  An
     * allocation whose pad cannot be reset is out of the pool already:
     * released, not lost. */
    if (comm->ops->reset_pad) {
      symm_result_t res = comm->ops->reset_pad(comm, &t->mem);
      if (res != SYMM_SUCCESS) {
        SYMM_INFO(ALLOC, "pooled mem %llu: resetting its pad failed: %s",
                  (unsigned long long)t->mem.id, symm_last_error());
        destroy_tensor(t);
        return res;
      }
    } else {
      memset((char *)t->mem.base + t->mem.pad_offset, 0, SYMM_SIGNAL_PAD_BYTES);
    }
    SYMM_TRACE(ALLOC, "pool hit: %zu bytes (mem %llu)", alloc_bytes,
               (unsigned long long)t->mem.id);
  } else {
    SYMM_TRACE(ALLOC, "alloc of %zu bytes: fresh", alloc_bytes);
    SYMM_CHECK(fresh_tensor(comm, data_offset, nbytes, alloc_bytes, &t));
    SYMM_TRACE(ALLOC, "alloc of %zu bytes: done (mem %llu)", alloc_bytes,
               (unsigned long long)t->mem.id);
  }
  set_shape(t, sizes, ndim, dtype, numel, nbytes);
  t->rendezvoused = false;
  t->peer_data[comm->rank] = data_of(t);
  symm_result_t res = symm_registry_add(data_of(t), data_span(t), t, comm->rank);
  if (res != SYMM_SUCCESS) {
    destroy_tensor(t);
    return res;
  }
  pthread_mutex_lock(&comm->lock);
  link_tensor(comm, t);
  pthread_mutex_unlock(&comm->lock);
  *out = t;
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------ rendezvous */

/* What the ranks compare and exchange; the same layout on every rank. */
typedef struct {
  int32_t ndim, dtype;
  int64_t sizes[SYMM_MAX_DIMS];
  uint64_t peer_sig; /* signature of the peer ids this allocation maps now */
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

static uint64_t ids_signature(const rendezvous_info_t *all, int n) {
  uint64_t h = 0;
  for (int r = 0; r < n; r++) h = symm_hash64(&all[r].info.id, sizeof all[r].info.id, h);
  return h ? h : 1;
}

/* Maps the peers whose current allocation this one does not map yet. */
static symm_result_t map_missing_peers(symm_tensor_t *t, const rendezvous_info_t *all) {
  symm_comm_t *comm = t->comm;
  /* One timeout for all the peers' fetches, not one each. */
  uint64_t outer = symm_op_deadline_begin(comm->timeout_ms);
  symm_result_t res = SYMM_SUCCESS;
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++) {
    if (r == comm->rank) continue;
    if (t->peers[r].base && t->peers[r].peer_id == all[r].info.id) continue;
    unmap_peer_slot(t, r);
    res = comm->ops->map_peer(comm, &t->mem, r, &all[r].info, &t->peers[r]);
    if (res != SYMM_SUCCESS) {
      memset(&t->peers[r], 0, sizeof t->peers[r]);
      symm_error_context("rendezvous: mapping rank %d", r);
      break;
    }
    t->peers[r].peer_id = all[r].info.id;
  }
  symm_op_deadline_end(outer);
  return res;
}

symm_result_t symm_tensor_rendezvous(symm_tensor_t *t) {
  if (!t) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_rendezvous: tensor is NULL");
  if (t->rendezvoused) return SYMM_SUCCESS;
  symm_comm_t *comm = t->comm;
  rendezvous_info_t mine;
  memset(&mine, 0, sizeof mine);
  mine.ndim = t->ndim;
  mine.dtype = (int32_t)t->dtype;
  memcpy(mine.sizes, t->sizes, sizeof mine.sizes);
  mine.peer_sig = t->peer_sig;
  mine.info.id = t->mem.id;
  mine.info.alloc_bytes = t->mem.alloc_bytes;
  mine.info.data_offset = t->mem.data_offset;
  mine.info.pad_offset = t->mem.pad_offset;
  if (comm->ops->export_mem) SYMM_CHECK(comm->ops->export_mem(comm, &t->mem, &mine.info));

  rendezvous_info_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "rendezvous: out of memory");
  symm_result_t res;
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu: exchanging", (unsigned long long)t->mem.id);
  SYMM_CHECK_GOTO(symm_comm_allgather_op(comm, SYMM_TAG_RENDEZVOUS, &mine, sizeof mine, all), res,
                  out);
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu: exchanged", (unsigned long long)t->mem.id);
  /* Every rank sees the same table, so every rank reaches the same verdict. */
  SYMM_CHECK_GOTO(check_same_shape(t, all), res, out);

  uint64_t sig = ids_signature(all, comm->size);
  bool all_cached = true;
  for (int r = 0; r < comm->size; r++) all_cached &= all[r].peer_sig == sig;
  if (!all_cached) {
    /* Rank-local mapping can fail on one rank only; agree so that nobody
     * returns success while a peer could not map. */
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
  SYMM_CHECK_GOTO(register_peers(t), res, out);
  t->peer_sig = sig;
  t->rendezvoused = true;
  comm->rendezvous_seq++;
  SYMM_TRACE(ALLOC, "rendezvous of mem %llu done (%s)", (unsigned long long)t->mem.id,
             all_cached ? "pooled mappings" : "mapped");
out:
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
size_t symm_signal_pad_bytes(void) { return SYMM_SIGNAL_PAD_BYTES; }

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
  if (!t || !view) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_local_view: NULL argument");
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
  SYMM_CHECK(check_peer(t, rank, "symm_tensor_remote_view"));
  if (!t->peer_data[rank])
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_tensor_remote_view: rank %d's memory is not "
                      "load/store reachable with the %s backend", rank, t->comm->ops->name);
  fill_view(t, t->peer_data[rank], rank, view);
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_peer_ptrs(const symm_tensor_t *t, void *const **ptrs) {
  if (!t || !ptrs) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_peer_ptrs: NULL argument");
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "symm_tensor_peer_ptrs: tensor not rendezvoused yet");
  *ptrs = t->peer_data;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_peer_ptrs_device(symm_tensor_t *t, void *const **dev_ptrs) {
  if (!t || !dev_ptrs)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_peer_ptrs_device: NULL argument");
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "symm_tensor_peer_ptrs_device: tensor not rendezvoused yet");
  symm_comm_t *comm = t->comm;
  if (!SYMM_OPS_HAS(comm->ops, 2, device_copy))
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_tensor_peer_ptrs_device: the %s backend's "
                      "memory is CPU memory; use symm_tensor_peer_ptrs", comm->ops->name);
  if (!t->peer_data_dev)
    SYMM_CHECK(comm->ops->device_copy(comm, t->peer_data, sizeof(void *) * (size_t)comm->size,
                                      &t->peer_data_dev));
  *dev_ptrs = (void *const *)t->peer_data_dev;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_signal_pad(const symm_tensor_t *t, int rank, void **pad) {
  if (!t || !pad) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_signal_pad: NULL argument");
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
  symm_comm_t *comm = t->comm;
  if (!comm->ops->contiguous_map || !comm->ops->contiguous_unmap)
    return symm_error(SYMM_ERR_UNSUPPORTED, "contiguous view needs the native or host backend "
                      "(this communicator uses %s)", comm->ops->name);
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

symm_result_t symm_tensor_lookup(const void *ptr, symm_tensor_t **tensor, int *rank,
                                 size_t *offset) {
  if (!ptr || !tensor)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_lookup: NULL argument");
  const void *base;
  size_t len;
  int r;
  symm_tensor_t *t;
  if (!symm_registry_find(ptr, &base, &len, &t, &r))
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
  if (!symm_registry_find(ptr, &base, &len, &t, &r))
    return symm_error(SYMM_ERR_NOT_FOUND, "%p was not allocated by symm_tensor_alloc (or has "
                      "been freed)", ptr);
  if (t->comm != comm)
    return symm_error(SYMM_ERR_MISMATCH, "%p belongs to another communicator", ptr);
  size_t off = (size_t)((const char *)ptr - (const char *)base);
  if (nbytes > len - off)
    return symm_error(SYMM_ERR_MISMATCH, "range %p + %zu bytes runs %zu bytes past the end of its "
                      "symmetric allocation", ptr, nbytes, nbytes - (len - off));
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

void symm_tensor_free(symm_tensor_t *t) {
  if (!t) return;
  symm_comm_t *comm = t->comm;
  detach_tensor(t);
  pthread_mutex_lock(&comm->lock);
  unlink_tensor(comm, t);
  struct symm_pool_entry *e = NULL;
  if (comm->pool_limit && comm->pool_bytes + t->mem.alloc_bytes <= comm->pool_limit &&
      (e = malloc(sizeof *e))) {
    e->tensor = t;
    e->next = comm->pool;
    comm->pool = e;
    comm->pool_bytes += t->mem.alloc_bytes;
  }
  pthread_mutex_unlock(&comm->lock);
  if (!e) destroy_tensor(t);
}

symm_result_t symm_comm_pool_trim(symm_comm_t *comm, size_t *released) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_pool_trim: comm is NULL");
  pthread_mutex_lock(&comm->lock);
  struct symm_pool_entry *list = comm->pool;
  size_t bytes = comm->pool_bytes;
  comm->pool = NULL;
  comm->pool_bytes = 0;
  pthread_mutex_unlock(&comm->lock);
  while (list) {
    struct symm_pool_entry *next = list->next;
    destroy_tensor(list->tensor);
    free(list);
    list = next;
  }
  if (released) *released = bytes;
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_scratch(symm_comm_t *comm, size_t bytes, symm_tensor_t **out) {
  if (comm->scratch && comm->scratch->nbytes >= bytes) {
    *out = comm->scratch;
    return SYMM_SUCCESS;
  }
  /* Collective: the callers make every rank ask for the same size at the
   * same call (see native_collective for what happens when they do not). */
  /* The setting is what staging gets: the backend's fixed areas (its
   * need, `bytes`, includes them) come on top. */
  size_t want = symm_settings()->SYMM_SCRATCH_BYTES;
  want = want > SIZE_MAX - comm->scratch_fixed ? SIZE_MAX : want + comm->scratch_fixed;
  if (want < bytes) want = bytes;
  /* At least double: retired scratches are kept (see below), so growth must
   * be geometric to bound what they hold to the size of the current one. */
  if (comm->scratch && want < 2 * comm->scratch->nbytes) want = 2 * comm->scratch->nbytes;
  if (want < 4096) want = 4096;
  int64_t n = (int64_t)want;
  symm_tensor_t *t;
  SYMM_CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  symm_result_t res = symm_tensor_rendezvous(t);
  if (res != SYMM_SUCCESS) {
    symm_tensor_free(t);
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
  for (;;) {
    pthread_mutex_lock(&comm->lock);
    symm_tensor_t *t = comm->tensors;
    pthread_mutex_unlock(&comm->lock);
    if (!t) break;
    detach_tensor(t);
    pthread_mutex_lock(&comm->lock);
    unlink_tensor(comm, t);
    pthread_mutex_unlock(&comm->lock);
    destroy_tensor(t);
  }
  symm_comm_pool_trim(comm, NULL);
}
