/* What a tensor holds and how it is let go: its entries in the registry
 * (data, mapped peers, contiguous view), its peer mappings and device
 * arrays, its memory; the handle states that release leaves behind
 * (symm_tensor_usable).  Everything above (allocation, free, the pool,
 * rendezvous) releases through here. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------ mappings */

static void unregister_peers(symm_tensor_t *t) {
  for (int r = 0; t->peers && r < t->comm->size; r++)
    if (r != t->comm->rank && t->peers[r].base)
      symm_registry_remove((char *)t->peers[r].base + t->infos[r].data_offset);
}

static void drop_contiguous(symm_tensor_t *t) {
  if (!t->contig_base) return;
  symm_registry_remove(t->contig_base);
  t->comm->ops->contiguous_unmap(t->comm, t->contig_base, t->contig_bytes, t->contig_priv);
  t->contig_base = NULL;
  t->contig_priv = NULL;
}

void symm_tensor_unmap_peer(symm_tensor_t *t, int r) {
  if (!t->peers[r].base) return;
  t->comm->ops->unmap_peer(t->comm, &t->peers[r]);
  memset(&t->peers[r], 0, sizeof t->peers[r]);
  t->peer_data[r] = NULL;
}

/* The device arrays of peer pointers (data, pads): made on demand, gone
 * when the peers' addresses change. */
void symm_tensor_drop_device_arrays(symm_tensor_t *t) {
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
void symm_tensor_release(symm_tensor_t *t, bool orphan) {
  symm_comm_t *comm = t->comm;
  symm_tensor_drop_device_arrays(t);
  drop_contiguous(t);
  if (t->peers)
    for (int r = 0; r < comm->size; r++)
      if (r != comm->rank) symm_tensor_unmap_peer(t, r);
  if (t->registered) comm->ops->deregister_mem(comm, &t->mem);
  /* The user's memory stays theirs: only what registering it made goes. */
  if (t->mem.base && t->mem.user) comm->ops->deregister_user(comm, &t->mem);
  else if (t->mem.base) comm->ops->free(comm, &t->mem);
  t->pad_tensor = NULL; /* released on its own, as the comm's list or retire says */
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

void symm_tensor_destroy(symm_tensor_t *t) { symm_tensor_release(t, false); }

/* Takes t out of the registry (its peers' and contiguous mappings too): no
 * lookup finds it any more.  Its memory and peer mappings stay. */
void symm_tensor_detach(symm_tensor_t *t) {
  symm_registry_remove(symm_tensor_local_data(t));
  if (t->rendezvoused) unregister_peers(t);
  drop_contiguous(t);
  t->rendezvoused = false;
}

/* Releases `n` tensors; where free is collective, in the order of their
 * allocation, which is the same on every rank. */
static int by_alloc_seq(const void *a, const void *b) {
  const symm_tensor_t *ta = *(symm_tensor_t *const *)a, *tb = *(symm_tensor_t *const *)b;
  uint64_t x = ta->alloc_seq, y = tb->alloc_seq;
  /* A registered tensor shares its pad tensor's number and goes first. */
  if (x == y) return (tb->pad_tensor != NULL) - (ta->pad_tensor != NULL);
  return x < y ? -1 : x > y;
}

void symm_tensor_release_in_order(symm_comm_t *comm, symm_tensor_t **list, size_t n, bool orphan) {
  if (comm->caps.collective_free) qsort(list, n, sizeof *list, by_alloc_seq);
  for (size_t i = 0; i < n; i++)
    symm_tensor_release(list[i], orphan && !list[i]->pooled && !list[i]->internal);
}
