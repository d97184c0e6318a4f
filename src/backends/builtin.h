/*
 * The built-in backends: the one place they are listed, in `auto`
 * preference order (GPU first, host last).  Each is the ops table
 * symm_<name>_ops of src/backends/<name>/, whose id is its value in
 * symm_backend_t (include/symmem.h) and whose name is the one users write;
 * everything else (the table of the core, names, valid-name messages) is
 * made from this list and the tables.  Not installed.
 */
#ifndef SYMM_BUILTIN_H
#define SYMM_BUILTIN_H

#include "symm_backend.h"

#define SYMM_BUILTIN_BACKENDS(X) X(native) X(cuda) X(nccl) X(nvshmem) X(host)

#define SYMM_DECLARE_BACKEND(name) extern const symm_backend_ops_t symm_##name##_ops;
SYMM_BUILTIN_BACKENDS(SYMM_DECLARE_BACKEND)
#undef SYMM_DECLARE_BACKEND

#endif /* SYMM_BUILTIN_H */
