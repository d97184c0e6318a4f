/*
 * The slice of the CUDA driver API the GPU engine and the GPU backends use, loaded at run
 * time.  The library never links libcuda and must build where the CUDA
 * toolkit is absent, so this header states the few ABI facts it relies on
 * (type sizes, enum values, struct layouts) itself instead of including
 * cuda.h.  The values are those of the CUDA 12/13 driver ABI; every entry
 * point is resolved through cuGetProcAddress with SYMM_CUDA_ABI, which
 * makes the driver hand back the variant whose signature matches the
 * declarations below (e.g. the size_t-based "_v2" memory calls).
 */
#ifndef SYMM_CU_DRIVER_H
#define SYMM_CU_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* CUDA version whose entry-point signatures we declare (12.0). */
#define SYMM_CUDA_ABI 12000

/* ------------------------------------------------------------ basic types */
typedef int ncu_result;                  /* CUresult (an enum: int-sized) */
typedef int ncu_device;                  /* CUdevice: an ordinal */
typedef struct ncu_ctx_st *ncu_context;  /* CUcontext: opaque pointer */
typedef struct ncu_stream_st *ncu_stream;/* CUstream: opaque pointer */
typedef unsigned long long ncu_deviceptr;/* CUdeviceptr on 64-bit hosts */
typedef unsigned long long ncu_mem_handle; /* CUmemGenericAllocationHandle */

/* Result codes we test for or name ourselves. */
enum {
  NCU_SUCCESS = 0,
  NCU_ERROR_INVALID_VALUE = 1,
  NCU_ERROR_OUT_OF_MEMORY = 2,
  NCU_ERROR_NOT_INITIALIZED = 3,
  NCU_ERROR_STUB_LIBRARY = 34,
  NCU_ERROR_NO_DEVICE = 100,
  NCU_ERROR_INVALID_IMAGE = 200,
  NCU_ERROR_INVALID_DEVICE = 101,
  NCU_ERROR_NOT_FOUND = 500,
  NCU_ERROR_NOT_PERMITTED = 800,
  NCU_ERROR_NOT_SUPPORTED = 801
};

/* cuGetProcAddress: search flags and the per-symbol status it reports. */
enum { NCU_PROC_LEGACY_STREAM = 1 };
enum { NCU_PROC_FOUND = 0, NCU_PROC_NOT_FOUND = 1, NCU_PROC_VERSION_TOO_LOW = 2 };

/* CUdevice_attribute values. */
enum {
  NCU_DEV_ATTR_MULTIPROCESSOR_COUNT = 16,
  NCU_DEV_ATTR_PCI_BUS_ID = 33,
  NCU_DEV_ATTR_PCI_DEVICE_ID = 34,
  NCU_DEV_ATTR_UNIFIED_ADDRESSING = 41,
  NCU_DEV_ATTR_PCI_DOMAIN_ID = 50,
  NCU_DEV_ATTR_CC_MAJOR = 75,
  NCU_DEV_ATTR_CC_MINOR = 76,
  NCU_DEV_ATTR_VMM_SUPPORTED = 102,
  NCU_DEV_ATTR_POSIX_FD_SUPPORTED = 103,
  NCU_DEV_ATTR_GDR_WITH_VMM_SUPPORTED = 110,
  NCU_DEV_ATTR_FABRIC_SUPPORTED = 128,
  NCU_DEV_ATTR_MULTICAST_SUPPORTED = 132
};

/* CUdevice_P2PAttribute values. */
enum {
  NCU_P2P_PERFORMANCE_RANK = 1,
  NCU_P2P_ACCESS_SUPPORTED = 2,
  NCU_P2P_NATIVE_ATOMIC_SUPPORTED = 3
};

/* CUpointer_attribute values. */
enum {
  NCU_PTR_ATTR_MEMORY_TYPE = 2,     /* unsigned int: NCU_MEMORYTYPE_* */
  NCU_PTR_ATTR_DEVICE_ORDINAL = 9,  /* int */
  NCU_PTR_ATTR_RANGE_START = 11,    /* CUdeviceptr */
  NCU_PTR_ATTR_RANGE_SIZE = 12,     /* size_t */
  NCU_PTR_ATTR_MAPPED = 13,         /* int */
  NCU_PTR_ATTR_HANDLE_TYPES = 14,   /* unsigned long long bitmask */
  NCU_PTR_ATTR_MAPPING_SIZE = 18,   /* size_t */
  NCU_PTR_ATTR_MAPPING_BASE = 19    /* void * */
};

/* CUmemorytype values. */
enum { NCU_MEMORYTYPE_HOST = 1, NCU_MEMORYTYPE_DEVICE = 2, NCU_MEMORYTYPE_ARRAY = 3,
       NCU_MEMORYTYPE_UNIFIED = 4 };

/* CUmemAllocationHandleType bits. */
enum { NCU_HANDLE_NONE = 0x0, NCU_HANDLE_POSIX_FD = 0x1, NCU_HANDLE_FABRIC = 0x8 };

/* CUmemAllocationType, CUmemLocationType, CUmemAccess_flags,
 * CUmemAllocationGranularity_flags. */
enum { NCU_ALLOC_PINNED = 0x1 };
enum { NCU_LOCATION_DEVICE = 0x1 };
enum { NCU_ACCESS_READWRITE = 0x3 };
enum { NCU_GRANULARITY_MINIMUM = 0x0, NCU_GRANULARITY_RECOMMENDED = 0x1 };

/* CU_STREAM_NON_BLOCKING: no implicit ordering with the legacy stream, so
 * our zeroing never waits on (or blocks) the application's work. */
enum { NCU_STREAM_NON_BLOCKING = 0x1 };

/* CUmemLocation: {location type, id (device ordinal)}; 8 bytes. */
typedef struct ncu_location {
  int type;
  int id;
} ncu_location;

/* CUmemAllocationProp (v1): 32 bytes on LP64. */
typedef struct ncu_alloc_prop {
  int type;                   /* NCU_ALLOC_PINNED */
  int requested_handle_types; /* NCU_HANDLE_* bitmask */
  ncu_location location;
  void *win32_metadata;       /* must be NULL on Linux */
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} ncu_alloc_prop;

/* CUmemAccessDesc: {location, CUmemAccess_flags}; 12 bytes. */
typedef struct ncu_access_desc {
  ncu_location location;
  int flags;
} ncu_access_desc;

/* CUmemFabricHandle: 64 opaque bytes (CU_IPC_HANDLE_SIZE). */
#define NCU_FABRIC_HANDLE_BYTES 64
typedef struct ncu_fabric_handle {
  unsigned char data[NCU_FABRIC_HANDLE_BYTES];
} ncu_fabric_handle;

/* CUipcMemHandle: 64 opaque bytes (CU_IPC_HANDLE_SIZE), taken by value by
 * cuIpcOpenMemHandle (so the struct's size is part of the call's ABI). */
#define NCU_IPC_HANDLE_BYTES 64
typedef struct ncu_ipc_mem_handle {
  unsigned char reserved[NCU_IPC_HANDLE_BYTES];
} ncu_ipc_mem_handle;
_Static_assert(sizeof(ncu_ipc_mem_handle) == 64, "CUipcMemHandle is 64 bytes");

/* CUipcMem_flags: the importer's context gets peer access to the
 * exporter's device on first use. */
enum { NCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1 };

/* CUuuid: 16 bytes. */
typedef struct ncu_uuid {
  unsigned char bytes[16];
} ncu_uuid;

/* ------------------------------------------------------------ entry points */
/* X(name, return-less parameter list): one line per driver function the
 * backend uses.  There is no multicast entry point among them, nor anywhere
 * in symmem: see symm_multicast_status.  The CUDA IPC calls (the cuda
 * backend) are in every driver since CUDA 4.0: required like the rest. */
#define SYMM_CU_DRIVER_FUNCTIONS(X)                                             \
  X(cuGetErrorName, (ncu_result e, const char **s))                            \
  X(cuGetErrorString, (ncu_result e, const char **s))                          \
  X(cuInit, (unsigned int flags))                                              \
  X(cuDriverGetVersion, (int *version))                                        \
  X(cuDeviceGetCount, (int *count))                                            \
  X(cuDeviceGet, (ncu_device * dev, int ordinal))                              \
  X(cuDeviceGetName, (char *name, int len, ncu_device dev))                    \
  X(cuDeviceGetAttribute, (int *value, int attr, ncu_device dev))              \
  X(cuDeviceTotalMem, (size_t * bytes, ncu_device dev))                        \
  X(cuDeviceGetPCIBusId, (char *bus_id, int len, ncu_device dev))              \
  X(cuDeviceGetByPCIBusId, (ncu_device * dev, const char *bus_id))             \
  X(cuDeviceGetUuid, (ncu_uuid * uuid, ncu_device dev))                        \
  X(cuDeviceCanAccessPeer, (int *can, ncu_device dev, ncu_device peer))        \
  X(cuDeviceGetP2PAttribute, (int *value, int attr, ncu_device src,            \
                              ncu_device dst))                                 \
  X(cuDevicePrimaryCtxRetain, (ncu_context * ctx, ncu_device dev))             \
  X(cuDevicePrimaryCtxRelease, (ncu_device dev))                               \
  X(cuDevicePrimaryCtxGetState, (ncu_device dev, unsigned int *flags,          \
                                 int *active))                                 \
  X(cuCtxGetCurrent, (ncu_context * ctx))                                      \
  X(cuCtxSetCurrent, (ncu_context ctx))                                        \
  X(cuStreamCreate, (ncu_stream * stream, unsigned int flags))                 \
  X(cuStreamDestroy, (ncu_stream stream))                                      \
  X(cuStreamSynchronize, (ncu_stream stream))                                  \
  X(cuMemAlloc, (ncu_deviceptr * ptr, size_t bytes))                           \
  X(cuMemFree, (ncu_deviceptr ptr))                                            \
  X(cuMemcpyHtoDAsync, (ncu_deviceptr dst, const void *src, size_t bytes,      \
                        ncu_stream stream))                                    \
  X(cuMemcpyAsync, (ncu_deviceptr dst, ncu_deviceptr src, size_t bytes,        \
                    ncu_stream stream))                                        \
  X(cuMemsetD8Async, (ncu_deviceptr dst, unsigned char value, size_t n,        \
                      ncu_stream stream))                                      \
  X(cuMemsetD32Async, (ncu_deviceptr dst, unsigned int value, size_t n,        \
                       ncu_stream stream))                                     \
  X(cuStreamWriteValue32, (ncu_stream stream, ncu_deviceptr addr,              \
                           uint32_t value, unsigned int flags))                \
  X(cuMemGetAllocationGranularity, (size_t * gran, const ncu_alloc_prop *prop, \
                                    int option))                               \
  X(cuMemCreate, (ncu_mem_handle * h, size_t size, const ncu_alloc_prop *prop, \
                  unsigned long long flags))                                   \
  X(cuMemRelease, (ncu_mem_handle h))                                          \
  X(cuMemAddressReserve, (ncu_deviceptr * ptr, size_t size, size_t align,      \
                          ncu_deviceptr hint, unsigned long long flags))       \
  X(cuMemAddressFree, (ncu_deviceptr ptr, size_t size))                        \
  X(cuMemMap, (ncu_deviceptr ptr, size_t size, size_t offset, ncu_mem_handle h,\
               unsigned long long flags))                                      \
  X(cuMemUnmap, (ncu_deviceptr ptr, size_t size))                              \
  X(cuMemSetAccess, (ncu_deviceptr ptr, size_t size,                           \
                     const ncu_access_desc *desc, size_t count))               \
  X(cuMemGetAccess, (unsigned long long *flags, const ncu_location *loc,       \
                     ncu_deviceptr ptr))                                       \
  X(cuMemExportToShareableHandle, (void *out, ncu_mem_handle h, int type,      \
                                   unsigned long long flags))                  \
  X(cuMemImportFromShareableHandle, (ncu_mem_handle * h, void *os_handle,      \
                                     int type))                                \
  X(cuMemRetainAllocationHandle, (ncu_mem_handle * h, void *addr))            \
  X(cuMemGetAllocationPropertiesFromHandle, (ncu_alloc_prop * prop,            \
                                             ncu_mem_handle h))                \
  X(cuPointerGetAttribute, (void *data, int attr, ncu_deviceptr ptr))          \
  X(cuIpcGetMemHandle, (ncu_ipc_mem_handle * h, ncu_deviceptr ptr))            \
  X(cuIpcOpenMemHandle, (ncu_deviceptr * ptr, ncu_ipc_mem_handle h,            \
                         unsigned int flags))                                  \
  X(cuIpcCloseMemHandle, (ncu_deviceptr ptr))

/* Entry points of the kernels (gpu_module.c, gpu_coll_launch.c), resolved on first use by
 * symm_cu_coll_driver_load so that a driver (or the tests' fake driver)
 * without them still runs everything else. */
typedef struct ncu_module_st *ncu_module;     /* CUmodule */
typedef struct ncu_function_st *ncu_function; /* CUfunction */
/* CUfunction_attribute: the PTX virtual architecture of a function (90 for
 * compute_90). */
enum { NCU_FUNC_ATTR_PTX_VERSION = 5 };
/* cuMemHostAlloc flags. */
enum { NCU_MEMHOSTALLOC_PORTABLE = 0x1, NCU_MEMHOSTALLOC_DEVICEMAP = 0x2 };
#define SYMM_CU_COLL_DRIVER_FUNCTIONS(X)                                        \
  X(cuModuleLoadData, (ncu_module * module, const void *image))                \
  X(cuModuleUnload, (ncu_module module))                                       \
  X(cuModuleGetFunction, (ncu_function * fn, ncu_module module,                \
                          const char *name))                                   \
  X(cuModuleGetGlobal, (ncu_deviceptr * dptr, size_t *bytes, ncu_module module, \
                        const char *name))                                     \
  X(cuLaunchKernel, (ncu_function fn, unsigned int gx, unsigned int gy,        \
                     unsigned int gz, unsigned int bx, unsigned int by,        \
                     unsigned int bz, unsigned int shared_bytes,               \
                     ncu_stream stream, void **params, void **extra))          \
  X(cuFuncGetAttribute, (int *value, int attr, ncu_function fn))               \
  X(cuMemHostAlloc, (void **ptr, size_t bytes, unsigned int flags))            \
  X(cuMemHostGetDevicePointer, (ncu_deviceptr * dptr, void *ptr,               \
                                unsigned int flags))                           \
  X(cuMemFreeHost, (void *ptr))

/* cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute):
 * only the programmatic-stream-serialization attribute is used. */
enum { NCU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
typedef struct ncu_launch_attr {
  int id;           /* CUlaunchAttributeID */
  char pad[4];      /* the value starts 8 bytes in */
  union {
    char bytes[64]; /* CUlaunchAttributeValue is 64 bytes */
    uint64_t align; /* and 8-byte aligned (it holds pointers) */
    int programmatic_stream_serialization;
  } value;
} ncu_launch_attr;
typedef struct ncu_launch_config {
  unsigned int gx, gy, gz, bx, by, bz;
  unsigned int shared_bytes;
  ncu_stream stream;
  ncu_launch_attr *attrs;
  unsigned int num_attrs;
} ncu_launch_config;

#define SYMM_CU_DECLARE_FN(name, params) ncu_result (*name) params;
typedef struct symm_cu_coll_driver {
  SYMM_CU_COLL_DRIVER_FUNCTIONS(SYMM_CU_DECLARE_FN)
  /* Optional (CUDA 12.0+, NULL where absent): launches with programmatic
   * dependent launch, see gpu_launch. */
  ncu_result (*cuLaunchKernelEx)(const ncu_launch_config *config, ncu_function fn,
                                 void **params, void **extra);
} symm_cu_coll_driver_t;

typedef struct symm_cu_driver {
  void *lib;           /* dlopen handle, kept for the process lifetime */
  int driver_version;  /* cuDriverGetVersion, e.g. 12080 */
  /* cuGetProcAddress_v2 itself, for entry points resolved later. */
  ncu_result (*get_proc)(const char *symbol, void **fn, int cuda_version,
                         unsigned long long flags, int *status);
  SYMM_CU_DRIVER_FUNCTIONS(SYMM_CU_DECLARE_FN)
} symm_cu_driver_t;
#undef SYMM_CU_DECLARE_FN

/*
 * Loads the driver library named by SYMM_CUDA_LIB once per process and
 * resolves every entry point above; does not call cuInit.  Returns the
 * table, or NULL with the reason in why ("libcuda.so.1 not found (no NVIDIA
 * driver): ...").  Thread-safe; the outcome is cached.
 */
const symm_cu_driver_t *symm_cu_driver_load(char *why, size_t why_len);

/* Loads the driver and runs cuInit(0) once; same contract as
 * symm_cu_driver_load ("cuInit failed: CUDA_ERROR_NO_DEVICE (...)"). */
const symm_cu_driver_t *symm_cu_driver_init(char *why, size_t why_len);

/* Resolves one more entry point (the collectives' table).  0 on success, else a driver
 * result; *fn is NULL on failure. */
ncu_result symm_cu_driver_resolve(const symm_cu_driver_t *drv, const char *symbol, void **fn);

/* Resolves SYMM_CU_COLL_DRIVER_FUNCTIONS once per process (after
 * symm_cu_driver_load succeeded).  NULL with the reason in why when the
 * driver lacks one of them.  Thread-safe; the outcome is cached. */
const symm_cu_coll_driver_t *symm_cu_coll_driver_load(const symm_cu_driver_t *drv, char *why,
                                                    size_t why_len);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": name and description of a
 * driver result, in a per-thread buffer valid until the next call. */
const char *symm_cu_error(ncu_result res);

#endif /* SYMM_CU_DRIVER_H */
