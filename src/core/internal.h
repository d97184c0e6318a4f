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


#endif /* SYMM_INTERNAL_H */
