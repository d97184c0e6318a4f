/*
 * State shared by the files of the nccl backend: device memory from
 * ncclMemAlloc, registered collectively as an NCCL symmetric window, peer
 * pointers from ncclGetPeerDevicePointer (NCCL 2.29.2 and later), NCCL's
 * own collectives on the window where some peer is not load/store
 * reachable.  The device, its context and the engine's collectives and
 * signals are the GPU engine's (symm_gpu.h).  Not seen by the core.
 */
#ifndef SYMM_NCCL_H
#define SYMM_NCCL_H

#include <limits.h>

#include "backends/nccl/nccl_lib.h"
#include "symm_backend.h"
#include "symm_gpu.h"

/* The oldest NCCL with symmetric windows, and the first whose host API
 * gives peers' pointers into a window. */
#define NCCL_MIN_VERSION SYMM_NCCL_VERSION(2, 27, 0)
#define NCCL_PEER_PTR_VERSION SYMM_NCCL_VERSION(2, 29, 2)

/* What every rank publishes at init; rank 0's carries the unique id,
 * unless the communicator came from the parent's ncclCommSplit. */
typedef struct nccl_rank_info {
  uint32_t magic;
  int32_t version;  /* ncclGetVersion of this rank's library */
  int32_t has_id;
  int32_t split;    /* 1: this rank's communicator came from ncclCommSplit */
  symm_nccl_unique_id_t id;
} nccl_rank_info_t;
#define NCCL_INFO_MAGIC 0x4e43434cu /* "NCCL" */

/* symm_backend_state of an nccl communicator. */
typedef struct nccl_state {
  const symm_nccl_lib_t *lib;
  symm_gpu_t *gpu;
  int rank, size;
  symm_nccl_comm_t comm;  /* NULL until startup made it */
  bool nonblocking;       /* made with blocking = 0: calls may return in progress */
  bool failed;            /* aborted after an error: no further NCCL calls */
  bool *reachable;        /* [size]: peers whose window pointer this rank has */
  uint64_t windows;       /* windows registered so far (the blob's sequence) */
  long live_windows;      /* registered and not yet deregistered */
  bool from_split;        /* comm came from the parent's ncclCommSplit */
  uint64_t splits;        /* ncclCommSplit calls on comm so far */
  /* Where ncclCommSplit writes the new communicator: NCCL writes it when
   * a non-blocking split finishes, which may be after an abort ended the
   * wait, so it lives as long as the state. */
  symm_nccl_comm_t split_out;
  char comm_name[128];    /* ncclConfig_t.commName: NCCL keeps the pointer */
} nccl_state_t;

/* The handle of one group that ncclCommSplit made (the seam's split),
 * which the group's init takes (symm_comm_take_split_handle). */
typedef struct nccl_split_child {
  symm_nccl_comm_t comm;
  bool nonblocking;       /* made with blocking = 0, as its parent */
} nccl_split_child_t;

/* One allocation (symm_mem_t.priv). */
typedef struct nccl_alloc {
  void *ptr;               /* ncclMemAlloc's, or the user's (register_user) */
  symm_nccl_window_t win;  /* NULL until registered */
  uint64_t window_seq;     /* 1, 2, ...: the collective registration it was */
} nccl_alloc_t;

/* The loaded library (nccl_find.c): SYMM_NCCL_LIB when it names one, else
 * the newest usable of the loader's libnccl.so.2 and the nvidia-nccl
 * wheels' of the Python environments; NULL with the reason. */
const symm_nccl_lib_t *nccl_library(char *why, size_t why_len);
/* The nvidia-nccl wheels' libraries (VIRTUAL_ENV, CONDA_PREFIX, the prefix
 * of python3 on PATH, ~/.local; each file once), at most max, into out;
 * their count, with the places that had none in where. */
size_t nccl_find_wheels(char (*out)[PATH_MAX], size_t max, char *where, size_t where_len);
/* The first of them into out; false with the places looked at in where. */
bool nccl_find_wheel(char *out, size_t cap, char *where, size_t where_len);
/* Where nccl_library found it ("" before). */
const char *nccl_library_path(void);
/* Why that one, when several were found ("" otherwise). */
const char *nccl_library_choice(void);
/* "2.29.2" of a version code. */
void nccl_version_text(int code, char *out, size_t cap);
/* What this library lacks for the backend (probe's reason), "" if nothing. */
void nccl_missing(const symm_nccl_lib_t *lib, const char *path, char *why, size_t why_len);

/* Waiting on NCCL (nccl_wait.c).  Every call that may block on peers goes
 * through nccl_call: res is the call's result; a communicator made
 * non-blocking may answer in progress, and the wait then polls
 * ncclCommGetAsyncError within the communicator's timeout, watching the
 * peers' processes and the failures other ranks publish.  On an error,
 * the timeout or a lost peer the communicator is aborted and the error
 * says which call, and why. */
symm_result_t nccl_call(symm_comm_t *comm, nccl_state_t *st, int res, const char *what);
/* Publishes this rank's failure (code, and the thread's last error) for
 * the peers' waits, which return the same code. */
void nccl_publish_failure(symm_comm_t *comm, symm_result_t code);
/* Aborts the communicator (ncclCommAbort, else ncclCommDestroy). */
void nccl_abort(nccl_state_t *st);
/* "ncclInvalidUsage (...)": NCCL's name for a result. */
const char *nccl_result_text(const nccl_state_t *st, int res);

/* Ops implemented in the files of this folder (nccl_ops.c tables them). */
SYMM_BACKEND_DECLARE_REQUIRED(nccl);
symm_result_t nccl_startup(symm_comm_t *comm, const symm_blob_t *all);
void nccl_describe(FILE *out);
symm_result_t nccl_register(symm_comm_t *comm, symm_mem_t *mem);
void nccl_deregister(symm_comm_t *comm, symm_mem_t *mem);
/* The user's memory as a window (nccl_register.c): the seam's check_user,
 * register_user and deregister_user. */
symm_result_t nccl_check_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes);
symm_result_t nccl_register_user(symm_comm_t *comm, const symm_user_mem_t *u, size_t nbytes,
                                 symm_mem_t *mem);
void nccl_deregister_user(symm_comm_t *comm, symm_mem_t *mem);
symm_result_t nccl_export_mem(symm_comm_t *comm, symm_mem_t *mem, symm_exchange_info_t *info);
bool nccl_peer_reachable(symm_comm_t *comm, int peer);
void nccl_unreachable_why(symm_comm_t *comm, int peer, char *out, size_t len);
symm_result_t nccl_backend_handle(symm_comm_t *comm, void **handle);
symm_result_t nccl_collective(symm_comm_t *comm, const symm_coll_args_t *args);
/* Groups from ncclCommSplit (nccl_split.c): the seam's split members. */
bool nccl_split_ready(symm_comm_t *comm, char *why, size_t len);
symm_result_t nccl_split(symm_comm_t *comm, int color, int key, void **child);
void nccl_split_release(symm_comm_t *comm, void *child, bool failed);
/* A communicator from ncclCommSplit, once NCCL finished making it:
 * its rank and size as symmem counted them (init's start-up). */
symm_result_t nccl_split_check(symm_comm_t *comm, nccl_state_t *st);
/* Registers [ptr, ptr + bytes) as a symmetric window (collective). */
symm_result_t nccl_window_register(symm_comm_t *comm, nccl_state_t *st, void *ptr, size_t bytes,
                                   symm_nccl_window_t *win);
/* Local; waits on a non-blocking communicator, warns on failure. */
void nccl_window_deregister(symm_comm_t *comm, nccl_state_t *st, symm_nccl_window_t win);

#endif /* SYMM_NCCL_H */
