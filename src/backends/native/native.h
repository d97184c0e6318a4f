/*
 * State shared by the files of the native backend (CUDA VMM).  Not seen by
 * the core: the core knows this backend only through symm_native_ops and the
 * functions of native_ext.h.  The device, its context and every collective
 * and signal are the GPU engine's (symm_gpu.h); this backend makes memory
 * and shares it.
 */
#ifndef SYMM_NATIVE_H
#define SYMM_NATIVE_H

#include <pthread.h>
#include <string.h>

#include "backends/native/native_ext.h"
#include "backends/util/fd_exchange.h"
#include "symm_backend.h"
#include "symm_gpu.h"

/* How allocations travel to peers; one kind per communicator, agreed at
 * startup, so that the exchange blob needs no tag. */
typedef enum {
  NATIVE_HANDLE_FD = 1,     /* POSIX fd over the fd exchange (one host) */
  NATIVE_HANDLE_FABRIC = 2  /* fabric handle in the exchange blob (IMEX) */
} native_handle_kind_t;

/* What every rank publishes at init (symm_blob_t), read by every rank's
 * startup.  The device itself is the GPU engine's (symm_gpu.h). */
typedef struct native_rank_info {
  uint32_t kinds;        /* bit NATIVE_HANDLE_*: handle kinds usable there */
  uint32_t reserved;
  uint64_t granularity;  /* recommended granularity of that device */
} native_rank_info_t;

/* symm_backend_state of a native communicator. */
typedef struct native_state {
  symm_gpu_t *gpu;          /* the communicator's GPU engine */
  const symm_cu_driver_t *drv; /* symm_gpu_driver(gpu) */
  int ordinal;              /* symm_gpu_ordinal(gpu) */
  size_t gran_min;          /* this device's minimum granularity */
  size_t gran;              /* communicator-wide allocation granularity */
  native_handle_kind_t kind;
  int handle_types;         /* requestedHandleTypes for cuMemCreate */
  symm_fdx_t *fdx;
  int size, rank;
  /* The pad heap (native_heap.c); heap_lock guards every heap_* and
   * peer_heap* member. */
  pthread_mutex_t heap_lock;
  bool heap_lock_ready;
  size_t heap_chunk_bytes;  /* one heap chunk = one pad window of a tensor */
  size_t pad_bytes;         /* every tensor's signal pad (the communicator's) */
  struct native_heap_chunk *heap;      /* our chunks, oldest first */
  uint64_t heap_seq;        /* heap ids handed out (ids start at 1) */
  long heap_chunks;         /* chunks in `heap` */
  struct native_peer_heap *peer_heaps; /* imported chunks of the peers */
  long peer_heap_count;     /* entries in `peer_heaps` */
} native_state_t;

/*
 * The pad heap.  A tensor's signal pad (pad_bytes) does not get a physical
 * chunk of its own: it is a slot of a "heap chunk" of heap_chunk_bytes
 * (the pad rounded up to a granule: 512 slots of 4 KiB at 2 MiB), which is
 * created and exported (fd published, or fabric handle kept) once per
 * communicator, and imported once per peer and heap chunk.  Each tensor
 * maps the whole heap chunk that owns its slot as the window in front of
 * its data (one handle may be mapped at many VAs), so a fresh tensor costs
 * one cuMemCreate + one export, and one import per peer, for its data
 * only.  Heap chunks stay until the communicator is destroyed.
 */
typedef struct native_heap_chunk {
  uint64_t heap_id;         /* per communicator, from 1 */
  ncu_mem_handle h;
  bool have_h, published;   /* published: fd in the fd exchange */
  ncu_fabric_handle fabric; /* fabric kind only */
  int nslots, used, cursor; /* cursor: where the next-fit search starts */
  unsigned char *taken;     /* [nslots] */
  struct native_heap_chunk *next;
} native_heap_chunk_t;

/* A peer's heap chunk imported into this process (kept until fini). */
typedef struct native_peer_heap {
  int peer;
  uint64_t heap_id;
  ncu_fabric_handle fabric; /* fabric kind: what identifies the chunk */
  ncu_mem_handle h;
  struct native_peer_heap *next;
} native_peer_heap_t;

/* Fd-exchange keys: a tensor's data chunk under its id (a counter), a heap
 * chunk under its heap id with the top bit set. */
#define NATIVE_HEAP_KEY_BIT (1ull << 63)

/*
 * One allocation as mapped into this process: the local one (symm_mem_t.priv)
 * or a peer's (symm_peer_map_t.priv).  It consists of one or two mappings
 * back to back in one reserved range.  When the data starts at the end of
 * a pad window ("split" layout, what the core always asks for) chunk 0 is
 * the window, a mapping of the heap chunk that holds the pad slot (its
 * handle is borrowed from the heap: have_h[0] stays false), and chunk 1 is
 * the data in its own physical chunk, so that the contiguous view can map
 * just the data of every rank (cuMemMap maps whole chunks only: its offset
 * must be 0).  Otherwise one chunk holds pad and data.
 */
#define NATIVE_MAX_CHUNKS 2
typedef struct native_alloc {
  ncu_deviceptr va;        /* start of the reservation (0: none) */
  size_t size;             /* bytes reserved = alloc_bytes */
  int nchunks;
  int data_chunk;          /* index of the chunk holding the data */
  size_t off[NATIVE_MAX_CHUNKS], len[NATIVE_MAX_CHUNKS];
  ncu_mem_handle h[NATIVE_MAX_CHUNKS];
  bool have_h[NATIVE_MAX_CHUNKS], mapped[NATIVE_MAX_CHUNKS];
  bool published;          /* the data chunk's fd is in the fd exchange */
  uint64_t id;             /* symm_mem_t.id of the owner */
  ncu_fabric_handle fabric;/* the data chunk's, fabric kind only */
  native_heap_chunk_t *heap; /* local split allocations: the slot's chunk */
  int slot;                /* slot in `heap`, -1 none */
} native_alloc_t;

static inline bool native_is_split(const native_alloc_t *a) { return a->nchunks == 2; }

/* Fills the chunk layout of a->nchunks/off/len/data_chunk for an allocation
 * of alloc_bytes whose data starts at data_offset. */
void native_layout(const native_state_t *st, size_t alloc_bytes, size_t data_offset,
                   native_alloc_t *a);
/* Undoes whatever part of a mapping exists: unmaps the chunks, frees the
 * reservation, releases the handles.  Safe on a partly built native_alloc. */
void native_alloc_release(native_state_t *st, native_alloc_t *a);
/* Grants this device read-write access to [va, va + total), which consists
 * of n mappings of lens[i] bytes (or `uniform` bytes each if lens is NULL). */
symm_result_t native_grant_access(native_state_t *st, ncu_deviceptr va, size_t total,
                                  const size_t *lens, int n, size_t uniform);
/* Reserves a->size bytes, maps every chunk whose handle is set, and grants
 * this device read-write access. */
symm_result_t native_map_chunks(native_state_t *st, native_alloc_t *a, const char *what);

/* The pad heap (native_heap.c).  All take heap_lock themselves. */
void native_heap_init(native_state_t *st);
/* Releases every heap chunk and imported peer chunk (fini; the driver keeps
 * the memory of a chunk that is still mapped until its last unmap). */
void native_heap_fini(native_state_t *st);
/* Takes a free slot, creating and exporting a heap chunk when none is left
 * (context current).  *created tells whether a chunk was made. */
symm_result_t native_heap_take(native_state_t *st, native_heap_chunk_t **chunk, int *slot,
                               bool *created);
void native_heap_give(native_state_t *st, native_heap_chunk_t *chunk, int slot);
/* Handle of rank `peer`'s heap chunk (heap_id in fd kind, its fabric handle
 * in fabric kind), imported on first use and cached until fini: the caller
 * must not release it.  *imported tells whether this call imported it. */
symm_result_t native_heap_peer(native_state_t *st, int peer, uint64_t heap_id,
                               const ncu_fabric_handle *fabric, ncu_mem_handle *h,
                               bool *imported);

/* Allocation property of this device for the communicator's handle types. */
static inline ncu_alloc_prop native_alloc_prop(int ordinal, int handle_types) {
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = handle_types;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = ordinal;
  return prop;
}

/* Ops implemented in the files of this folder (native_ops.c tables them). */
SYMM_BACKEND_DECLARE_REQUIRED(native);
symm_result_t native_startup(symm_comm_t *comm, const symm_blob_t *all);
void native_describe(FILE *out);
symm_result_t native_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
symm_result_t native_contiguous_map(symm_comm_t *comm, const symm_mem_t *local,
                                    const symm_peer_map_t *maps,
                                    const symm_exchange_info_t *infos, void **base,
                                    size_t *stride, void **priv);
void native_contiguous_unmap(symm_comm_t *comm, void *base, size_t bytes, void *priv);
symm_result_t native_validate(symm_comm_t *comm, const void *ptr, size_t nbytes);
/* native_validate's checks with the context current, and the mapping that
 * holds p (its start and size). */
symm_result_t native_validate_range(const native_state_t *st, const void *ptr, size_t nbytes);
symm_result_t native_mapping_of(const native_state_t *st, ncu_deviceptr p, ncu_deviceptr *start,
                                size_t *size);
/* native_alloc.c: the data chunk's handle exported (fd published under
 * a->id, or a->fabric), and unpublished. */
symm_result_t native_export_data(native_state_t *st, native_alloc_t *a);
void native_unpublish(native_state_t *st, native_alloc_t *a);
/* native_register.c: the user's VMM memory (symm_tensor_register): one
 * chunk, the user's mapping's handle retained (never mapped nor freed by
 * us); the blob carries its mapped bytes at NATIVE_BLOB_USER_BYTES_AT. */
#define NATIVE_BLOB_USER_BYTES_AT 64
symm_result_t native_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                   symm_mem_t *mem);
void native_deregister_user(symm_comm_t *comm, symm_mem_t *mem);

#endif /* SYMM_NATIVE_H */
