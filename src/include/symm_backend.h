/*
 * The backend-author header: what a backend (src/backends/<name>/) may see
 * of the library.  Not installed.
 */
#ifndef SYMM_BACKEND_H
#define SYMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "symm_bootstrap.h"
#include "symm_error.h"
#include "symm_settings.h"
#include "symm_util.h"

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

#endif /* SYMM_BACKEND_H */
