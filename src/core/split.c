/* Groups: symm_comm_split (MPI_Comm_split's and ncclCommSplit's contract)
 * and the 2-D layout built from it.  The ranks exchange their colors and
 * keys in one agreed round on the parent (a host call: a rank in another
 * call gets SYMM_ERR_MISMATCH); where the backend splits its provider's
 * communicator (ops->split: NCCL's ncclCommSplit) and every rank can, each
 * rank runs that split, opting-out ranks included, and the ranks agree on
 * its result; then the ranks of each color make a communicator of their
 * own on the parent's store, its backend starting from the provider's
 * handle the split made: a new number there, its own bootstrap, engine,
 * backend state, tensors, signal pads, scratch, pool and call numbering.
 * Nothing of one group is visible to another. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_INIT
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* What each rank says in the split's round. */
typedef struct {
  int32_t color, key;
  uint32_t refused; /* 1: this rank's arguments failed their checks */
  uint32_t no_channel; /* 1: its callbacks cannot split (no split callback) */
  uint32_t provider_split; /* 1: the backend can split its provider's communicator here */
  uint32_t pad;
} split_rec_t;

static bool color_valid(int color) {
  return color >= 0 || color == SYMM_SPLIT_NONE || color == SYMM_SPLIT_BY_HOST;
}

/* Whether rank r joins the group of rank `me` (same color; by host: same
 * host as well). */
static bool same_group(const symm_comm_t *comm, const split_rec_t *all, int r, int me) {
  if (all[r].color != all[me].color) return false;
  return all[me].color != SYMM_SPLIT_BY_HOST || comm->host_ids[r] == comm->host_ids[me];
}

/* This rank's place in its group, ordered by key, then parent rank. */
static void place_in_group(const symm_comm_t *comm, const split_rec_t *all, int *rank,
                           int *size) {
  const int me = comm->rank;
  *rank = 0;
  *size = 0;
  for (int r = 0; r < comm->size; r++) {
    if (!same_group(comm, all, r, me)) continue;
    (*size)++;
    if (all[r].key < all[me].key || (all[r].key == all[me].key && r < me)) (*rank)++;
  }
}

/* The group's number for the provider's split: the parent rank of its
 * first member, the same on every member and different for every group
 * (a color by host is one group per host). */
static int group_number(const symm_comm_t *comm, const split_rec_t *all) {
  for (int r = 0; r < comm->rank; r++)
    if (same_group(comm, all, r, comm->rank)) return r;
  return comm->rank;
}

/* Whether this rank's backend can split its provider's communicator now;
 * why not into why. */
static bool provider_can_split(symm_comm_t *comm, char *why, size_t len) {
  if (!SYMM_OPS_HAS(comm->ops, 4, split)) return false; /* no provider instance to split */
  return !comm->ops->split_ready || comm->ops->split_ready(comm, why, len);
}

/* The provider's own split (ops->split) on every rank, where every rank
 * can: *handle, this rank's group's provider handle (NULL: none, or no
 * provider split).  The ranks agree on its result: a failure on any rank
 * fails every rank, whose handles are released. */
static symm_result_t provider_split(symm_comm_t *comm, const split_rec_t *all, void **handle) {
  *handle = NULL;
  if (!SYMM_OPS_HAS(comm->ops, 4, split)) return SYMM_SUCCESS;
  for (int r = 0; r < comm->size; r++)
    if (!all[r].provider_split) {
      SYMM_INFO(INIT, "comm %d: split #%llu: rank %d cannot split the %s backend's provider "
                "instance (its log says why): each group makes a new one", comm->index,
                (unsigned long long)comm->call.seq, r, comm->ops->name);
      return SYMM_SUCCESS;
    }
  const split_rec_t *me = &all[comm->rank];
  int color = SYMM_SPLIT_NONE, key = 0, size = 0;
  if (me->color != SYMM_SPLIT_NONE) {
    place_in_group(comm, all, &key, &size);
    color = group_number(comm, all);
  }
  symm_result_t res = comm->ops->split(comm, color, key, handle);
  if (res != SYMM_SUCCESS) *handle = NULL; /* a failed split leaves none */
  char what[64];
  snprintf(what, sizeof what, "the %s backend's split", comm->ops->name);
  res = symm_comm_agree(comm, res, what);
  if (res != SYMM_SUCCESS) {
    comm->ops->split_release(comm, *handle, true);
    *handle = NULL;
  }
  return res;
}

/* The child's number on the store: the same on every rank of the group,
 * different for every group of every split of every communicator of the
 * job, and apart from the numbers symm_comm_init hands out (bit 30). */
static int child_index(const symm_comm_t *comm, const split_rec_t *all) {
  /* The call's number: the same on every rank (they are in step, or the
   * round failed), unlike a count of this rank's splits. */
  const uint64_t seq = comm->call.seq;
  const int me = comm->rank;
  uint64_t f[4] = {(uint64_t)comm->index, seq, (uint64_t)(uint32_t)all[me].color,
                   all[me].color == SYMM_SPLIT_BY_HOST ? comm->host_ids[me] : 0};
  uint64_t h = symm_hash64(f, sizeof f, symm_hash64(comm->job_id, strlen(comm->job_id), 0));
  return (int)(0x40000000u | ((uint32_t)(h ^ (h >> 32)) & 0x3fffffffu));
}

/* The lowest parent rank of this rank's group: the group's color for a
 * channel's split, the same on every member, distinct between groups. */
static int group_leader(const symm_comm_t *comm, const split_rec_t *all) {
  for (int r = 0; r < comm->size; r++)
    if (same_group(comm, all, r, comm->rank)) return r;
  return comm->rank;
}

/* A parent on callbacks: every parent rank has its channel split (opted-out
 * ranks too, with color -1, as MPI_Comm_split wants), then the ranks agree
 * that every split worked, so that none makes a group the others lack. */
static symm_result_t split_channel(symm_comm_t *comm, const split_rec_t *all, int rank,
                                   symm_bootstrap_callbacks_t **channel) {
  const symm_bootstrap_callbacks_t *cb = comm->callbacks;
  const bool member = all[comm->rank].color != SYMM_SPLIT_NONE;
  symm_bootstrap_callbacks_t *child = calloc(1, sizeof *child);
  symm_result_t res = SYMM_SUCCESS;
  if (!child) res = symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_split: out of memory");
  if (res == SYMM_SUCCESS) {
    *child = (symm_bootstrap_callbacks_t)SYMM_BOOTSTRAP_CALLBACKS_INIT;
    int rc = cb->split(cb->ctx, member ? group_leader(comm, all) : -1, rank, child,
                       symm_comm_timeout_ms(comm));
    if (rc != 0)
      res = symm_error(rc > 0 && rc <= SYMM_ERR_BACKEND_UNAVAILABLE ? (symm_result_t)rc
                                                                    : SYMM_ERR_BACKEND,
                       "symm_comm_split: the split callback failed on rank %d (returned %d)",
                       comm->rank, rc);
    else if (member && (!child->allgather || child->world_size < 1 || child->rank < 0 ||
                        child->rank >= child->world_size))
      res = symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_split: the split callback gave rank %d "
                       "a channel without allgather or with rank %d of %d", comm->rank,
                       child->rank, child->world_size);
  }
  res = symm_comm_agree(comm, res, "symm_comm_split's channel");
  if (res != SYMM_SUCCESS || !member) {
    /* What a failed split callback left is not a channel to release. */
    if (child && !(member && child->allgather)) child->release = NULL;
    symm_release_channel(child);
    child = NULL;
  }
  *channel = child;
  return res;
}

/* The round's verdict: a rank whose arguments were refused fails the
 * call on every rank. */
static symm_result_t check_refusals(const symm_comm_t *comm, const split_rec_t *all,
                                    const char *mine_why) {
  if (all[comm->rank].refused) return symm_error(SYMM_ERR_INVALID_ARG, "%s", mine_why);
  for (int r = 0; r < comm->size; r++)
    if (all[r].refused)
      return symm_error(SYMM_ERR_MISMATCH, "symm_comm_split: rank %d's call failed its "
                        "argument checks there", r);
  return SYMM_SUCCESS;
}

static symm_result_t split_agreed(symm_comm_t *comm, const split_rec_t *mine, const char *why,
                                  symm_comm_t **newcomm) {
  split_rec_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_split: out of memory");
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_SPLIT, mine, sizeof *mine, all);
  if (res == SYMM_SUCCESS) res = check_refusals(comm, all, why);
  for (int r = 0; res == SYMM_SUCCESS && r < comm->size; r++)
    if (all[r].no_channel)
      res = symm_error(SYMM_ERR_UNSUPPORTED, "symm_comm_split: the bootstrap callbacks of rank "
                       "%d have no split callback, which a group of a communicator on callbacks "
                       "needs", r);
  if (res == SYMM_SUCCESS && comm->caps.collective_alloc)
    res = symm_error(SYMM_ERR_UNSUPPORTED, "symm_comm_split: the %s backend allocates over "
                     "every rank of its provider's world at once, which a group cannot do; "
                     "the host, native, cuda and nccl backends split", comm->ops->name);
  int rank = 0, size = 0;
  place_in_group(comm, all, &rank, &size);
  symm_bootstrap_callbacks_t *channel = NULL;
  if (res == SYMM_SUCCESS && comm->callbacks) res = split_channel(comm, all, rank, &channel);
  void *handle = NULL;
  if (res == SYMM_SUCCESS && (res = provider_split(comm, all, &handle)) != SYMM_SUCCESS) {
    symm_error_context("symm_comm_split(color %d)", mine->color);
    symm_release_channel(channel);
    channel = NULL;
  }
  if (res == SYMM_SUCCESS && mine->color != SYMM_SPLIT_NONE) {
    SYMM_INFO(INIT, "comm %d: split #%llu: color %d key %d -> rank %d of %d%s", comm->index,
              (unsigned long long)comm->call.seq, mine->color, mine->key, rank, size,
              handle ? ", from the provider's split" : "");
    const int index = child_index(comm, all);
    res = channel ? symm_comm_create_child_on(comm, channel, index, handle, newcomm)
                  : symm_comm_create_child(comm, rank, size, index, handle, newcomm);
    if (res != SYMM_SUCCESS)
      symm_error_context("symm_comm_split(color %d) as rank %d of %d", mine->color, rank, size);
  }
  free(all);
  return res;
}

symm_result_t symm_comm_split(symm_comm_t *comm, int color, int key, symm_comm_t **newcomm) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_split: comm is NULL");
  if (newcomm) *newcomm = NULL;
  /* A refused call still takes its place: its peers learn of it in the
   * round instead of pairing with this rank's next call. */
  char why[160] = "";
  if (!newcomm)
    snprintf(why, sizeof why, "symm_comm_split: newcomm is NULL");
  else if (!color_valid(color))
    snprintf(why, sizeof why, "symm_comm_split: color %d is negative (SYMM_SPLIT_NONE: no "
             "group, SYMM_SPLIT_BY_HOST: this host's ranks)", color);
  split_rec_t mine = {.color = color, .key = key, .refused = why[0] != 0,
                      .no_channel = comm->callbacks && !comm->callbacks->split};
  char no_split[256] = "";
  mine.provider_split = provider_can_split(comm, no_split, sizeof no_split);
  if (no_split[0])
    SYMM_INFO(INIT, "comm %d: symm_comm_split: the %s backend cannot split this communicator's "
              "provider instance: %s; each group makes a new one", comm->index, comm->ops->name,
              no_split);
  symm_call_begin(comm, true, "symm_comm_split", "symm_comm_split(color %d, key %d)", color,
                  key);
  symm_result_t res = split_agreed(comm, &mine, why, newcomm);
  symm_call_end(comm);
  return res;
}

symm_result_t symm_comm_split_2d(symm_comm_t *comm, int group_size, symm_comm_t **row,
                                 symm_comm_t **column) {
  if (row) *row = NULL;
  if (column) *column = NULL;
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_split_2d: comm is NULL");
  const bool bad = group_size < 1 || comm->size % group_size != 0 || !row || !column;
  const int r = comm->rank, g = group_size > 0 ? group_size : 1;
  /* Refused arguments still make both calls, so that the peers fail with
   * a mismatch in each and the ranks stay in step. */
  symm_result_t r1 = symm_comm_split(comm, r / g, r, bad ? NULL : row);
  char saved[512];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  symm_result_t r2 = symm_comm_split(comm, r % g, r, bad ? NULL : column);
  if (bad)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_split_2d: %s",
                      !row || !column ? "row or column is NULL"
                                      : "the group size must divide the number of ranks");
  if (r1 == SYMM_SUCCESS && r2 == SYMM_SUCCESS) return SYMM_SUCCESS;
  if (r1 == SYMM_SUCCESS) symm_comm_destroy(*row);
  if (r2 == SYMM_SUCCESS) symm_comm_destroy(*column);
  *row = *column = NULL;
  return r1 != SYMM_SUCCESS ? symm_error(r1, "%s", saved) : r2;
}
