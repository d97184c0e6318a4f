/*
 * libnccl loaded at run time: dlopen of the library and the table of the
 * functions symmem calls.  Shared by symmem-bench (which times NCCL next to
 * symmem) and the nccl backend; it uses nothing else of the library, so a
 * tool can compile it in.  Not installed.
 *
 * The declarations are NCCL's ABI as its header defines it: every call
 * returns an int result (0 = success), the unique id is 128 opaque bytes
 * passed by value, data types and reduction operators are int enums,
 * communicators and streams are pointers.
 */
#ifndef SYMM_NCCL_LIB_H
#define SYMM_NCCL_LIB_H

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

enum { /* ncclDataType_t values */
  SYMM_NCCL_INT8 = 0, SYMM_NCCL_UINT8 = 1, SYMM_NCCL_INT32 = 2, SYMM_NCCL_UINT32 = 3,
  SYMM_NCCL_INT64 = 4, SYMM_NCCL_UINT64 = 5, SYMM_NCCL_FLOAT16 = 6, SYMM_NCCL_FLOAT32 = 7,
  SYMM_NCCL_FLOAT64 = 8, SYMM_NCCL_BFLOAT16 = 9
};
enum { SYMM_NCCL_SUM = 0, SYMM_NCCL_MAX = 2, SYMM_NCCL_MIN = 3 }; /* ncclRedOp_t values */

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
} symm_nccl_lib_t;

/* Loads `path` (SYMM_NCCL_LIB's value; NULL or "": SYMM_NCCL_LIB_DEFAULT)
 * and resolves every function of the table.  false, with the reason in
 * why[cap], when the library cannot be loaded or lacks one of them.  The
 * library stays loaded: NCCL's threads may outlive its communicators. */
bool symm_nccl_lib_load(symm_nccl_lib_t *lib, const char *path, char *why, size_t cap);

#pragma GCC visibility pop

#endif /* SYMM_NCCL_LIB_H */
