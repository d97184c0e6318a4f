/* A tensor as its user sees it: accessors, local, remote and contiguous
 * views, peer pointers and signal pads (also as device arrays), and the
 * lookup and validation of pointers through the registry. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------- accessors */

void *symm_tensor_data(const symm_tensor_t *t) { return t ? symm_tensor_local_data(t) : NULL; }
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
  fill_view(t, symm_tensor_local_data(t), t->comm->rank, view);
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
  SYMM_CHECK(symm_tensor_map_peer((symm_tensor_t *)t, rank));
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
  SYMM_CHECK(symm_tensor_map_peers((symm_tensor_t *)t));
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
  if (comm->caps.device_peer_array && comm->engine->device_copy)
    return symm_tensor_map_peers((symm_tensor_t *)t);
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
  const symm_tensor_t *h = symm_tensor_pad_holder(t);
  SYMM_CHECK(symm_tensor_map_peer((symm_tensor_t *)h, rank));
  if (rank == t->comm->rank) {
    *pad = (char *)h->mem.base + h->mem.pad_offset;
  } else if (h->peers[rank].base) {
    *pad = (char *)h->peers[rank].base + h->infos[rank].pad_offset;
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
  if (t->mem.user)
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_tensor_contiguous_view: the tensor is the "
                      "user's registered memory, whose ranks' pieces need not fall on the "
                      "backend's granularity (use symm_tensor_remote_view per rank)");
  if (!t->rendezvoused)
    return symm_error(SYMM_ERR_STATE, "symm_tensor_contiguous_view: tensor not rendezvoused yet");
  if (t->ndim >= SYMM_MAX_DIMS)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_contiguous_view: ndim %d leaves no room "
                      "for the rank dimension (max %d)", t->ndim, SYMM_MAX_DIMS);
  SYMM_CHECK(symm_tensor_map_peers(t));
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
