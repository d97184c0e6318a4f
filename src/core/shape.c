/* A tensor's shape: the checks of sizes and dtype, and the row-major
 * strides of a new tensor. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <stddef.h>

#include "internal.h"

symm_result_t symm_shape_check(const int64_t *sizes, int ndim, symm_dtype_t dtype,
                               size_t *numel, size_t *nbytes) {
  if (!sizes) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: sizes is NULL");
  if (ndim < 1 || ndim > SYMM_MAX_DIMS)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: ndim %d not in [1, %d]", ndim,
                      SYMM_MAX_DIMS);
  size_t esize = symm_dtype_size(dtype);
  if (!esize) return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: bad dtype %d", (int)dtype);
  size_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] <= 0)
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "symm_tensor_alloc: size %lld of dimension %d must be positive",
                        (long long)sizes[d], d);
    if (__builtin_mul_overflow(n, (size_t)sizes[d], &n))
      return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: element count overflows");
  }
  size_t bytes;
  if (__builtin_mul_overflow(n, esize, &bytes) || bytes > ((size_t)1 << 56))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_tensor_alloc: byte size overflows");
  *numel = n;
  *nbytes = bytes;
  return SYMM_SUCCESS;
}

void symm_tensor_set_shape(symm_tensor_t *t, const int64_t *sizes, int ndim, symm_dtype_t dtype,
                           size_t numel, size_t nbytes) {
  t->ndim = ndim;
  t->dtype = dtype;
  t->numel = numel;
  t->nbytes = nbytes;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t->sizes[d] = sizes[d];
    t->strides[d] = stride;
    stride *= sizes[d];
  }
  for (int d = ndim; d < SYMM_MAX_DIMS; d++) t->sizes[d] = t->strides[d] = 0;
}
