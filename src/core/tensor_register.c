/* symm_tensor_register: the user's memory made symmetric.  Every rank
 * checks its own arguments, the ranks compare shapes and verdicts in one
 * round, then allocate the pad tensor (an ordinary allocation of the
 * library's, whose signal pad the registered tensor uses) and register
 * the memory with the backend, agreeing on each step, so that a refusal
 * anywhere fails every rank alike and leaves nothing registered. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char fn[] = "symm_tensor_register";

/* What the ranks compare: the shape, and this rank's verdict on its own
 * arguments (status and message) so that its peers can name it. */
typedef struct {
  int32_t ndim, dtype;
  int64_t sizes[SYMM_MAX_DIMS];
  int32_t status;
  int32_t reserved;
  char why[256];
} register_args_t;

static void describe_args(const register_args_t *a, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < a->ndim && d < SYMM_MAX_DIMS && n < cap; d++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)a->sizes[d]);
  const char *dt = symm_dtype_name((symm_dtype_t)a->dtype);
  if (n < cap) snprintf(out + n, cap - n, "] %s", dt ? dt : "?");
}

/* The memory [ptr, ptr + nbytes) against every live tensor's bytes: the
 * same range registered twice, or overlapping ranges, are refused. */
static symm_result_t check_overlap(const void *ptr, size_t nbytes) {
  const void *base;
  size_t len;
  symm_tensor_t *other;
  int rank;
  if (!symm_registry_overlap(ptr, nbytes, &base, &len, &other, &rank)) return SYMM_SUCCESS;
  char shape[160];
  register_args_t a = {.ndim = other->ndim, .dtype = (int32_t)other->dtype};
  memcpy(a.sizes, other->sizes, sizeof a.sizes);
  describe_args(&a, shape, sizeof shape);
  return symm_error(SYMM_ERR_INVALID_ARG,
                    "%s: [%p, +%zu bytes) overlaps the %s tensor %s at [%p, +%zu bytes) "
                    "(rank %d's data as this process maps it); free that tensor first",
                    fn, ptr, nbytes, other->mem.user ? "registered" : "allocated", shape, base,
                    len, rank);
}

/* This rank's own checks of its arguments (nothing allocated yet). */
static symm_result_t check_args(symm_comm_t *comm, const symm_user_mem_t *um,
                                const int64_t *sizes, int ndim, symm_dtype_t dtype,
                                size_t *numel, size_t *nbytes) {
  if (!um || !um->ptr)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn, um ? "mem->ptr" : "mem");
  if (um->size != sizeof *um || um->version != SYMM_USER_MEM_VERSION)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: a descriptor of size %zu, version %d; this "
                      "library takes size %zu, version %d (start from SYMM_USER_MEM_INIT)", fn,
                      um->size, um->version, sizeof *um, SYMM_USER_MEM_VERSION);
  SYMM_CHECK(symm_shape_check(sizes, ndim, dtype, numel, nbytes));
  if (!comm->caps.registers_user || !SYMM_OPS_HAS(comm->ops, 6, register_user)) {
    char who[128];
    symm_backend_names_with(offsetof(symm_backend_caps_t, registers_user), who, sizeof who);
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: the %s backend cannot register memory it did "
                      "not allocate (the %s backend can)", fn, comm->ops->name, who);
  }
  SYMM_CHECK(check_overlap(um->ptr, *nbytes));
  if (SYMM_OPS_HAS(comm->ops, 6, check_user)) SYMM_CHECK(comm->ops->check_user(comm, um, *nbytes));
  return SYMM_SUCCESS;
}

/* The round: every rank's shape and verdict.  A rank that refused its
 * arguments fails every rank with its code; different shapes are a
 * mismatch on every rank. */
static symm_result_t compare_args(symm_comm_t *comm, register_args_t *mine) {
  char saved[1024] = "";
  if (mine->status != SYMM_SUCCESS) {
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    snprintf(mine->why, sizeof mine->why, "%s", saved);
  }
  register_args_t *all = calloc((size_t)comm->size, sizeof *all);
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_REGISTER, mine, sizeof *mine, all);
  if (mine->status != SYMM_SUCCESS) {
    free(all);
    return symm_error((symm_result_t)mine->status, "%s", saved);
  }
  if (res == SYMM_SUCCESS && !all) res = symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", fn);
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++) {
    register_args_t *o = &all[r];
    o->why[sizeof o->why - 1] = '\0';
    if (o->status != SYMM_SUCCESS) {
      res = symm_error((symm_result_t)o->status, "%s: rank %d refused its arguments (%s): %s",
                       fn, r, symm_strerror((symm_result_t)o->status), o->why);
    } else if (o->ndim != mine->ndim || o->dtype != mine->dtype ||
               memcmp(o->sizes, mine->sizes, sizeof o->sizes) != 0) {
      char a[160], b[160];
      describe_args(o, a, sizeof a);
      describe_args(mine, b, sizeof b);
      res = symm_error(SYMM_ERR_MISMATCH, "%s: rank %d registers a tensor of %s, rank %d of %s",
                       fn, r, a, comm->rank, b);
    }
  }
  free(all);
  return res;
}

/* The pad tensor, allocated as any tensor (collectively where the backend
 * allocates so), agreed on: every rank has one, or none has. */
static symm_result_t alloc_pad(symm_comm_t *comm, symm_tensor_t **pad) {
  const int64_t one = 1;
  bool alone;
  symm_result_t local = symm_tensor_alloc_step(comm, &one, 1, SYMM_DTYPE_U8, pad, &alone);
  symm_result_t res = symm_comm_agree(comm, local, "the signal pad's allocation");
  if (res == SYMM_SUCCESS) {
    (*pad)->internal = true;
    return SYMM_SUCCESS;
  }
  if (*pad) { /* failed elsewhere: every rank lets its own go alike */
    symm_tensor_detach(*pad);
    symm_tensor_retire(comm, *pad, false);
    *pad = NULL;
  }
  return res;
}

/* The registered tensor itself: the backend's registration of the
 * memory, its place in the registry promised before the agreement. */
static symm_result_t register_memory(symm_comm_t *comm, const symm_user_mem_t *um, size_t nbytes,
                                     symm_tensor_t *t) {
  SYMM_CHECK(symm_registry_reserve(1));
  symm_result_t res = comm->ops->register_user(comm, um, nbytes, &t->mem);
  if (res == SYMM_SUCCESS &&
      ((char *)t->mem.base + t->mem.data_offset != (char *)um->ptr ||
       t->mem.alloc_bytes != t->mem.data_offset + nbytes)) {
    comm->ops->deregister_user(comm, &t->mem);
    res = symm_error(SYMM_ERR_INTERNAL, "%s: the %s backend registered base %p, data at +%zu, "
                     "%zu bytes for %p and %zu bytes", fn, comm->ops->name, t->mem.base,
                     t->mem.data_offset, t->mem.alloc_bytes, um->ptr, nbytes);
  }
  if (res != SYMM_SUCCESS) {
    t->mem.base = NULL;
    symm_registry_unreserve(1);
  }
  return res;
}

/* After the ranks agreed on the arguments: the pad tensor, then the
 * registration, each agreed on.  On failure nothing is left. */
static symm_result_t register_agreed(symm_comm_t *comm, const symm_user_mem_t *um,
                                     const register_args_t *args, size_t numel, size_t nbytes,
                                     symm_tensor_t **out) {
  symm_tensor_t *pad = NULL, *t = NULL;
  SYMM_CHECK(alloc_pad(comm, &pad));
  symm_result_t local = symm_tensor_shell(comm, &t);
  if (local == SYMM_SUCCESS) {
    t->mem.user = true;
    local = register_memory(comm, um, nbytes, t);
  }
  symm_result_t res = symm_comm_agree(comm, local, "registration");
  if (res != SYMM_SUCCESS) {
    if (t && local == SYMM_SUCCESS) symm_registry_unreserve(1);
    if (t) symm_tensor_destroy(t); /* deregisters what this rank registered */
    symm_tensor_detach(pad);
    symm_tensor_retire(comm, pad, false);
    return res;
  }
  symm_tensor_set_shape(t, args->sizes, args->ndim, (symm_dtype_t)args->dtype, numel, nbytes);
  t->pad_tensor = pad;
  t->alloc_seq = pad->alloc_seq; /* freed together, in its order */
  t->peer_data[comm->rank] = um->ptr;
  (void)symm_registry_add_reserved(um->ptr, nbytes, t, comm->rank); /* promised, checked free */
  symm_tensor_link(comm, t);
  SYMM_TRACE(ALLOC, "registered %zu bytes at %p as mem %llu (pad in mem %llu)", nbytes, um->ptr,
             (unsigned long long)t->mem.id, (unsigned long long)pad->mem.id);
  *out = t;
  return SYMM_SUCCESS;
}

symm_result_t symm_tensor_register(symm_comm_t *comm, const symm_user_mem_t *um,
                                   const int64_t *sizes, int ndim, symm_dtype_t dtype,
                                   symm_tensor_t **out) {
  if (!comm || !out)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn, comm ? "tensor" : "comm");
  *out = NULL;
  size_t numel = 0, nbytes = 0;
  register_args_t args;
  memset(&args, 0, sizeof args);
  args.status = (int32_t)check_args(comm, um, sizes, ndim, dtype, &numel, &nbytes);
  char desc[160] = "arguments it refused";
  if (args.status == SYMM_SUCCESS) {
    args.ndim = ndim;
    args.dtype = (int32_t)dtype;
    memcpy(args.sizes, sizes, sizeof *sizes * (size_t)ndim);
    describe_args(&args, desc, sizeof desc);
  }
  symm_call_begin(comm, true, fn, "%s(%s)", fn, desc);
  symm_result_t res = compare_args(comm, &args);
  if (res == SYMM_SUCCESS) res = register_agreed(comm, um, &args, numel, nbytes, out);
  symm_call_end(comm);
  return res;
}
