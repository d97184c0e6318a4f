/* The destructor of the DLPack capsules that language bindings make over
 * symmem's memory (symm_dlpack_capsule_destructor in symmem.h).
 *
 * A capsule's destructor may run while an exception is pending: a consumer
 * that refuses a tensor (NumPy and bfloat16) raises, then drops the
 * capsule.  A destructor written in the binding's own language runs
 * interpreter code under that exception and loses it.  This one is C: it
 * sets the exception aside, calls the managed tensor's deleter if nobody
 * consumed the capsule, and puts the exception back.  The interpreter's
 * functions are looked up in the process at first use (the library links
 * no Python); the binding calls it only from a capsule, where they are
 * there and the GIL is held. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* DLPack's ABI (dlpack.h, 1.x), as far as the deleter. */
typedef struct {
  void *data;
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} dl_tensor_t;

typedef struct dl_managed {
  dl_tensor_t dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *self);
} dl_managed_t;

typedef struct dl_managed_versioned {
  uint32_t major, minor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed_versioned *self);
  uint64_t flags;
  dl_tensor_t dl_tensor;
} dl_managed_versioned_t;

typedef struct {
  int (*is_valid)(void *capsule, const char *name);
  void *(*pointer)(void *capsule, const char *name);
  void (*fetch)(void **type, void **value, void **traceback);
  void (*restore)(void *type, void *value, void *traceback);
  int ready; /* 1: found, -1: missing */
} py_api_t;

/* Under the GIL: one thread at a time. */
static py_api_t py;

static bool py_api(void) {
  if (!py.ready) {
    *(void **)&py.is_valid = dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
    *(void **)&py.pointer = dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
    *(void **)&py.fetch = dlsym(RTLD_DEFAULT, "PyErr_Fetch");
    *(void **)&py.restore = dlsym(RTLD_DEFAULT, "PyErr_Restore");
    py.ready = py.is_valid && py.pointer && py.fetch && py.restore ? 1 : -1;
  }
  return py.ready == 1;
}

void symm_dlpack_capsule_destructor(void *capsule) {
  if (!capsule || !py_api()) return;
  void *type = NULL, *value = NULL, *traceback = NULL;
  py.fetch(&type, &value, &traceback);
  /* Still under its first name: never consumed, so its contents are the
   * producer's to release.  A consumer renames it "used_...". */
  if (py.is_valid(capsule, "dltensor_versioned")) {
    dl_managed_versioned_t *m = py.pointer(capsule, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  } else if (py.is_valid(capsule, "dltensor")) {
    dl_managed_t *m = py.pointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
  py.restore(type, value, traceback);
}
