/*
 * libnccl loaded at run time: dlopen of the library and the table of the
 * functions symmem calls.  Shared by symmem-bench (which times NCCL next to
 * symmem) and the nccl backend; it uses nothing else of the library, so a
 * tool can compile it in.  Not installed.
 *
 * The declarations are NCCL's ABI as its header defines it: every call
 * returns an int result (0 = success), the unique id is 128 opaque bytes
 * passed by value, data types and reduction operators are int enums,
 * communicators, windows and streams are pointers.
 */
#ifndef SYMM_NCCL_LIB_H
#define SYMM_NCCL_LIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

/* What SYMM_NCCL_LIB names when it is unset. */
#define SYMM_NCCL_LIB_DEFAULT "libnccl.so.2"

#define SYMM_NCCL_UNIQUE_ID_BYTES 128
typedef struct symm_nccl_unique_id {
  char bytes[SYMM_NCCL_UNIQUE_ID_BYTES];
} symm_nccl_unique_id_t;
typedef void *symm_nccl_comm_t;
typedef void *symm_nccl_window_t;

enum { /* ncclResult_t values */
  SYMM_NCCL_SUCCESS = 0, SYMM_NCCL_UNHANDLED_CUDA_ERROR = 1, SYMM_NCCL_SYSTEM_ERROR = 2,
  SYMM_NCCL_INTERNAL_ERROR = 3, SYMM_NCCL_INVALID_ARGUMENT = 4, SYMM_NCCL_INVALID_USAGE = 5,
  SYMM_NCCL_REMOTE_ERROR = 6, SYMM_NCCL_IN_PROGRESS = 7, SYMM_NCCL_TIMEOUT = 8
};
/* ncclCommSplit's color for a rank that joins no new communicator. */
#define SYMM_NCCL_SPLIT_NOCOLOR (-1)
enum { /* ncclDataType_t values */
  SYMM_NCCL_INT8 = 0, SYMM_NCCL_UINT8 = 1, SYMM_NCCL_INT32 = 2, SYMM_NCCL_UINT32 = 3,
  SYMM_NCCL_INT64 = 4, SYMM_NCCL_UINT64 = 5, SYMM_NCCL_FLOAT16 = 6, SYMM_NCCL_FLOAT32 = 7,
  SYMM_NCCL_FLOAT64 = 8, SYMM_NCCL_BFLOAT16 = 9, SYMM_NCCL_FLOAT8E4M3 = 10,
  SYMM_NCCL_FLOAT8E5M2 = 11 /* NCCL 2.24 and newer */
};
enum { /* ncclRedOp_t values */
  SYMM_NCCL_SUM = 0, SYMM_NCCL_PROD = 1, SYMM_NCCL_MAX = 2, SYMM_NCCL_MIN = 3, SYMM_NCCL_AVG = 4
};

/* ncclCommWindowRegister's flag for a window every rank registers
 * collectively (symmetric kernels, peer pointers), and the alignment NCCL
 * asks of a window's start and size. */
#define SYMM_NCCL_WIN_COLL_SYMMETRIC 0x01
#define SYMM_NCCL_WIN_ALIGNMENT 4096

/* NCCL's version code: major * 10000 + minor * 100 + patch from 2.9 on,
 * major * 1000 + minor * 100 + patch before. */
#define SYMM_NCCL_VERSION(x, y, z) \
  (((x) <= 2 && (y) <= 8) ? (x) * 1000 + (y) * 100 + (z) : (x) * 10000 + (y) * 100 + (z))
/* Splits a version code into its parts (both encodings). */
void symm_nccl_version_parts(int code, int *major, int *minor, int *patch);

/*
 * The leading members of ncclConfig_t as NCCL 2.27 lays them out.  NCCL
 * reads `size` bytes of it (at most its own struct) and takes its defaults
 * for members a config of `version` cannot have, so a prefix of a newer
 * layout is valid for every NCCL from 2.27 on.  symm_nccl_config_init sets
 * what NCCL_CONFIG_INITIALIZER does: size, magic, version, every member
 * undefined (INT_MIN / NULL).
 */
#define SYMM_NCCL_CONFIG_MAGIC 0xcafebeefu
#define SYMM_NCCL_CONFIG_UNDEF INT_MIN
typedef struct symm_nccl_config {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char *net_name;
  int split_share;
  int traffic_class;
  const char *comm_name;
  int collnet_enable;
  int cta_policy;
  int shrink_share;
  int nvls_ctas;
} symm_nccl_config_t;
void symm_nccl_config_init(symm_nccl_config_t *cfg);

typedef struct symm_nccl_lib {
  void *handle;
  int version; /* ncclGetVersion's, 0 if it failed */
  int (*get_version)(int *);
  int (*get_unique_id)(symm_nccl_unique_id_t *);
  int (*comm_init_rank)(symm_nccl_comm_t *, int, symm_nccl_unique_id_t, int);
  int (*comm_destroy)(symm_nccl_comm_t);
  const char *(*get_error_string)(int);
  int (*all_reduce)(const void *, void *, size_t, int, int, symm_nccl_comm_t, void *);
  int (*all_gather)(const void *, void *, size_t, int, symm_nccl_comm_t, void *);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, symm_nccl_comm_t, void *);
  int (*broadcast)(const void *, void *, size_t, int, int, symm_nccl_comm_t, void *);
  int (*send)(const void *, size_t, int, int, symm_nccl_comm_t, void *);
  int (*recv)(void *, size_t, int, int, symm_nccl_comm_t, void *);
  int (*group_start)(void);
  int (*group_end)(void);
  /* Members below are optional: NULL when the library lacks them (an older
   * NCCL); symm_nccl_lib_load succeeds without them. */
  int (*comm_init_rank_config)(symm_nccl_comm_t *, int, symm_nccl_unique_id_t, int,
                               symm_nccl_config_t *);                       /* 2.14 */
  int (*comm_abort)(symm_nccl_comm_t);
  int (*comm_get_async_error)(symm_nccl_comm_t, int *);
  int (*mem_alloc)(void **, size_t);                                         /* 2.19 */
  int (*mem_free)(void *);                                                   /* 2.19 */
  int (*comm_window_register)(symm_nccl_comm_t, void *, size_t, symm_nccl_window_t *,
                              int);                                          /* 2.27 */
  int (*comm_window_deregister)(symm_nccl_comm_t, symm_nccl_window_t);       /* 2.27 */
  int (*all_to_all)(const void *, void *, size_t, int, symm_nccl_comm_t, void *); /* 2.28 */
  int (*get_peer_device_pointer)(symm_nccl_window_t, size_t, int, void **); /* 2.29.2 */
  const char *(*get_last_error)(symm_nccl_comm_t);
  int (*comm_split)(symm_nccl_comm_t, int, int, symm_nccl_comm_t *,
                    symm_nccl_config_t *);                                   /* 2.18 */
  int (*comm_count)(symm_nccl_comm_t, int *);
  int (*comm_user_rank)(symm_nccl_comm_t, int *);
} symm_nccl_lib_t;

/* Loads `path` (SYMM_NCCL_LIB's value; NULL or "": SYMM_NCCL_LIB_DEFAULT)
 * and resolves the functions of the table.  false, with the reason in
 * why[cap], when the library cannot be loaded or lacks one of the required
 * members.  The library stays loaded: NCCL's threads may outlive its
 * communicators. */
bool symm_nccl_lib_load(symm_nccl_lib_t *lib, const char *path, char *why, size_t cap);

/* The name an optional member of lib is resolved from ("ncclMemAlloc"),
 * by its offset in symm_nccl_lib_t; NULL for an offset that is none. */
const char *symm_nccl_lib_symbol(size_t member_offset);

#pragma GCC visibility pop

#endif /* SYMM_NCCL_LIB_H */
