/*
 * libnvshmem_host loaded at run time: the layouts of the host API's
 * initialisation structs, and the table of the functions the nvshmem
 * backend calls.  Not installed.
 *
 * The layouts are NVSHMEM's host ABI (NVSHMEM 3.x) in our own words: each
 * struct starts with an int version, (major << 16) + its size in bytes; a
 * unique id is 128 bytes (version + 124 opaque); the unique-id arguments
 * are 24 (version, pointer to the id, rank, number of ranks); the init
 * arguments 128 (version, unique-id arguments, from version 2 a CUDA
 * device ordinal, padding); the init attributes 144 (version, an MPI
 * communicator pointer, the init arguments).  Teams are int32 handles, the
 * world team is 0; streams are cudaStream_t, the driver's CUstream.
 *
 * nvshmem_init and nvshmemx_init_attr are not in this table: they are
 * inline functions of NVSHMEM's headers that call into the static device
 * library (libnvshmem_device.a), which a program must link and which
 * dlopen cannot reach.  nvshmemx_hostlib_init_attr is the host library's
 * own entry point, and with NVSHMEMX_INIT_WITH_UNIQUEID it needs neither
 * MPI nor PMI: the unique id travels through our bootstrap.
 */
#ifndef SYMM_NVSHMEM_LIB_H
#define SYMM_NVSHMEM_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* What SYMM_NVSHMEM_LIB names when it is unset. */
#define NVSH_LIB_DEFAULT "libnvshmem_host.so.3"

#define NVSH_STRUCT_VERSION(major, type) ((int)(((major) << 16) + sizeof(type)))

typedef struct nvsh_uid {
  int version;            /* NVSH_STRUCT_VERSION(1, nvsh_uid_t) */
  char internal[124];
} nvsh_uid_t;

typedef struct nvsh_uid_args {
  int version;            /* NVSH_STRUCT_VERSION(1, nvsh_uid_args_t) */
  nvsh_uid_t *id;
  int myrank, nranks;
} nvsh_uid_args_t;

typedef struct nvsh_init_args {
  int version;            /* NVSH_STRUCT_VERSION(2, nvsh_init_args_t) */
  nvsh_uid_args_t uid_args;
  int cuda_device_id;     /* -1: the device of the current context */
  char content[92];
} nvsh_init_args_t;

typedef struct nvsh_init_attr {
  int version;            /* NVSH_STRUCT_VERSION(2, nvsh_init_attr_t) */
  void *mpi_comm;
  nvsh_init_args_t args;
} nvsh_init_attr_t;

_Static_assert(sizeof(nvsh_uid_t) == 128, "NVSHMEM unique id is 128 bytes");
_Static_assert(sizeof(nvsh_uid_args_t) == 24, "NVSHMEM unique-id arguments are 24 bytes");
_Static_assert(sizeof(nvsh_init_args_t) == 128, "NVSHMEM init arguments are 128 bytes");
_Static_assert(sizeof(nvsh_init_attr_t) == 144, "NVSHMEM init attributes are 144 bytes");
_Static_assert(offsetof(nvsh_uid_args_t, id) == 8 && offsetof(nvsh_init_args_t, uid_args) == 8 &&
                   offsetof(nvsh_init_args_t, cuda_device_id) == 32 &&
                   offsetof(nvsh_init_attr_t, args) == 16,
               "NVSHMEM's init structs: members where its headers put them");

#define NVSH_INIT_WITH_UNIQUEID (1u << 3) /* NVSHMEMX_INIT_WITH_UNIQUEID */
#define NVSH_TEAM_WORLD 0                 /* NVSHMEM_TEAM_WORLD */

/* The reductions' dtypes and operators, in the order of the tables below:
 * f32, bf16, f16, i32 (NVSHMEM's float, bfloat16, half, int32) and sum,
 * min, max (SYMM_REDUCE_*). */
enum { NVSH_RED_TYPES = 4, NVSH_RED_OPS = 3 };

typedef int (*nvsh_reduce_fn)(int32_t team, void *dest, const void *src, size_t n, void *stream);

typedef struct nvsh_lib {
  void *handle;
  char path[512];          /* what was loaded */
  int major, minor, patch; /* nvshmemx_vendor_get_version_info */
  /* Required. */
  int (*hostlib_init_attr)(unsigned int flags, nvsh_init_attr_t *attr);
  void (*hostlib_finalize)(void);
  int (*get_uniqueid)(nvsh_uid_t *uid);
  int (*set_attr_uniqueid_args)(int myrank, int nranks, const nvsh_uid_t *uid,
                                nvsh_init_attr_t *attr);
  void *(*malloc)(size_t bytes);
  void (*free)(void *ptr);
  void *(*ptr)(const void *ptr, int pe);
  int (*my_pe)(void);
  int (*n_pes)(void);
  void (*vendor_version)(int *major, int *minor, int *patch);
  /* Optional: what the provider's collectives need (NULL where the library
   * lacks one). */
  void (*putmem_on_stream)(void *dest, const void *src, size_t bytes, int pe, void *stream);
  void (*getmem_on_stream)(void *dest, const void *src, size_t bytes, int pe, void *stream);
  nvsh_reduce_fn reduce[NVSH_RED_OPS][NVSH_RED_TYPES];
  nvsh_reduce_fn reducescatter[NVSH_RED_OPS][NVSH_RED_TYPES];
  int (*fcollectmem_on_stream)(int32_t team, void *dest, const void *src, size_t bytes,
                               void *stream);
  int (*broadcastmem_on_stream)(int32_t team, void *dest, const void *src, size_t bytes,
                                int root, void *stream);
  int (*alltoallmem_on_stream)(int32_t team, void *dest, const void *src, size_t bytes,
                               void *stream);
  /* Optional: the user's memory made symmetric (symm_tensor_register);
   * NULL where the library lacks them. */
  void *(*buffer_register_symmetric)(void *ptr, size_t bytes, int flags);
  int (*buffer_unregister_symmetric)(void *sym, size_t bytes);
  int coll_missing;        /* optional collective entry points the library lacks */
  char first_missing[64];  /* the first of them, "" if none */
} nvsh_lib_t;

/* The library SYMM_NVSHMEM_LIB names (a path, or a file name for the
 * dynamic loader, then in a Python environment's nvidia/nvshmem/lib),
 * loaded once per process with every required function resolved; NULL,
 * with what was looked for and where in why[cap], when it cannot be.  The
 * library stays loaded. */
const nvsh_lib_t *nvsh_lib_get(char *why, size_t cap);
/* Loads `name` as above into *lib (no caching): the loader itself, for the
 * tests that load a real library. */
bool nvsh_lib_load(nvsh_lib_t *lib, const char *name, char *why, size_t cap);
/* Where a Python environment ships `file` under nvidia/<pkg>/lib: the first
 * found of $VIRTUAL_ENV, $CONDA_PREFIX, the prefix of each python3 on PATH
 * and the user's site-packages.  false when none has it. */
bool nvsh_find_in_python(const char *pkg, const char *file, char *out, size_t cap);
/* The NVSHMEM name of a reducible dtype's index and of an operator's. */
const char *nvsh_type_name(int type);
const char *nvsh_op_name(int op);

#pragma GCC visibility pop

#endif /* SYMM_NVSHMEM_LIB_H */
