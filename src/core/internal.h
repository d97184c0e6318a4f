/*
 * Internal declarations shared by the core, the bootstrap and the backends.
 * Not installed.  Every symbol defined by the library and not in symmem.h is
 * hidden (-fvisibility=hidden), so internal names need no prefix discipline
 * beyond `symm_`-style readability.
 */
#ifndef SYMM_INTERNAL_H
#define SYMM_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "symmem.h"

#define SYMM_HIDDEN __attribute__((visibility("hidden")))

/* ---------------------------------------------------------------- errors */

/* Records code + formatted message as the thread's last error and returns
 * code, so that `return symm_error(SYMM_ERR_..., "...")` reads naturally.
 * Also logged at INFO (WARN for SYMM_ERR_INTERNAL). */
symm_result_t symm_error(symm_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Like symm_error, appending ": strerror(errno)"; returns SYMM_ERR_SYSTEM. */
symm_result_t symm_error_errno(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Prefixes the current last-error message with context ("rendezvous: ..."). */
void symm_error_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void symm_error_clear(void);
/* Puts back a message saved from symm_last_error() (cleanup paths). */
void symm_error_restore(const char *saved);

/* --------------------------------------------------------------- logging */
enum symm_log_level { SYMM_LOG_NONE = 0, SYMM_LOG_WARN = 1, SYMM_LOG_INFO = 2, SYMM_LOG_TRACE = 3 };
enum symm_subsys {
  SYMM_SUBSYS_INIT = 1u << 0,
  SYMM_SUBSYS_BOOTSTRAP = 1u << 1,
  SYMM_SUBSYS_STORE = 1u << 2,
  SYMM_SUBSYS_ALLOC = 1u << 3,
  SYMM_SUBSYS_BACKEND = 1u << 4,
  SYMM_SUBSYS_COLL = 1u << 5,
  SYMM_SUBSYS_ALL = ~0u
};
/* Level and subsystem mask from SYMM_DEBUG / SYMM_DEBUG_SUBSYS (read once). */
int symm_log_level(void);
void symm_log(int level, unsigned subsys, const char *file, int line,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Device ordinal printed in log prefixes ("[dev]"); -1 prints nothing. */
void symm_log_set_device(int device);

#define SYMM_WARN(sub, ...) symm_log(SYMM_LOG_WARN, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__)
#define SYMM_INFO(sub, ...)                                                   \
  do {                                                                        \
    if (symm_log_level() >= SYMM_LOG_INFO)                                    \
      symm_log(SYMM_LOG_INFO, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define SYMM_TRACE(sub, ...)                                                  \
  do {                                                                        \
    if (symm_log_level() >= SYMM_LOG_TRACE)                                   \
      symm_log(SYMM_LOG_TRACE, SYMM_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* Check macros: on failure, leave a trail at INFO and propagate. */
#define SYMM_CHECK(call)                                                      \
  do {                                                                        \
    symm_result_t res_ = (call);                                              \
    if (res_ != SYMM_SUCCESS) {                                               \
      SYMM_INFO(ALL, "%s failed: %s", #call, symm_last_error());              \
      return res_;                                                            \
    }                                                                         \
  } while (0)
#define SYMM_CHECK_GOTO(call, res, label)                                     \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != SYMM_SUCCESS) {                                              \
      SYMM_INFO(ALL, "%s failed: %s", #call, symm_last_error());              \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* -------------------------------------------------------------- settings */
/* Every SYMM_* variable is declared once in settings.c with its default and
 * help text; these read the environment, falling back to the default. */
typedef enum { SYMM_SETTING_STRING, SYMM_SETTING_INT, SYMM_SETTING_BOOL, SYMM_SETTING_SIZE } symm_setting_type_t;
typedef struct symm_setting_desc {
  const char *name;
  symm_setting_type_t type;
  const char *default_value; /* as text; NULL = unset */
  const char *help;
  bool secret; /* a tool shows that it is set, never its value */
  bool per_job; /* a job's identity that the launcher sets, not a choice */
} symm_setting_desc_t;
/* What a tool may print for setting d's value v: v, or a placeholder for a
 * secret (the job's token must not end up in logs). */
const char *symm_setting_shown(const symm_setting_desc_t *d, const char *v);
const symm_setting_desc_t *symm_settings_table(size_t *count);
/* Value of the setting: environment if set and non-empty, else default
 * (NULL if neither).  Aborts in debug builds for undeclared names. */
const char *symm_setting_str(const char *name);
int64_t symm_setting_int(const char *name);  /* 0 if unset or unparsable */
bool symm_setting_bool(const char *name);    /* 1/true/yes/on */
/* Parses "64M", "1G", "4096" ... ; returns -1 on error. */
int64_t symm_parse_size(const char *text);

/* symmem never creates NVLink multicast objects (DESIGN.md's GPU safety
 * rule: they can take a shared host's GPUs out of service).  Writes that
 * into why, naming the NVLS-disabling variables that are set, for
 * symmem-info. */
void symm_multicast_status(char *why, size_t why_len);

/* ------------------------------------------------------------- bootstrap */
typedef struct symm_bootstrap symm_bootstrap_t;
typedef struct symm_bootstrap_ops {
  int version; /* 1 */
  const char *name;
  /* Gathers `len` bytes from every rank into recv[rank * len].  Collective. */
  symm_result_t (*allgather)(symm_bootstrap_t *bs, const void *send, size_t len, void *recv);
  /* Copies root's buf to every rank.  Collective. */
  symm_result_t (*broadcast)(symm_bootstrap_t *bs, void *buf, size_t len, int root);
  /* (No barrier: symm_comm_barrier is a tagged all-gather, so that a rank
   * in a barrier and one in a rendezvous see a mismatch, not a match.) */
  void (*fini)(symm_bootstrap_t *bs);
  /* Gathers contributions of any length: values[r] (malloc'd, caller frees
   * each) and lens[r] for every rank.  Collective. */
  symm_result_t (*allgatherv)(symm_bootstrap_t *bs, const void *send, size_t len,
                              void **values, size_t *lens);
  /* members above: version 1 */
} symm_bootstrap_ops_t;

struct symm_bootstrap {
  const symm_bootstrap_ops_t *ops;
  int rank, size;
  int timeout_ms;
  void *state;
};

/* Bootstrap through a shared-memory segment, for ranks of one host; large
 * contributions go through `store` (keys under `prefix`).  pids[size] are
 * the ranks' processes (a vanished one is reported as lost).  Collective
 * over store_bs; SYMM_ERR_UNSUPPORTED when some rank cannot map the
 * segment (then every rank stays with store_bs). */
symm_result_t symm_bootstrap_shm_init(symm_bootstrap_t *store_bs, symm_store_t *store,
                                      const char *prefix, const char *job_id, int index,
                                      const int32_t *pids, symm_bootstrap_t **out);

/* Bootstrap over the job's key-value store; keys under `prefix`. */
symm_result_t symm_bootstrap_store_init(symm_store_t *store, const char *prefix,
                                        int rank, int size, int timeout_ms,
                                        symm_bootstrap_t **out);

/* ------------------------------------------------------------- backends */
struct symm_comm;
struct symm_tensor;
struct symm_coll_args;

/*
 * One rank's piece of symmetric memory as the backend made it.  The core
 * owns the struct; the backend fills it in alloc and reads it afterwards.
 * Layout of the allocation: [... signal pad ... | data ... | rounding]; the
 * pad starts at base + pad_offset, the data at base + data_offset.
 */
typedef struct symm_mem {
  void *base;          /* local mapping of the whole allocation */
  size_t data_offset;  /* >= SYMM_SIGNAL_PAD_BYTES */
  size_t alloc_bytes;  /* total, rounded to the granularity */
  uint64_t id;         /* unique per process and communicator, never reused */
  int device;          /* -1 for CPU memory */
  void *priv;          /* backend state (handles, fds ...) */
  /* Where the signal pad starts, from base: 0 unless the backend places the
   * pad elsewhere in [base, base + data_offset) (set by alloc). */
  size_t pad_offset;
} symm_mem_t;

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
 * The backend ops table (SQLite-VFS style).  Members are only ever appended;
 * the core checks `version` and NULL before calling an optional member.
 * Required members: name, id, probe, init, fini, alloc, free, map_peer,
 * unmap_peer.
 */
typedef struct symm_backend_ops {
  int version; /* 1 */
  const char *name;
  symm_backend_t id;
  /* Usable in this process?  SYMM_SUCCESS or SYMM_ERR_UNSUPPORTED with the
   * reason written to why.  Must be cheap and side-effect free apart from
   * loading libraries. */
  symm_result_t (*probe)(char *why, size_t why_len);
  /* Local resources (device context, fd server ...).  comm->rank/size/
   * device/job_id are set; the bootstrap is usable. */
  symm_result_t (*init)(struct symm_comm *comm);
  /* Optional: after every rank finished init (the ranks agree on init's
   * result in between, symm_comm_agree). */
  symm_result_t (*startup)(struct symm_comm *comm);
  void (*fini)(struct symm_comm *comm);
  /* Allocation granularity in bytes for comm (power of two). */
  size_t (*granularity)(struct symm_comm *comm);
  /* Allocates mem->alloc_bytes (already rounded) and fills base, priv,
   * device.  Pad must be zeroed. */
  symm_result_t (*alloc)(struct symm_comm *comm, symm_mem_t *mem);
  void (*free)(struct symm_comm *comm, symm_mem_t *mem);
  /* Optional: fills info->blob for peers (called before the all-gather). */
  symm_result_t (*export_mem)(struct symm_comm *comm, symm_mem_t *mem, symm_exchange_info_t *info);
  /* Maps peer `peer`'s allocation described by info into this process. */
  symm_result_t (*map_peer)(struct symm_comm *comm, const symm_mem_t *local, int peer,
                            const symm_exchange_info_t *info, symm_peer_map_t *map);
  void (*unmap_peer)(struct symm_comm *comm, symm_peer_map_t *map);
  /* Optional: maps the data of every rank back to back.  maps[r] for r !=
   * rank, local for r == rank.  *stride = bytes between consecutive ranks. */
  symm_result_t (*contiguous_map)(struct symm_comm *comm, const symm_mem_t *local,
                                  const symm_peer_map_t *maps, const symm_exchange_info_t *infos,
                                  void **base, size_t *stride, void **priv);
  void (*contiguous_unmap)(struct symm_comm *comm, void *base, size_t bytes, void *priv);
  /* Optional: backend-specific checks of a pointer inside one of its
   * allocations (native: VMM, device ...).  NULL = nothing more to check. */
  symm_result_t (*validate)(struct symm_comm *comm, const void *ptr, size_t nbytes);
  /* Optional: the backend's own communicator (ncclComm_t ...). */
  symm_result_t (*native_handle)(struct symm_comm *comm, void **handle);
  /* Optional: zeroes the signal pad (SYMM_SIGNAL_PAD_BYTES at base +
   * pad_offset) of a pooled allocation before reuse; NULL = the core memsets
   * it (CPU memory). */
  symm_result_t (*reset_pad)(struct symm_comm *comm, symm_mem_t *mem);
  /* Optional: prints what symmem-info shows about this backend on this
   * machine (devices, peer access, support flags), one item per line. */
  void (*describe)(FILE *out);
  /* members above: version 1 */
  /* Optional: copies `bytes` of host memory into new device memory of the
   * communicator's GPU (the device array of peer pointers).  NULL for
   * backends whose memory the CPU reaches directly. */
  symm_result_t (*device_copy)(struct symm_comm *comm, const void *host, size_t bytes,
                               void **dev);
  void (*device_free)(struct symm_comm *comm, void *dev);
  /* members above: version 2 */
  /* Optional: runs (host) or enqueues (GPU) one collective; the core has
   * validated the arguments and resolved algo.  NULL: no collectives. */
  symm_result_t (*collective)(struct symm_comm *comm, const struct symm_coll_args *args);
  /* Optional: moves an error raised by device-side work since the last call
   * (kernels write it asynchronously) into the communicator with
   * symm_comm_set_async_error, and clears it at the source.  Local, does not
   * synchronise.  NULL: the backend reports every error directly. */
  symm_result_t (*poll_async_error)(struct symm_comm *comm);
  /* members above: version 3 */
  /* Optional: runs (host) or enqueues (GPU) a signal put, wait or barrier
   * (SYMM_SIGNAL_*) on a rendezvoused tensor's pads; the core has checked
   * peer, channel and stream.  NULL: SYMM_ERR_UNSUPPORTED. */
  symm_result_t (*signal)(struct symm_comm *comm, int op, const struct symm_tensor *tensor,
                          int peer, int channel, void *stream);
  /* members above: version 4 */
  /* Optional: the all-reduce algorithm `collective` runs when asked for
   * `asked` (never AUTO) on `bytes` per rank; NULL: `asked` itself.  Must
   * map its own answers to themselves: the core resolves every call with
   * it and hands `collective` the answer. */
  symm_algo_t (*allreduce_algo)(struct symm_comm *comm, symm_algo_t asked, size_t bytes);
  /* members above: version 5 */
  /* Optional: scratch bytes per rank with which every collective on buffers
   * of at most max_bytes runs without growing it (symm_comm_scratch_bytes);
   * SYMM_ERR_INVALID_ARG when that overflows. */
  symm_result_t (*scratch_bytes)(struct symm_comm *comm, size_t max_bytes, size_t *bytes);
  /* members above: version 6 */
  /* Optional: takes part in collective args->seq for a rank whose call
   * failed the core's argument checks (args->kind, count, seq are set; other
   * fields may be invalid, send_bytes and recv_bytes are 0), with a
   * descriptor no valid call has, so that the peers fail with
   * SYMM_ERR_MISMATCH instead of pairing their call with this rank's next
   * one.  Touches no buffer of the call.  NULL: the rank only skips the
   * sequence number. */
  symm_result_t (*abstain)(struct symm_comm *comm, const struct symm_coll_args *args);
  /* members above: version 7 */
} symm_backend_ops_t;

/* Whether the backend's table has optional member `member`, which tables
 * carry from version `since` on (SQLite-VFS style: check both). */
#define SYMM_OPS_HAS(ops, since, member) ((ops)->version >= (since) && (ops)->member != NULL)

/* ops->signal's operations. */
enum { SYMM_SIGNAL_PUT = 1, SYMM_SIGNAL_WAIT = 2, SYMM_SIGNAL_BARRIER = 3 };

/* One collective call, as the core hands it to the backend. */
typedef enum {
  SYMM_COLL_ALL_REDUCE = 1,
  SYMM_COLL_ALL_GATHER = 2,
  SYMM_COLL_REDUCE_SCATTER = 3,
  SYMM_COLL_BROADCAST = 4,
  SYMM_COLL_ALL_TO_ALL = 5
} symm_coll_kind_t;

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
                           through ops->allreduce_algo */
  symm_stream_t stream;
  uint64_t seq;         /* 1, 2, ... per communicator: epochs and mismatch checks */
} symm_coll_args_t;

/* Scratch tensor of comm with at least `bytes` per rank, allocating and
 * rendezvousing it if needed (collective then).  tensor.c-owned. */
symm_result_t symm_comm_scratch(symm_comm_t *comm, size_t bytes, symm_tensor_t **scratch);
/* The signature a call refused by its argument checks takes part with
 * (ops->abstain): no call's signature is 0. */
#define SYMM_COLL_SIG_REFUSED 0u
/* Stable 64-bit description of a collective for cross-rank comparison:
 * kind, count, dtype, op, root and, for all-reduce, the algorithm that
 * runs; never SYMM_COLL_SIG_REFUSED. */
uint64_t symm_coll_signature(const symm_coll_args_t *args);
/* Dtypes the collectives can reduce: f32, bf16, f16, i32. */
bool symm_dtype_reducible(symm_dtype_t dt);
/* Whether collective `kind` (SYMM_COLL_*) reduces: all-reduce, reduce-scatter. */
static inline bool symm_coll_reduces(int kind) {
  return kind == SYMM_COLL_ALL_REDUCE || kind == SYMM_COLL_REDUCE_SCATTER;
}
/* The communicator's error raised asynchronously (GPU backends set it). */
void symm_comm_set_async_error(symm_comm_t *comm, symm_result_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The backends (each defined in src/backends/<name>/). */
extern const symm_backend_ops_t symm_host_ops;
extern const symm_backend_ops_t symm_native_ops;
extern const symm_backend_ops_t symm_cuda_ops;
extern const symm_backend_ops_t symm_nccl_ops;
extern const symm_backend_ops_t symm_nvshmem_ops;

/* Static table of every backend compiled in, in `auto` preference order. */
const symm_backend_ops_t *symm_backend_find(symm_backend_t id);
const symm_backend_ops_t *const *symm_backend_list(size_t *count);

/* Bytes of the signal pad in front of the data of every allocation. */
#define SYMM_SIGNAL_PAD_BYTES 4096

/* ----------------------------------------------------------- communicator */
struct symm_pool_entry;

struct symm_comm {
  int rank, size, local_rank, local_size, device;
  bool device_explicit;      /* device came from the config or SYMM_DEVICE, not the local rank */
  int timeout_ms;
  int index;                 /* n-th communicator made by this process */
  char job_id[64];           /* same on every rank */
  char prefix[96];           /* store key prefix of this communicator */
  symm_backend_t backend;
  const symm_backend_ops_t *ops;
  void *backend_state;
  symm_store_t *store;
  struct symm_store_server *server; /* non-NULL if this rank serves the store */
  bool server_shared;               /* server is the process's shared one (comm.c) */
  symm_bootstrap_t *bootstrap;  /* what the core uses: shm if possible */
  symm_bootstrap_t *store_bootstrap; /* kept when bootstrap is shm */
  int32_t *pids;             /* [size], from init; 0 where this process cannot watch
                                that rank's pid (another host or PID namespace) */
  bool single_host;
  uint64_t next_mem_id;
  uint64_t rendezvous_seq;
  pthread_mutex_t lock;      /* tensors list, pool */
  struct symm_tensor *tensors; /* live tensors (doubly linked) */
  struct symm_pool_entry *pool;
  size_t pool_bytes, pool_limit;
  /* Collectives */
  symm_tensor_t *scratch;    /* staging for buffers that are not symmetric */
  size_t scratch_fixed;      /* bytes the backend keeps in the scratch besides staging
                                (native: the LL areas); SYMM_SCRATCH_BYTES comes on top */
  symm_algo_t allreduce_algo;
  uint64_t coll_seq;
  int async_error;           /* symm_result_t, set by symm_comm_set_async_error */
  char async_msg[256];
};

/* Collectives of the core, tagged so that ranks in different collectives
 * get SYMM_ERR_MISMATCH instead of exchanging garbage. */
enum { SYMM_TAG_BARRIER = 1, SYMM_TAG_RENDEZVOUS = 2, SYMM_TAG_STATUS = 3 };
/* All-gathers `len` bytes per rank into recv[rank * len] (recv may be NULL
 * when len is 0), checking that every rank called the same op. */
symm_result_t symm_comm_allgather_op(symm_comm_t *comm, uint32_t op, const void *send,
                                     size_t len, void *recv);
/* Every rank contributes its result of a local step; returns `mine` if it
 * failed, else the first failure of another rank ("<what> failed on rank r"),
 * so all ranks leave a collective with an error together. */
symm_result_t symm_comm_agree(symm_comm_t *comm, symm_result_t mine, const char *what);

/* Sockets a forked child must drop (fork_guard.c): add after creating one,
 * close through symm_fork_guard_close (unregisters, then closes). */
void symm_fork_guard_add(int fd);
void symm_fork_guard_close(int fd);
/* Frees every live tensor and pooled allocation (tensor.c). */
void symm_comm_release_tensors(symm_comm_t *comm);

/* ----------------------------------------------------------------- tensor */
struct symm_tensor {
  symm_comm_t *comm;
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
  void **peer_data;           /* [size] data pointers */
  void *contig_base;
  size_t contig_stride, contig_bytes;
  void *contig_priv;
  void *peer_data_dev;        /* device copy of peer_data (ops->device_copy) */
  struct symm_tensor *prev, *next;
};

/* ---------------------------------------------------------------- registry */
/* Process-wide map from address ranges to tensors; thread-safe. */
symm_result_t symm_registry_add(const void *base, size_t len, symm_tensor_t *tensor, int rank);
void symm_registry_remove(const void *base);
/* Returns the entry containing ptr: its range start/len, tensor, rank. */
bool symm_registry_find(const void *ptr, const void **base, size_t *len,
                        symm_tensor_t **tensor, int *rank);
size_t symm_registry_count(void);

/* ---------------------------------------------------------------- helpers */
uint64_t symm_hash64(const void *data, size_t len, uint64_t seed);
uint64_t symm_now_ns(void);              /* CLOCK_MONOTONIC */
/* Milliseconds from now until deadline_ns (symm_now_ns clock), rounded up;
 * 0 once it has passed. */
int symm_ms_until(uint64_t deadline_ns);
/* Waits until fd is ready for `events` (errors and hang-ups count as ready:
 * the next read or write reports them) or deadline_ns passes; EINTR is
 * retried.  1: ready, 0: the deadline passed, -1: poll failed (errno). */
int symm_poll_until(int fd, short events, uint64_t deadline_ns);
void symm_random_bytes(void *buf, size_t len);
/* out[0, 2n] = the n bytes in lower-case hex, then NUL. */
void symm_hex(char *out, const void *bytes, size_t n);
/* out[0, 2 nbytes] = nbytes random bytes (at most 64) in hex, then NUL. */
void symm_random_hex(char *out, size_t nbytes);
/* One deadline for an operation made of several waits, one per peer (a
 * rendezvous fetching every peer's memory), so that it ends after the
 * timeout, not after (world - 1) timeouts.  begin sets it for the calling
 * thread (an earlier one already set stays) and returns what end puts back;
 * symm_deadline_after is what a wait of timeout_ms starting now keeps to:
 * now + timeout_ms, or the operation's deadline if that comes first. */
uint64_t symm_op_deadline_begin(int timeout_ms);
void symm_op_deadline_end(uint64_t previous);
uint64_t symm_deadline_after(int timeout_ms);
/* Process pid (on this host, in this PID namespace) is gone, or a zombie
 * nobody reaped yet. */
bool symm_process_gone(int32_t pid);
/* This process's PID namespace: inode and device of /proc/self/ns/pid.
 * false (both 0) when that cannot be read. */
bool symm_pid_namespace(uint64_t *ino, uint64_t *dev);

/* Waiting with backoff for another process's store to shared memory
 * (backoff.c): start, then pause until the store is seen.  pause returns
 * false once timeout_ms has passed since its first clock reading (at most
 * 64 spins after start), or, with lost set, once the process named by
 * watch is gone (looked at every 20 ms).  ranks_here: processes of the job
 * on this host (more than CPUs: no spinning).  reset restarts the backoff,
 * not the deadline, after progress. */
typedef struct {
  uint64_t deadline, since, sleep_ns, spin_ns, timeout_ns, next_check;
  unsigned iter;
  bool spinning;
  int32_t pid;  /* the process waited for (symm_backoff_watch), 0: none */
  bool lost;    /* pause returned false because that process is gone */
} symm_backoff_t;
void symm_backoff_start(symm_backoff_t *b, int timeout_ms, int ranks_here);
/* Like start, but the wait ends at deadline_ns (symm_now_ns clock), shared
 * by the waits of one operation instead of timeout_ms from the first pause
 * of each. */
void symm_backoff_start_until(symm_backoff_t *b, uint64_t deadline_ns, int ranks_here);
void symm_backoff_reset(symm_backoff_t *b);
void symm_backoff_watch(symm_backoff_t *b, int32_t pid);
bool symm_backoff_pause(symm_backoff_t *b);
/* Round up to a multiple of align (power of two). */
static inline size_t symm_round_up(size_t v, size_t align) {
  return (v + align - 1) & ~(align - 1);
}

#endif /* SYMM_INTERNAL_H */
