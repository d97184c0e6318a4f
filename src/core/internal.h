/*
 * The core's own declarations: the communicator, the tensor, the registry.
 * Not installed.  The layers below it see the library through the headers
 * of src/include/ (symm_backend.h for backends).  Every symbol defined by
 * the library and not in symmem.h is hidden (-fvisibility=hidden).
 */
#ifndef SYMM_INTERNAL_H
#define SYMM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_backend.h"
#include "symm_bootstrap.h"
#include "symm_engine.h"

/* ---------------------------------------------------------------- backends */
/* Every backend: the static table in `auto` preference order, then those
 * registered at run time (symm_backend_register). */
const symm_backend_ops_t *symm_backend_find(symm_backend_t id);
const symm_backend_ops_t *const *symm_backend_list(size_t *count);

/* ----------------------------------------------------------- communicator */
struct symm_pool_entry;

/* A host name as the ranks tell each other at init: Linux's longest
 * (HOST_NAME_MAX, 64) and its terminator. */
#define SYMM_HOST_NAME_BYTES 65

/* The communicator-wide call this rank is in, as the user made it.  The
 * library's own calls of API functions inside it (the scratch's alloc and
 * rendezvous inside a collective) are steps of it: they take no number and
 * carry its name, so that a mismatch names what the user called. */
typedef struct {
  int depth;        /* 0: no call; > 1: API functions called inside it */
  uint64_t seq;     /* its number (see symm_call_begin) */
  uint64_t *counter;/* what it took the number from (coll_seq or host_seq) */
  const char *fn;   /* "symm_all_reduce" (static) */
  const struct symm_coll_args *coll; /* a collective's arguments, else NULL */
  uint64_t outer_deadline; /* symm_op_deadline_begin's result, for the end */
  char desc[96];    /* "symm_all_reduce(count 100, f32, sum)"; a collective's
                       is made on first use (symm_call_desc): calls that
                       match never pay for it */
} symm_call_t;

struct symm_comm {
  int rank, size, local_rank, local_size;
  int device;                /* the engine's device, -1: none (CPU memory) */
  int requested_device;      /* config or SYMM_DEVICE, -1: from the local rank */
  int timeout_ms;
  size_t pad_bytes;          /* every tensor's signal pad, the same on every rank */
  int index;                 /* its number on its store (symm_store_next_comm_number) */
  char job_id[64];           /* same on every rank */
  char name_nonce[17];       /* rank 0's random hex, same on every rank: names of sockets */
  char prefix[96];           /* store key prefix of this communicator */
  symm_backend_t backend;
  const symm_backend_ops_t *ops;
  symm_backend_caps_t caps;  /* ops->caps as init left them */
  void *backend_state;
  const symm_engine_ops_t *engine;
  void *engine_state;
  bool ready;                /* symm_comm_init succeeded */
  int unreachable;           /* peers the backend cannot load and store (ops->peer_reachable) */
  symm_store_t *store;
  struct symm_store_server *server; /* non-NULL if this rank serves the store */
  bool server_shared;               /* server is the process's shared one (store_serving.c) */
  symm_bootstrap_t *bootstrap;  /* what the core uses: shm if possible */
  symm_bootstrap_t *store_bootstrap; /* kept when bootstrap is shm */
  /* The caller's callbacks the ranks meet through (config.bootstrap), NULL:
   * the store; owned_callbacks: the same when a split made them (released
   * with the `release` callback and freed at teardown). */
  const symm_bootstrap_callbacks_t *callbacks;
  symm_bootstrap_callbacks_t *owned_callbacks;
  int32_t *pids;             /* [size], from init; 0 where this process cannot watch
                                that rank's pid (another host or PID namespace) */
  uint64_t *pid_starts;      /* [size], each rank's start time as it published it:
                                pids[r] is watched with it (symm_peer_watch_add) */
  uint64_t *host_ids;        /* [size], hash of each rank's host name */
  char (*host_names)[SYMM_HOST_NAME_BYTES]; /* [size], each rank's host name as it said
                                               (cut to SYMM_HOST_NAME_BYTES - 1) */
  bool single_host;
  bool lost_noted;           /* this rank told the others of a peer gone (notes.c) */
  uint64_t next_mem_id;
  uint64_t rendezvous_seq;    /* bumped as every rendezvous begins and as one succeeds */
  /* Buffers a collective found needing no mapping on use (collective.c),
   * which holds while rendezvous_seq is settled_seq: only a rendezvous
   * makes a tensor of this communicator need it. */
  const void *settled[2];
  uint64_t settled_seq;
  uint64_t alloc_seq;        /* collective allocations made (caps.collective_alloc) */
  pthread_mutex_t lock;      /* tensors list, pool */
  struct symm_tensor *tensors; /* live tensors (doubly linked) */
  struct symm_pool_entry *pool;
  size_t pool_bytes, pool_limit;
  /* Collectives */
  symm_tensor_t *scratch;    /* staging for buffers that are not symmetric */
  symm_algo_t allreduce_algo;
  symm_algo_t copy_algo;     /* all-gather, broadcast, all-to-all(-v): AUTO or CE */
  /* Users' tensors map a peer on its first use (SYMM_MAP_PEERS on_use and
   * the backend's caps.map_on_use); the library's own map every peer. */
  bool map_on_use;
  uint64_t coll_seq;         /* the last number a communicator-wide call took */
  uint64_t host_seq;         /* the same for host calls where the engine has no
                                host_call (GPU: collectives only enqueue) */
  symm_call_t call;
  int async_error;           /* symm_result_t, set by symm_comm_set_async_error */
  char async_msg[256];
  /* Groups (split.c): where children meet (the parent's store), the
   * parent that a child keeps alive, and a parent's live children. */
  char store_addr[256];
  char token[256];
  symm_comm_t *parent;
  int live_children;         /* under lock */
  bool destroy_deferred;     /* destroyed while children lived: released with the last */
  void *split_handle;        /* the parent's ops->split made for this one, until its
                                backend takes it (symm_comm_take_split_handle) */
};

/* Collectives of the core, tagged so that ranks in different collectives
 * get SYMM_ERR_MISMATCH instead of exchanging garbage. */
enum {
  SYMM_TAG_BARRIER = 1,
  SYMM_TAG_RENDEZVOUS = 2,
  SYMM_TAG_STATUS = 3,
  SYMM_TAG_STARTUP = 4,  /* init's round: every rank's status and blobs */
  SYMM_TAG_ALLOC = 5,    /* a collective allocation's arguments */
  SYMM_TAG_FREE = 6,     /* a collective free's allocation */
  SYMM_TAG_COLLECTIVE = 7, /* an engine collective meeting a host call (symm_comm_meet_host_call) */
  SYMM_TAG_SPLIT = 8,    /* symm_comm_split's colors and keys */
  SYMM_TAG_PROVIDER = 9, /* a provider library's own round (symm_comm_provider_allgather) */
  SYMM_TAG_REGISTER = 10 /* symm_tensor_register's shapes and local verdicts */
};
/* Starts communicator-wide call `fn` (desc: its arguments in brief, as
 * printf); inside another call it is a step of that one and changes
 * nothing but the depth.  The outermost takes the next number (coll_seq);
 * with `host` it agrees over the bootstrap, and says so first where the
 * peers' engine collectives of the same number look (engine->host_call),
 * so that they join its round instead of waiting on the scratch pads.
 * Where the engine cannot look (no host_call: GPU collectives only
 * enqueue, and may legally come before or after a peer's host call) host
 * calls are numbered apart (host_seq), in their own order.
 * Only calls that every rank makes and that synchronise every rank take a
 * number: a rank-local call would break the engine's reuse of pads and
 * halves by parity.  Every begin has its end. */
void symm_call_begin(symm_comm_t *comm, bool host, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for an engine collective: `args` (alive until the end) give its
 * description when a message needs it. */
void symm_call_begin_collective(symm_comm_t *comm, const char *fn, const symm_coll_args_t *args);
void symm_call_end(symm_comm_t *comm);
/* collective.c: runs one collective call (agreement, checks, the engine);
 * the public collectives are this with their arguments. */
symm_result_t symm_coll_run(symm_comm_t *comm, symm_coll_args_t *a, const char *fn);
/* coll_v.c: check_args for an all-to-all-v: what the host can see of a->v
 * (counts of the host form, sizes, pointers), and a's byte counts. */
symm_result_t symm_coll_v_check(symm_comm_t *comm, symm_coll_args_t *a, const char *fn);
/* symm_mempool_set_comm's communicator is being destroyed: no more. */
void symm_mempool_forget_comm(symm_comm_t *comm);
/* comm.c: a communicator of `size` ranks, this one `rank`, on parent's
 * store under store number `index` (the same on every rank of it), with
 * the parent's backend, device, timeout and pad size; collective over its
 * ranks.  `split_handle`: what the parent's ops->split made for it (its
 * backend's init takes it), NULL if none; released through the parent's
 * ops->split_release if the child is not made or its init did not take
 * it.  The child keeps the parent alive (symm_comm_destroy). */
symm_result_t symm_comm_create_child(symm_comm_t *parent, int rank, int size, int index,
                                     void *split_handle, symm_comm_t **out);
/* A channel a split callback made (heap-allocated by the core): given
 * back through its release callback, then freed.  NULL: nothing. */
void symm_release_channel(symm_bootstrap_callbacks_t *channel);
/* The same for a parent on callbacks: the child meets through `channel`
 * (made by the parent's split callback, owned by the child from now on,
 * even when this fails). */
symm_result_t symm_comm_create_child_on(symm_comm_t *parent, symm_bootstrap_callbacks_t *channel,
                                        int index, void *split_handle, symm_comm_t **out);
/* The current call as the user made it ("symm_comm_init" outside any). */
const char *symm_call_desc(symm_comm_t *comm);

/* All-gathers `len` bytes per rank into recv[rank * len] (recv may be NULL
 * when len is 0), checking that every rank called the same op. */
symm_result_t symm_comm_allgather_op(symm_comm_t *comm, uint32_t op, const void *send,
                                     size_t len, void *recv);
/* The same with contributions of any length: values[r] (malloc'd, the
 * caller frees each) and lens[r]. */
symm_result_t symm_comm_allgatherv_op(symm_comm_t *comm, uint32_t op, const void *send,
                                      size_t len, void **values, size_t *lens);
/* Every rank contributes its result of a local step; returns `mine` if it
 * failed, else the first failure of another rank ("<what> failed on rank r
 * (code): " and the start of that rank's message), so all ranks leave a
 * collective with an error together, and each can tell why. */
symm_result_t symm_comm_agree(symm_comm_t *comm, symm_result_t mine, const char *what);
/* Writes "ranks 1, 3" (the peers ops->peer_reachable says this process does
 * not reach) into out. */
void symm_comm_unreachable_list(const symm_comm_t *comm, char *out, size_t len);

/* Frees every live tensor and pooled allocation (tensor.c); the handles of
 * the user's live tensors stay, orphaned, until symm_tensor_free. */
void symm_comm_release_tensors(symm_comm_t *comm);

/* ----------------------------------------------------------------- tensor */
/* struct symm_tensor.state: a handle the user holds stays readable after
 * symm_comm_destroy freed its memory, so that calls on it report
 * SYMM_ERR_STATE instead of touching freed memory. */
enum { SYMM_TENSOR_LIVE = 0x4c495645u, SYMM_TENSOR_ORPHANED = 0x4f525048u };

struct symm_tensor {
  uint32_t state;             /* SYMM_TENSOR_LIVE, or _ORPHANED after its comm's destroy */
  bool internal;              /* the library's own (the collectives' scratch) */
  bool pooled;                /* in the pool: the user's handle is gone */
  symm_comm_t *comm;          /* NULL once orphaned */
  int ndim;
  int64_t sizes[SYMM_MAX_DIMS];
  int64_t strides[SYMM_MAX_DIMS];
  symm_dtype_t dtype;
  size_t numel, nbytes;
  symm_mem_t mem;
  bool rendezvoused;
  symm_peer_map_t *peers;     /* [size]; peers[rank] unused */
  symm_exchange_info_t *infos;/* [size] from the last rendezvous */
  uint64_t peer_sig;          /* hash of infos[].id the peers map */
  bool on_use;                /* its peers are mapped on first use (symm_tensor_map_peer) */
  bool all_mapped;            /* every reachable peer of infos[] is mapped */
  void **peer_data;           /* [size] data pointers */
  void *contig_base;
  size_t contig_stride, contig_bytes;
  void *contig_priv;
  void *peer_data_dev;        /* device copy of peer_data (engine->device_copy) */
  void *pad_ptrs_dev;         /* device array of every rank's signal pad, likewise */
  uint64_t alloc_seq;         /* collective allocations: the comm's alloc_seq at alloc */
  bool registered;            /* ops->register_mem succeeded */
  bool mempool;               /* a block of symm_mempool_alloc */
  /* A registered tensor (symm_tensor_register, mem.user): the library's
   * allocation whose signal pad is this tensor's (internal, linked and
   * freed with it); NULL for an allocated tensor, whose pad is its own. */
  struct symm_tensor *pad_tensor;
  struct symm_tensor *prev, *next;
};

/* The tensor whose allocation holds t's signal pads (mem.pad_offset,
 * peers[r].base + infos[r].pad_offset): t itself, or a registered
 * tensor's pad_tensor.  Every reader of a pad goes through it. */
static inline const struct symm_tensor *symm_tensor_pad_holder(const struct symm_tensor *t) {
  return t->pad_tensor ? t->pad_tensor : t;
}

/* SYMM_SUCCESS for a tensor handle that may be used; SYMM_ERR_INVALID_ARG
 * for NULL, SYMM_ERR_STATE (naming fn) for one whose communicator was
 * destroyed (tensor_release.c). */
symm_result_t symm_tensor_usable(const symm_tensor_t *t, const char *fn);

/* This rank's data of t. */
static inline void *symm_tensor_local_data(const symm_tensor_t *t) {
  return (char *)t->mem.base + t->mem.data_offset;
}

/* Registered span of one rank's allocation: the data and the rounding
 * behind it (interior pointers anywhere in there find the tensor). */
static inline size_t symm_tensor_data_span(const symm_tensor_t *t) {
  return t->mem.alloc_bytes - t->mem.data_offset;
}

/* shape.c.  The element count and bytes of sizes[ndim] of dtype, or
 * SYMM_ERR_INVALID_ARG naming symm_tensor_alloc. */
symm_result_t symm_shape_check(const int64_t *sizes, int ndim, symm_dtype_t dtype,
                               size_t *numel, size_t *nbytes);
/* Gives t that shape, with row-major strides. */
void symm_tensor_set_shape(symm_tensor_t *t, const int64_t *sizes, int ndim, symm_dtype_t dtype,
                           size_t numel, size_t nbytes);

/* tensor_release.c: the bottom of a tensor's lifetime, which everything
 * above calls and which calls nothing above it.  symm_tensor_detach takes
 * t out of the registry (data, peers, contiguous view) and leaves its
 * memory and mappings; symm_tensor_release frees all it holds, the struct
 * too unless `orphan` keeps it for the user's handle (state ORPHANED);
 * symm_tensor_destroy is release without orphan; _in_order releases a
 * list (in allocation order where free is collective), orphaning only the
 * user's tensors. */
void symm_tensor_unmap_peer(symm_tensor_t *t, int r);
void symm_tensor_drop_device_arrays(symm_tensor_t *t); /* peer data and pads */
void symm_tensor_detach(symm_tensor_t *t);
void symm_tensor_release(symm_tensor_t *t, bool orphan);
void symm_tensor_destroy(symm_tensor_t *t);
void symm_tensor_release_in_order(symm_comm_t *comm, symm_tensor_t **list, size_t n,
                                  bool orphan);

/* pool.c: comm->pool, under comm->lock.  find takes (or with take false
 * only looks at) an allocation of alloc_bytes (and collective allocation
 * alloc_seq, unless 0); reuse resets a taken one's pad, destroying it if
 * that fails; add_locked pools t with the lock held (false: no memory);
 * drain empties the pool into *list (malloc'd). */
symm_tensor_t *symm_pool_find(symm_comm_t *comm, size_t alloc_bytes, uint64_t alloc_seq,
                              bool take);
symm_result_t symm_pool_reuse(symm_comm_t *comm, symm_tensor_t *t);
bool symm_pool_has_room(symm_comm_t *comm, size_t bytes);
bool symm_pool_add_locked(symm_comm_t *comm, symm_tensor_t *t);
symm_result_t symm_pool_drain(symm_comm_t *comm, symm_tensor_t ***list, size_t *n,
                              size_t *bytes);

/* tensor.c: a tensor struct of comm with its arrays and a fresh mem id,
 * no memory yet (symm_tensor_destroy frees it); link puts a live tensor
 * in comm's list; retire takes it out and pools it when `pool` and there
 * is room, else destroys it (a registered tensor: never pooled; its pad
 * tensor, detached, retired the same way). */
symm_result_t symm_tensor_shell(symm_comm_t *comm, symm_tensor_t **out);
void symm_tensor_link(symm_comm_t *comm, symm_tensor_t *t);
void symm_tensor_retire(symm_comm_t *comm, symm_tensor_t *t, bool pool);

/* tensor.c: symm_tensor_alloc for a caller that must know, on failure,
 * whether this rank failed alone (*alone: its peers may have succeeded and
 * be on their way to the rendezvous), as the scratch's growth must. */
symm_result_t symm_tensor_alloc_step(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                     symm_dtype_t dtype, symm_tensor_t **out, bool *alone);

/* rendezvous.c.  Maps rank r's memory of a rendezvoused tensor if it is
 * not mapped yet (a tensor whose peers are mapped on use): SYMM_SUCCESS
 * (also for this rank, and for a peer that is not load/store reachable,
 * whose pointer stays NULL), or the mapping's error (SYMM_ERR_PEER_LOST
 * for a peer whose process is gone).  Thread-safe. */
symm_result_t symm_tensor_map_peer(symm_tensor_t *t, int r);
/* The same for every peer, for what touches them all (peer pointer
 * arrays, contiguous views, signal barriers, collectives in place). */
symm_result_t symm_tensor_map_peers(symm_tensor_t *t);

/* rendezvous.c: takes this rank's place in a rendezvous of sizes[ndim] of
 * dtype that it cannot make (`failure`, the last error), so that its peers
 * fail at once naming it; returns `failure`. */
symm_result_t symm_rendezvous_refused(symm_comm_t *comm, const int64_t *sizes, int ndim,
                                      symm_dtype_t dtype, symm_result_t failure);

/* ---------------------------------------------------------------- registry */
/* Process-wide map from address ranges to tensors; thread-safe. */
symm_result_t symm_registry_add(const void *base, size_t len, symm_tensor_t *tensor, int rank);
/* Promises n later adds that need no memory (SYMM_ERR_NO_MEMORY now if
 * the room cannot be made), so that a step whose outcome the ranks agree
 * on can take its only local failure into the agreement: each
 * symm_registry_add_reserved uses one promise (failing only on an
 * overlap, a bug); what is left is given back by symm_registry_unreserve. */
symm_result_t symm_registry_reserve(size_t n);
symm_result_t symm_registry_add_reserved(const void *base, size_t len, symm_tensor_t *tensor,
                                         int rank);
void symm_registry_unreserve(size_t n);
void symm_registry_remove(const void *base);
/* Whether [base, base + len) overlaps a live entry: the first one's range,
 * tensor and rank. */
bool symm_registry_overlap(const void *base, size_t len, const void **ebase, size_t *elen,
                           symm_tensor_t **tensor, int *rank);
/* Returns the entry containing ptr: its range start/len, tensor, rank. */
bool symm_registry_find(const void *ptr, const void **base, size_t *len,
                        symm_tensor_t **tensor, int *rank);
size_t symm_registry_count(void);


#endif /* SYMM_INTERNAL_H */
