/* Rendezvous: every rank's allocation exchanged, its shape checked against
 * every peer's, the peers mapped and registered, all within one timeout and
 * agreed on by every rank.  Where the backend maps a peer cheaply at any
 * time (caps.map_on_use) a user's tensor maps each peer on its first use
 * instead (symm_tensor_map_peer): a rank that uses a few peers of hundreds
 * maps a few, and a peer gone by then is SYMM_ERR_PEER_LOST at that use. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "symm_fault.h"

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

/* What the ranks compare and exchange; the same layout on every rank. */
typedef struct {
  int32_t ndim, dtype;
  int64_t sizes[SYMM_MAX_DIMS];
  int32_t kind;      /* RDV_* below: only the same kinds pair up */
  int32_t reserved;
  uint64_t peer_sig; /* signature of the peer ids this allocation maps now */
  int32_t status;    /* SYMM_SUCCESS, or why this rank has nothing to exchange */
  char why[256];     /* with a status: this rank's message, for its peers' */
  symm_exchange_info_t info;
} rendezvous_info_t;

/* What a rendezvous maps: an allocation, the user's registered memory
 * (mapped by the backend's registration path), or a registered tensor's
 * pad allocation, whose round comes first. */
enum { RDV_ALLOC = 0, RDV_USER = 1, RDV_PAD = 2 };

static void describe_shape(const rendezvous_info_t *r, char *out, size_t cap) {
  static const char *const kinds[] = {"", " of registered memory", " (a registered tensor's pad)"};
  size_t n = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < r->ndim && d < SYMM_MAX_DIMS && n < cap; d++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)r->sizes[d]);
  if (n < cap)
    snprintf(out + n, cap - n, "] %s%s", symm_dtype_name((symm_dtype_t)r->dtype) ?
             symm_dtype_name((symm_dtype_t)r->dtype) : "?",
             r->kind >= 0 && r->kind <= RDV_PAD ? kinds[r->kind] : " (unknown kind)");
}

static symm_result_t check_same_shape(const symm_tensor_t *t, const rendezvous_info_t *all) {
  const rendezvous_info_t *mine = &all[t->comm->rank];
  for (int r = 0; r < t->comm->size; r++) {
    const rendezvous_info_t *o = &all[r];
    if (o->ndim == mine->ndim && o->dtype == mine->dtype && o->kind == mine->kind &&
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
    symm_tensor_unmap_peer(t, r);
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

/* Unmaps the peers whose mapping is not of the allocation they advertise
 * now (a pooled tensor's peers that changed), keeping the others, for a
 * tensor that maps the rest on use. */
static void unmap_stale_peers(symm_tensor_t *t, const rendezvous_info_t *all) {
  for (int r = 0; r < t->comm->size; r++)
    if (r != t->comm->rank && t->peers[r].base &&
        (t->peers[r].peer_id != all[r].info.id ||
         memcmp(&t->infos[r], &all[r].info, offsetof(symm_exchange_info_t, blob)) != 0))
      symm_tensor_unmap_peer(t, r);
}

/* Whether every peer this rank can reach is mapped. */
static bool every_peer_mapped(const symm_tensor_t *t) {
  const symm_comm_t *comm = t->comm;
  const bool asks = SYMM_OPS_HAS(comm->ops, 2, peer_reachable);
  for (int r = 0; r < comm->size; r++)
    if (r != comm->rank && !t->peers[r].base &&
        (!asks || comm->ops->peer_reachable((symm_comm_t *)comm, r)))
      return false;
  return true;
}

/* Maps peer r of a tensor mapped on use (comm->lock held). */
static symm_result_t map_on_use_locked(symm_tensor_t *t, int r) {
  symm_comm_t *comm = t->comm;
  symm_result_t res = comm->ops->map_peer(comm, &t->mem, r, &t->infos[r], &t->peers[r]);
  if (res != SYMM_SUCCESS) {
    memset(&t->peers[r], 0, sizeof t->peers[r]);
    symm_error_context("mapping rank %d's memory on its first use", r);
    return res;
  }
  if (!t->peers[r].base) return SYMM_SUCCESS; /* not load/store reachable */
  t->peers[r].peer_id = t->infos[r].id;
  char *data = (char *)t->peers[r].base + t->infos[r].data_offset;
  res = symm_registry_add(data, t->infos[r].alloc_bytes - t->infos[r].data_offset, t, r);
  if (res != SYMM_SUCCESS) {
    symm_tensor_unmap_peer(t, r);
    return res;
  }
  symm_tensor_drop_device_arrays(t); /* they were made without this peer */
  /* Published last: a thread that sees the pointer (without the lock,
   * symm_tensor_map_peer's first look) sees the mapping behind it. */
  __atomic_store_n(&t->peer_data[r], data, __ATOMIC_RELEASE);
  SYMM_TRACE(ALLOC, "mem %llu: rank %d mapped on first use", (unsigned long long)t->mem.id, r);
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_map_peer(symm_tensor_t *t, int r) {
  if (!t->rendezvoused || !t->on_use || r == t->comm->rank ||
      __atomic_load_n(&t->peer_data[r], __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&t->all_mapped, __ATOMIC_ACQUIRE))
    return SYMM_SUCCESS;
  symm_comm_t *comm = t->comm;
  pthread_mutex_lock(&comm->lock);
  symm_result_t res = t->peers[r].base ? SYMM_SUCCESS : map_on_use_locked(t, r);
  pthread_mutex_unlock(&comm->lock);
  return res;
}

/* all_mapped is set here and by the rendezvous only: one pass over the
 * peers, not one per peer mapped. */
symm_result_t symm_tensor_map_peers(symm_tensor_t *t) {
  if (!t->rendezvoused || !t->on_use || __atomic_load_n(&t->all_mapped, __ATOMIC_ACQUIRE))
    return SYMM_SUCCESS;
  for (int r = 0; r < t->comm->size; r++) SYMM_CHECK(symm_tensor_map_peer(t, r));
  pthread_mutex_lock(&t->comm->lock);
  __atomic_store_n(&t->all_mapped, every_peer_mapped(t), __ATOMIC_RELEASE);
  pthread_mutex_unlock(&t->comm->lock);
  return SYMM_SUCCESS;
}

static symm_result_t rendezvous(symm_tensor_t *t, int32_t kind);

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
  shape.kind = t->mem.user ? RDV_USER : RDV_ALLOC;
  rendezvous_call_begin(t->comm, &shape);
  /* A registered tensor's pads are in its pad tensor: mapped first, in a
   * round of their own (agreed, so alike on every rank). */
  symm_result_t res = SYMM_SUCCESS;
  if (t->pad_tensor && !t->pad_tensor->rendezvoused) res = rendezvous(t->pad_tensor, RDV_PAD);
  if (res == SYMM_SUCCESS) res = rendezvous(t, shape.kind);
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
symm_result_t symm_rendezvous_refused(symm_comm_t *comm, const int64_t *sizes, int ndim,
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

static symm_result_t rendezvous(symm_tensor_t *t, int32_t kind) {
  symm_comm_t *comm = t->comm;
  comm->rendezvous_seq++; /* mappings may change from here (collective.c's settled) */
  rendezvous_info_t mine;
  shape_info(&mine, t->sizes, t->ndim, t->dtype);
  mine.kind = kind;
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
  /* The same on every rank: the setting is agreed, the backend one. */
  t->on_use = comm->map_on_use && comm->caps.map_on_use && !t->internal;
  if (t->on_use) {
    unmap_stale_peers(t, all);
  } else if (!all_cached) {
    /* Rank-local mapping can fail on one rank only; agree so that nobody
     * returns success while a peer could not map.  Until it succeeds, the
     * slots it unmapped are not what peer_sig says. */
    t->peer_sig = 0;
    symm_result_t mapped = map_missing_peers(t, all);
    SYMM_TRACE(ALLOC, "rendezvous of mem %llu: peers mapped", (unsigned long long)t->mem.id);
    res = symm_comm_agree(comm, mapped, "rendezvous mapping");
    if (res != SYMM_SUCCESS) goto out;
    symm_tensor_drop_device_arrays(t); /* the peers' addresses changed */
  }
  for (int r = 0; r < comm->size; r++) {
    t->infos[r] = all[r].info;
    t->peer_data[r] = r == comm->rank ? symm_tensor_local_data(t)
                                      : (t->peers[r].base ? (char *)t->peers[r].base +
                                                                all[r].info.data_offset
                                                          : NULL);
  }
  SYMM_CHECK_GOTO(register_peers(t, &used), res, out);
  t->peer_sig = sig;
  t->all_mapped = every_peer_mapped(t);
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
