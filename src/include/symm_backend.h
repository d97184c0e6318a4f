/*
 * The backend-author header: everything a backend (src/backends/<name>/)
 * may see of the library.  A backend includes this header and its own
 * files, nothing else of the library; it never sees struct symm_comm or
 * struct symm_tensor, only the accessors below.  Not installed.
 *
 * A backend is only what differs between providers: how memory is made and
 * shared.  Collectives and signals come from the engine that serves the
 * backend's kind of memory (symm_engine.h: the CPU engine for memory the CPU
 * can load and store, the GPU engine for device memory), which works from
 * the peer pointers the backend's map_peer gives.  docs/design.md has the
 * checklist for adding one.
 */
#ifndef SYMM_BACKEND_H
#define SYMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "symm_error.h"
#include "symm_settings.h"
#include "symm_util.h"

/* The smallest signal pad, and the unit of every pad's size: an
 * allocation's pad is symm_mem_t.pad_bytes (the communicator's
 * symm_comm_signal_pad_bytes), a multiple of this.  The collectives' own
 * flags use the first SYMM_SIGNAL_PAD_MIN_BYTES of the scratch tensor's. */
#define SYMM_SIGNAL_PAD_MIN_BYTES 4096

/* ------------------------------------------------------------ memory */

/* Which memory a backend makes, and so which engine serves it. */
typedef enum {
  SYMM_MEM_HOST = 1,   /* the CPU loads and stores peers' memory: the CPU engine */
  SYMM_MEM_DEVICE = 2  /* GPU memory: the GPU engine (device, context, kernels) */
} symm_mem_kind_t;

/*
 * One rank's piece of symmetric memory as the backend made it.  The core
 * owns the struct; the backend fills it in alloc and reads it afterwards.
 * Layout of the allocation: [... signal pad ... | data ... | rounding]; the
 * pad starts at base + pad_offset, the data at base + data_offset.
 */
typedef struct symm_mem {
  void *base;          /* local mapping of the whole allocation */
  size_t data_offset;  /* >= pad_offset + pad_bytes */
  size_t alloc_bytes;  /* total, rounded to the granularity */
  uint64_t id;         /* unique per process and communicator, never reused */
  int device;          /* -1 for CPU memory */
  void *priv;          /* backend state (handles, fds ...) */
  /* Where the signal pad starts, from base: 0 unless the backend places the
   * pad elsewhere in [base, base + data_offset) (set by alloc). */
  size_t pad_offset;
  /* Bytes of the signal pad (the communicator's, set by the core before
   * alloc): a multiple of SYMM_SIGNAL_PAD_MIN_BYTES. */
  size_t pad_bytes;
  /* The user's memory (register_user, symm_tensor_register), set by the
   * core: base + data_offset is the user's pointer, alloc_bytes -
   * data_offset the tensor's bytes exactly, and there is no pad here (it
   * lives in a library allocation beside it).  A peer's exchange info of
   * such a tensor describes the peer's registration too (the core pairs
   * only registrations with registrations), so map_peer, export_mem and
   * validate tell the two apart by local->user. */
  bool user;
} symm_mem_t;

/* What a backend's register_user fills in: the user's nbytes at
 * data_offset of the mapping that starts at base (the pad lives in the
 * tensor's pad tensor: pad_offset 0), on `device`, with the backend's
 * own record. */
static inline void symm_mem_set_user(symm_mem_t *mem, void *base, size_t data_offset,
                                     size_t nbytes, int device, void *priv) {
  mem->base = base;
  mem->data_offset = data_offset;
  mem->alloc_bytes = data_offset + nbytes;
  mem->pad_offset = 0;
  mem->device = device;
  mem->priv = priv;
}

/* A peer's memory as mapped into this process. */
typedef struct symm_peer_map {
  void *base;          /* mapping of the peer's whole allocation */
  uint64_t peer_id;    /* the peer's symm_mem_t.id it maps */
  void *priv;
} symm_peer_map_t;

/*
 * What a backend exchanges about one allocation during rendezvous: the core
 * all-gathers one of these per rank.  Backends that pass handles through the
 * bootstrap (fabric, CUDA IPC) put them in `blob`.
 */
#define SYMM_EXCHANGE_BLOB_BYTES 128
typedef struct symm_exchange_info {
  uint64_t id;
  uint64_t alloc_bytes;
  uint64_t data_offset;
  uint64_t pad_offset;
  uint8_t blob[SYMM_EXCHANGE_BLOB_BYTES];
} symm_exchange_info_t;

/*
 * What a rank publishes for its peers during a start-up phase (init
 * publishes, the core all-gathers every rank's blob in one round, startup
 * consumes them).  data is malloc'd by the publisher and freed by the core;
 * len 0 publishes nothing.
 */
typedef struct symm_blob {
  void *data;
  size_t len;
} symm_blob_t;

struct symm_coll_args; /* one collective call (below) */

/* ------------------------------------------------------------ capabilities */

/*
 * What a backend can do.  The ops table carries what it can do at best
 * (caps, read without initialising it: symmem-info, and the messages that
 * name the backends able to do something); init gets a copy and clears
 * what this machine or this provider's version cannot do.  The core decides
 * from these, never from the backend's name.
 */
typedef struct symm_backend_caps {
  /* Calls on its tensors take a stream (GPU memory); without, a non-NULL
   * stream is refused. */
  bool takes_stream;
  /* alloc is collective: every rank calls it for the same size in the same
   * order (NVSHMEM).  The core compares every rank's arguments first. */
  bool collective_alloc;
  /* free is collective too: the core checks that every rank frees the same
   * allocation, and refuses an out-of-order free on every rank. */
  bool collective_free;
  /* register_mem is a collective step after alloc (NCCL windows). */
  bool registers;
  /* contiguous_map: every rank's data back to back in one range. */
  bool contiguous_view;
  /* The engine can give a device array of the peers' pointers
   * (symm_tensor_peer_ptrs_device). */
  bool device_peer_array;
  /* backend_handle gives the provider's communicator (ncclComm_t). */
  bool backend_handle;
  /* register_user makes the user's memory symmetric (symm_tensor_register;
   * ops version 6). */
  bool registers_user;
  /* map_peer is local, cheap to call at any time and fails for a peer
   * that is gone (PEER_LOST): the core may map a peer on its first use
   * instead of every peer at rendezvous (SYMM_MAP_PEERS). */
  bool map_on_use;
} symm_backend_caps_t;

/* ------------------------------------------------------------ the ops table */

/*
 * The backend ops table (SQLite-VFS style).  Members are only ever appended;
 * the core checks `version` and NULL before calling an optional member.
 * Required: name, id, mem_kind, probe, init, fini, granularity, alloc, free,
 * map_peer, unmap_peer.  "Local" calls touch only this rank; "collective"
 * ones are made by every rank of the communicator in the same order.
 */
typedef struct symm_backend_ops {
  int version; /* 1 to 6 */
  const char *name;
  symm_backend_t id;
  symm_mem_kind_t mem_kind;
  symm_backend_caps_t caps; /* at best: init may clear members */
  /* `auto` never picks it: chosen by name only (a provider library the
   * job may not mean to start). */
  bool by_name_only;
  /* Usable in this process?  SYMM_SUCCESS or SYMM_ERR_UNSUPPORTED with the
   * reason written to why.  Cheap and free of side effects apart from
   * loading libraries. */
  symm_result_t (*probe)(char *why, size_t why_len);
  /* Local: this rank's resources.  The engine is up (symm_gpu_of for
   * device memory).  May clear members of *caps; may publish a blob for
   * startup.  Sets its state with symm_backend_set_state.  On failure the
   * core calls fini. */
  symm_result_t (*init)(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob);
  /* Optional, local: every rank's init blob (all[rank]), once every rank's
   * init succeeded.  The ranks agree on its result afterwards. */
  symm_result_t (*startup)(symm_comm_t *comm, const symm_blob_t *all);
  /* Local: frees what init made (also after a failed init or startup). */
  void (*fini)(symm_comm_t *comm);
  /* Allocation granularity in bytes (power of two). */
  size_t (*granularity)(symm_comm_t *comm);
  /* Allocates mem->alloc_bytes (already rounded) and fills base, priv,
   * device, pad_offset.  The pad must be zeroed.  Local, or collective
   * with caps.collective_alloc (the core compared every rank's arguments
   * and calls it on every rank). */
  symm_result_t (*alloc)(symm_comm_t *comm, symm_mem_t *mem);
  /* Local, or collective with caps.collective_free (the core checked that
   * every rank frees this allocation now). */
  void (*free)(symm_comm_t *comm, symm_mem_t *mem);
  /* Optional: fills info->blob for peers (called before the all-gather). */
  symm_result_t (*export_mem)(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
  /* Maps peer `peer`'s allocation described by info into this process;
   * map->base is where this process loads and stores it. */
  symm_result_t (*map_peer)(symm_comm_t *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map);
  void (*unmap_peer)(symm_comm_t *comm, symm_peer_map_t *map);
  /* Optional (caps.contiguous_view): maps the data of every rank back to
   * back.  maps[r] for r != rank, local for r == rank.  *stride = bytes
   * between consecutive ranks. */
  symm_result_t (*contiguous_map)(symm_comm_t *comm, const symm_mem_t *local,
                                  const symm_peer_map_t *maps, const symm_exchange_info_t *infos,
                                  void **base, size_t *stride, void **priv);
  void (*contiguous_unmap)(symm_comm_t *comm, void *base, size_t bytes, void *priv);
  /* Optional: checks of a pointer inside one of its allocations beyond the
   * core's (native: VMM, device ...). */
  symm_result_t (*validate)(symm_comm_t *comm, const void *ptr, size_t nbytes);
  /* Optional: the provider's own communicator (ncclComm_t ...). */
  symm_result_t (*backend_handle)(symm_comm_t *comm, void **handle);
  /* Optional: zeroes the signal pad of a pooled allocation before reuse;
   * NULL: the engine zeroes it (symm_engine_ops_t.zero). */
  symm_result_t (*reset_pad)(symm_comm_t *comm, symm_mem_t *mem);
  /* Optional: what symmem-info shows about this backend on this machine,
   * one item per line. */
  void (*describe)(FILE *out);
  /* Optional, collective (caps.registers): registers a fresh allocation
   * with the provider (NCCL's window).  A pooled allocation reused keeps
   * its registration; deregister_mem runs before the real free. */
  symm_result_t (*register_mem)(symm_comm_t *comm, symm_mem_t *mem);
  void (*deregister_mem)(symm_comm_t *comm, symm_mem_t *mem);
  /* members above: version 1 */
  /* Optional: whether this process loads and stores rank `peer`'s memory
   * (asked from the end of startup on); NULL: every peer's.  map_peer
   * leaves map->base NULL for a peer that is not: its data pointer is NULL,
   * its remote views and signals are refused by name, and collectives run
   * `collective` below or are refused naming the peers. */
  bool (*peer_reachable)(symm_comm_t *comm, int peer);
  /* Optional: the provider's own collective (NCCL's on the window,
   * NVSHMEM's team operations), run instead of the engine's when some peer
   * is not load/store reachable.  The core has checked the arguments. */
  symm_result_t (*collective)(symm_comm_t *comm, const struct symm_coll_args *args);
  /* members above: version 2 */
  /* Optional: why rank `peer` is not load/store reachable (peer_reachable
   * false), one sentence into out, for the messages that refuse it. */
  void (*unreachable_why)(symm_comm_t *comm, int peer, char *out, size_t len);
  /* members above: version 3 */
  /* Groups (symm_comm_split) from the provider's own split of comm's
   * provider communicator (NCCL: ncclCommSplit) instead of a new provider
   * instance per group.  NULL: every group makes its own (init).
   * split_ready, optional, local: whether split can run on this rank now;
   * false with the reason in why (the provider's library lacks it, its
   * communicator was aborted).  NULL: always.  Each rank tells the others
   * in the split's round, and the core calls split only where every rank
   * can; else every group makes its own.
   * split, collective over comm: called by the core on every rank of
   * comm, in the split's call, after the ranks agreed on the groups.
   * `color`: this rank's group, >= 0, the same on every member and
   * different for every group; or SYMM_SPLIT_NONE (joins none, *child
   * stays NULL).  `key`: this rank's rank in its group.  *child: the
   * provider's handle for the group, owned by the backend's code: once
   * every rank's split succeeded (the core agrees on it), the core hands
   * it to the init of this rank's group (symm_comm_take_split_handle).
   * split_release, required with split, local: releases a handle of
   * split's that no group's init took (NULL: none).  `failed`: the ranks
   * agreed that the split failed somewhere; the backend then leaves
   * comm's provider communicator in the state every rank's will be in
   * (NCCL cannot cancel a split but by aborting its parent: the nccl
   * backend aborts it on every rank). */
  bool (*split_ready)(symm_comm_t *comm, char *why, size_t len);
  symm_result_t (*split)(symm_comm_t *comm, int color, int key, void **child);
  void (*split_release)(symm_comm_t *comm, void *child, bool failed);
  /* members above: version 4 */
  /* Optional: one-sided operations with a peer this rank cannot load and
   * store (peer_reachable false), through the provider's own transfers
   * (OpenSHMEM's and UCX's split of rkey_ptr against put/get: NVSHMEM's
   * on-stream put, NCCL's ncclPutSignal), stream-ordered on `stream` as
   * the engine's copies are.  `map` is the rendezvous' map of that peer
   * (its priv is the backend's), `offset` counts from the start of the
   * peer's allocation (the core adds the data's or the pad's offset):
   *  SYMM_ONE_SIDED_PUT: `bytes` from `local` to the peer at offset;
   *  SYMM_ONE_SIDED_GET: `bytes` of the peer at offset into `local`;
   *  SYMM_ONE_SIDED_SIGNAL: after everything before it on the stream
   *    (and released so that the peer sees it first), the 32-bit word at
   *    offset (this rank's slot in the peer's pad) set to 1, once the
   *    peer consumed the slot's last signal (it is 0), as the engines'
   *    puts do: back-to-back barriers need it (a provider with counting
   *    signals adds 1 where the waits subtract).
   * SYMM_ERR_UNSUPPORTED with the reason where the provider cannot. */
  symm_result_t (*one_sided)(symm_comm_t *comm, int op, const symm_peer_map_t *map, int peer,
                             size_t offset, void *local, size_t bytes, void *stream);
  /* members above: version 5 */
  /* Optional: makes memory the user has symmetric (symm_tensor_register).
   * `user` is the caller's descriptor (its size and version checked),
   * `nbytes` the tensor's bytes from user->ptr; mem->id, device, pad_bytes
   * and user are set.  Fills base, data_offset (base + data_offset ==
   * user->ptr) and alloc_bytes (== data_offset + nbytes), and priv; never
   * takes ownership of the memory.  Refuses memory it cannot share with
   * SYMM_ERR_INVALID_ARG and the reason, a provider that cannot register
   * with SYMM_ERR_UNSUPPORTED.  Local; collective with caps.registers or
   * caps.collective_alloc (the core agreed on every rank's arguments and
   * calls it on every rank).  After it, export_mem and map_peer see the
   * allocation with mem->user set. */
  symm_result_t (*register_user)(symm_comm_t *comm, const symm_user_mem_t *user, size_t nbytes,
                                 symm_mem_t *mem);
  /* Required with register_user: releases what it made (handles, the
   * provider's registration), never the user's memory.  Collective where
   * register_user is and caps.collective_free says so (the core checked
   * that every rank releases this registration now), else local. */
  void (*deregister_user)(symm_comm_t *comm, symm_mem_t *mem);
  /* Optional, local: this rank's verdict on the user's memory before the
   * ranks agree to register it: every refusal of register_user that needs
   * no peer.  Where register_user is a collective call into the provider
   * (NCCL's window, NVSHMEM's symmetric registration), a rank refused
   * inside it would leave its peers waiting in the provider: with
   * check_user the refusal travels in the core's first round instead, and
   * no rank calls the provider.  Same errors as register_user. */
  symm_result_t (*check_user)(symm_comm_t *comm, const symm_user_mem_t *user, size_t nbytes);
  /* members above: version 6 */
} symm_backend_ops_t;

/*
 * The required members of a backend whose functions are named
 * <p>_probe ... <p>_unmap_peer: SYMM_BACKEND_DECLARE_REQUIRED(p); in its
 * header declares them, SYMM_BACKEND_REQUIRED_MEMBERS(p) fills them in its
 * table.  One spelling of the contract: a function whose signature drifts
 * from the table's does not compile.
 */
#define SYMM_BACKEND_DECLARE_REQUIRED(p)                                      \
  symm_result_t p##_probe(char *why, size_t why_len);                         \
  symm_result_t p##_init(symm_comm_t *comm, symm_backend_caps_t *caps, symm_blob_t *blob); \
  void p##_fini(symm_comm_t *comm);                                           \
  size_t p##_granularity(symm_comm_t *comm);                                  \
  symm_result_t p##_alloc(symm_comm_t *comm, symm_mem_t *mem);                \
  void p##_free(symm_comm_t *comm, symm_mem_t *mem);                          \
  symm_result_t p##_map_peer(symm_comm_t *comm, const symm_mem_t *local, int peer, \
                             const symm_exchange_info_t *info, symm_peer_map_t *map); \
  void p##_unmap_peer(symm_comm_t *comm, symm_peer_map_t *map)
#define SYMM_BACKEND_REQUIRED_MEMBERS(p)                                      \
  .probe = p##_probe, .init = p##_init, .fini = p##_fini,                     \
  .granularity = p##_granularity, .alloc = p##_alloc, .free = p##_free,       \
  .map_peer = p##_map_peer, .unmap_peer = p##_unmap_peer

/* Whether the communicator's backend loads and stores every peer's memory
 * (ops->peer_reachable). */
bool symm_comm_all_reachable(const symm_comm_t *comm);

/* Whether the table has optional member `member`, which tables carry from
 * version `since` on (SQLite-VFS style: check both). */
#define SYMM_OPS_HAS(ops, since, member) ((ops)->version >= (since) && (ops)->member != NULL)
/* NULL when a table holds what every backend must (the required members, a
 * version and kind) and what its capabilities imply (caps.contiguous_view:
 * contiguous_map/unmap, caps.registers: register_mem/deregister_mem ...);
 * else what it lacks.  symm_backend_register refuses such a table, and the
 * built-in list leaves it out with a warning. */
const char *symm_backend_table_lacks(const symm_backend_ops_t *ops);

/* Adds a backend that is not in the library's table (tests: a backend of
 * their own), chosen by its name like the others (SYMM_BACKEND) and tried
 * last by `auto`.  id in [SYMM_BACKEND_COUNT_, 32), name and id unused so
 * far.  Call before creating communicators; ops must outlive them. */
symm_result_t symm_backend_register(const symm_backend_ops_t *ops);
/* Writes into out the names of the backends whose table sets the bool
 * capability at cap_offset (offsetof(symm_backend_caps_t, member)), as
 * "native or host", or "no" if none: for messages that name where a thing
 * can be done. */
void symm_backend_names_with(size_t cap_offset, char *out, size_t len);

/* ------------------------------------------------------------ accessors */

/* The communicator as a backend or an engine sees it.  rank, size,
 * local_rank, local_size, device and timeout: symmem.h's symm_comm_*. */
const char *symm_comm_job_id(const symm_comm_t *comm);   /* same on every rank */
int symm_comm_index(const symm_comm_t *comm);            /* its number on its store */
/* 16 random hex digits, the same on every rank of this communicator and
 * drawn when it is made: for the names of its sockets and objects, which
 * nobody can then predict (and take first) from the job id.  Empty for a
 * communicator not made by symm_comm_init (tests). */
const char *symm_comm_name_nonce(const symm_comm_t *comm);
/* Prefix of this communicator's keys in the store (same on every rank). */
const char *symm_comm_key_prefix(const symm_comm_t *comm);
/* The process of rank `peer` as this process can watch it, 0 when it
 * cannot (another host or PID namespace). */
int32_t symm_comm_peer_pid(const symm_comm_t *comm, int peer);
/* The first peer whose process this process sees gone, or -1. */
int symm_comm_first_gone(const symm_comm_t *comm);
/* A peer known to be gone, or -1: one this process sees gone (then
 * noted for the peers that cannot see it), one the bootstrap's server or
 * launcher marked lost (the store; the callbacks' lost_rank), or one a
 * peer noted.  Asks the bootstrap (a round trip to the store): call it
 * now and then while waiting, not in a tight loop. */
int symm_comm_lost_rank(symm_comm_t *comm);
/* Notes through the communicator's bootstrap, for what one rank must tell
 * peers that wait outside its rounds (a failed NCCL call).  `name` is
 * short and the same on every rank; the communicator's prefix is added.
 * Not collective; neither waits for peers.  put: the first value of a
 * name stays; false when the bootstrap keeps no notes or could not take
 * it.  get: true with the value (cut to cap) once some rank put it.
 * Neither changes the thread's error message. */
bool symm_comm_note_put(symm_comm_t *comm, const char *name, const char *value);
bool symm_comm_note_get(symm_comm_t *comm, const char *name, char *value, size_t cap);
/* Whether rank `peer` runs on this host. */
bool symm_comm_peer_same_host(const symm_comm_t *comm, int peer);
/* Rank `peer`'s host name as it said at init, for messages (hosts are
 * told apart by symm_comm_peer_same_host); NULL where the names are not
 * known (a communicator not made by symm_comm_init). */
const char *symm_comm_peer_host(const symm_comm_t *comm, int peer);
/* The communicator's hosts with their ranks, for messages that name them:
 * "a (ranks 0, 1) and b (rank 2)"; four hosts and four ranks each at most,
 * then "and more" / "and N more". */
void symm_comm_hosts_text(const symm_comm_t *comm, char *out, size_t len);
/* The device the configuration asks for (config, SYMM_DEVICE, else -1) and
 * the local rank; the GPU engine picks from them and reports its choice
 * with symm_comm_set_device (-1: none). */
int symm_comm_requested_device(const symm_comm_t *comm);
void symm_comm_set_device(symm_comm_t *comm, int device);
/* The provider's handle for this communicator that its parent's split
 * made (ops->split), handed over once: the first call returns it, and the
 * backend owns it from then on (its fini releases it); NULL for a
 * communicator not made so (symm_comm_init, or a group where the backend
 * could not split its parent's), and on every later call. */
void *symm_comm_take_split_handle(symm_comm_t *comm);
/* The backend's per-communicator state (NULL until set). */
void *symm_backend_state(const symm_comm_t *comm);
void symm_backend_set_state(symm_comm_t *comm, void *state);
/* What this communicator's backend can do (after init). */
const symm_backend_caps_t *symm_comm_caps(const symm_comm_t *comm);
/* The backend's name ("native"). */
const char *symm_comm_backend_name(const symm_comm_t *comm);

/* A provider library's own exchange over the communicator's bootstrap
 * (NVSHMEM's rounds through symmem's bootstrap plugin): gathers `len`
 * bytes from every rank into recv[rank * len].  Collective, and tagged as
 * the provider's step of the call the ranks are in (init, an allocation,
 * destroy), so that it pairs only with the same step on the other ranks:
 * a rank in another round makes it SYMM_ERR_MISMATCH on every rank, never
 * an exchange of the wrong data.  A length that differs between ranks is
 * SYMM_ERR_MISMATCH too.  Timeouts and lost peers as every bootstrap
 * round. */
symm_result_t symm_comm_provider_allgather(symm_comm_t *comm, const void *send, size_t len,
                                           void *recv);
/* This rank is going away while its peers may wait for it (a provider's
 * global exit): tells the caller's bootstrap callbacks (their `abort`),
 * nothing for the library's own bootstraps, whose peers see the process
 * gone. */
void symm_comm_abort_bootstrap(symm_comm_t *comm, symm_result_t code, const char *reason);

/* A tensor as a backend or an engine sees it. */
/* The live tensor whose data (some rank's, as mapped here) holds ptr,
 * without recording an error on a miss: false when there is none.  *rank:
 * whose data; *offset: from the start of that rank's data. */
bool symm_tensor_find(const void *ptr, symm_tensor_t **t, int *rank, size_t *offset);
const symm_mem_t *symm_tensor_mem(const symm_tensor_t *t);
/* After rendezvous: rank r's data as this process loads and stores it
 * (peer_data[rank] is the local data), NULL before, and NULL for a peer
 * not mapped yet of a tensor that maps its peers on use (the core maps
 * them all before it hands such a tensor to an engine: the collectives'
 * scratch always, a user's buffer where symm_tensor_peer_sig says so). */
void *const *symm_tensor_peer_data(const symm_tensor_t *t);
/* Hash of the allocations every rank's rendezvous mapped: equal on every
 * rank exactly when they rendezvoused the same tensors; 0 while a peer of
 * a tensor mapped on use is not mapped yet (then no peer may rely on this
 * rank's mappings of it). */
uint64_t symm_tensor_peer_sig(const symm_tensor_t *t);
/* The device copy of symm_tensor_peer_data (made on first use; device
 * memory only), NULL when there is none. */
void *symm_tensor_peer_data_device(const symm_tensor_t *t);

/* The live tensor whose registered range contains ptr: the range (a rank's
 * data, or a whole contiguous view: what symm_tensor_find's offset counts
 * from), its tensor and its rank (-1 for a contiguous view).  false when no
 * live tensor contains ptr.  Thread-safe, O(log n). */
bool symm_registry_find(const void *ptr, const void **base, size_t *len, symm_tensor_t **tensor,
                        int *rank);

/* ------------------------------------------------------------ collectives */

/* ops->one_sided's operations. */
enum { SYMM_ONE_SIDED_PUT = 1, SYMM_ONE_SIDED_GET = 2, SYMM_ONE_SIDED_SIGNAL = 3 };

/* ops->signal's and the engines' signal operations. */
enum { SYMM_SIGNAL_PUT = 1, SYMM_SIGNAL_WAIT = 2, SYMM_SIGNAL_BARRIER = 3 };

/* One collective call, as the core hands it to the engine. */
typedef enum {
  SYMM_COLL_ALL_REDUCE = 1,
  SYMM_COLL_ALL_GATHER = 2,
  SYMM_COLL_REDUCE_SCATTER = 3,
  SYMM_COLL_BROADCAST = 4,
  SYMM_COLL_ALL_TO_ALL = 5,
  SYMM_COLL_ALL_TO_ALL_V = 6 /* args.v describes the counts */
} symm_coll_kind_t;

/* How an all-to-all-v takes its counts and where it places what it
 * receives (symmem.h: symm_all_to_all_v and the _vdev forms). */
typedef enum {
  SYMM_V_HOST = 0,          /* host counts and displacements, in elements */
  SYMM_V_DEV = 1,           /* in_splits[world] rows; received packed by source */
  SYMM_V_DEV_2D = 2,        /* in_splits[world * n_experts]; received expert-major,
                               each expert's block at a multiple of major_align */
  SYMM_V_DEV_2D_COMBINE = 3 /* in_splits = [2][n_experts * world] counts and offsets,
                               expert-major; received rank-major, packed */
} symm_v_mode_t;

/* An all-to-all-v's description.  The core has checked what the host can
 * see: in SYMM_V_HOST every array is non-NULL (displacements it derived
 * when the caller passed NULL), counts match nothing yet (the peers'
 * counts are seen by the engine only), receive ranges do not overlap;
 * send_rows and recv_rows are the extents of the send and receive ranges
 * there, the capacities the caller gave in the device modes.  Counts in
 * device memory (GPU engine) are read by the kernel only. */
typedef struct symm_coll_v {
  symm_v_mode_t mode;
  const size_t *send_counts, *send_displs; /* SYMM_V_HOST: world elements each */
  const size_t *recv_counts, *recv_displs;
  const int64_t *in_splits;                /* device modes (see mode) */
  int64_t *out_splits_offsets;             /* device modes: [2][chunks] */
  size_t row_elems;                        /* elements per row; 1 in SYMM_V_HOST */
  size_t send_rows, recv_rows;             /* capacities of sendbuf, recvbuf in rows */
  int n_experts;                           /* chunks per peer: 1 unless 2-D */
  size_t major_align;                      /* SYMM_V_DEV_2D: rows, at least 1 */
} symm_coll_v_t;

typedef struct symm_coll_args {
  symm_coll_kind_t kind;
  const void *sendbuf;
  void *recvbuf;
  size_t count;         /* as in the public call */
  size_t send_bytes;    /* bytes of sendbuf read on this rank */
  size_t recv_bytes;    /* bytes of recvbuf written on this rank */
  symm_dtype_t dtype;
  symm_redop_t op;
  int root;
  symm_algo_t algo;     /* all-reduce: what runs (never AUTO), resolved by the core
                           through the engine's allreduce_algo; all-gather,
                           broadcast, all-to-all(-v): SYMM_ALGO_CE on the copy
                           engines (engine->ce_collective), else AUTO */
  symm_stream_t stream;
  uint64_t seq;         /* 1, 2, ... per communicator: epochs and mismatch checks */
  const symm_coll_v_t *v; /* SYMM_COLL_ALL_TO_ALL_V only, else NULL; count is
                             v->row_elems there, send/recv_bytes the capacities */
} symm_coll_args_t;

/* Scratch tensor of comm with at least `bytes` per rank besides what the
 * engine keeps in it (symm_engine_ops_t.scratch_fixed), allocating and
 * rendezvousing it if needed (collective then). */
symm_result_t symm_comm_scratch(symm_comm_t *comm, size_t bytes, symm_tensor_t **scratch);
/* The scratch tensor as it is now (NULL: none yet); local. */
symm_tensor_t *symm_comm_scratch_current(const symm_comm_t *comm);
/* Takes the next collective sequence number, for an engine that runs one
 * call as several (slices): every rank takes the same ones. */
uint64_t symm_comm_next_coll_seq(symm_comm_t *comm);
/* The signature a call refused by its argument checks takes part with
 * (engine abstain): no call's signature is 0. */
#define SYMM_COLL_SIG_REFUSED 0u
/* Stable 64-bit description of a collective for cross-rank comparison:
 * kind, count, dtype, op, root and, for all-reduce, the algorithm that
 * runs (SYMM_ALGO_CE too for the collectives that move data), for
 * all-to-all-v the mode, n_experts and major_align (not the counts, which
 * differ by rank); never SYMM_COLL_SIG_REFUSED nor SYMM_COLL_SIG_HOST_CALL (symm_engine.h). */
uint64_t symm_coll_signature(const symm_coll_args_t *args);
/* Whether collective `kind` (SYMM_COLL_*) reduces: all-reduce, reduce-scatter. */
static inline bool symm_coll_reduces(int kind) {
  return kind == SYMM_COLL_ALL_REDUCE || kind == SYMM_COLL_REDUCE_SCATTER;
}
/* The communicator's error raised asynchronously (device-side work). */
void symm_comm_set_async_error(symm_comm_t *comm, symm_result_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* SYMM_BACKEND_H */
