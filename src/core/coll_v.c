/* All-to-all-v: what the core checks of a call on this rank (its
 * description for the engines, symm_coll_v_t, is made by the public forms
 * in collective.c).  The counts of one rank are checked against the
 * peers' by the engine, which alone sees them all. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define STACK_RANKS 64

/* A receive range [lo, lo + n) of rank `from`, for the overlap check. */
typedef struct {
  size_t lo, n;
  int from;
} range_t;

static int by_start(const void *x, const void *y) {
  const range_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The end of the furthest range of counts at displs in *extent; error when
 * one overflows. */
static symm_result_t extent_of(const char *fn, const char *what, const size_t *counts,
                               const size_t *displs, int world, size_t *extent) {
  *extent = 0;
  for (int p = 0; p < world; p++) {
    size_t end;
    if (__builtin_add_overflow(displs[p], counts[p], &end))
      return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s_displs[%d] %zu + %s_counts[%d] %zu "
                        "overflows", fn, what, p, displs[p], what, p, counts[p]);
    if (counts[p] && end > *extent) *extent = end;
  }
  return SYMM_SUCCESS;
}

/* No two non-empty receive ranges overlap (each element is written once). */
static symm_result_t check_disjoint(const char *fn, const size_t *counts, const size_t *displs,
                                    int world) {
  range_t stack[STACK_RANKS], *r = world <= STACK_RANKS ? stack : malloc(sizeof *r * (size_t)world);
  if (!r) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", fn);
  int n = 0;
  for (int p = 0; p < world; p++)
    if (counts[p]) r[n++] = (range_t){displs[p], counts[p], p};
  qsort(r, (size_t)n, sizeof *r, by_start);
  symm_result_t res = SYMM_SUCCESS;
  for (int i = 1; i < n && res == SYMM_SUCCESS; i++)
    if (r[i].lo < r[i - 1].lo + r[i - 1].n)
      res = symm_error(SYMM_ERR_INVALID_ARG, "%s: the receive ranges of ranks %d (elements "
                       "[%zu, %zu)) and %d ([%zu, %zu)) overlap", fn, r[i - 1].from, r[i - 1].lo,
                       r[i - 1].lo + r[i - 1].n, r[i].from, r[i].lo, r[i].lo + r[i].n);
  if (r != stack) free(r);
  return res;
}

static symm_result_t check_host(symm_comm_t *comm, symm_coll_v_t *v, const char *fn) {
  if (!v->send_counts || !v->recv_counts)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                      v->send_counts ? "recv_counts" : "send_counts");
  SYMM_CHECK(extent_of(fn, "send", v->send_counts, v->send_displs, comm->size, &v->send_rows));
  SYMM_CHECK(extent_of(fn, "recv", v->recv_counts, v->recv_displs, comm->size, &v->recv_rows));
  return check_disjoint(fn, v->recv_counts, v->recv_displs, comm->size);
}

static symm_result_t check_dev(symm_comm_t *comm, symm_coll_v_t *v, const char *fn) {
  if (!v->in_splits || !v->out_splits_offsets)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                      v->in_splits ? "out_splits_offsets" : "in_splits");
  if (!v->row_elems) return symm_error(SYMM_ERR_INVALID_ARG, "%s: rows of 0 elements", fn);
  if (v->n_experts < 1)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: n_experts %d (at least 1)", fn, v->n_experts);
  if (v->n_experts > INT32_MAX / comm->size)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %d experts x %d ranks is too many", fn,
                      v->n_experts, comm->size);
  if (!v->major_align) v->major_align = 1;
  if (v->major_align > ((size_t)1 << 32))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: major_align %zu rows (at most 2^32)", fn,
                      v->major_align);
  return SYMM_SUCCESS;
}

/* rows x row_elems x esize in *bytes, or the error naming `what`. */
static symm_result_t rows_bytes(const char *fn, const char *what, size_t rows,
                                size_t row_bytes, size_t *bytes) {
  if (__builtin_mul_overflow(rows, row_bytes, bytes) || *bytes > (size_t)INT64_MAX)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s of %zu rows overflows", fn, what, rows);
  return SYMM_SUCCESS;
}

symm_result_t symm_coll_v_check(symm_comm_t *comm, symm_coll_args_t *a, const char *fn) {
  symm_coll_v_t *v = (symm_coll_v_t *)a->v;
  SYMM_CHECK(v->mode == SYMM_V_HOST ? check_host(comm, v, fn) : check_dev(comm, v, fn));
  size_t row_bytes;
  if (__builtin_mul_overflow(v->row_elems, symm_dtype_size(a->dtype), &row_bytes))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: rows of %zu elements overflow", fn,
                      v->row_elems);
  SYMM_CHECK(rows_bytes(fn, "sendbuf", v->send_rows, row_bytes, &a->send_bytes));
  SYMM_CHECK(rows_bytes(fn, "recvbuf", v->recv_rows, row_bytes, &a->recv_bytes));
  if ((a->send_bytes && !a->sendbuf) || (a->recv_bytes && !a->recvbuf))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                      a->send_bytes && !a->sendbuf ? "sendbuf" : "recvbuf");
  a->count = v->row_elems;
  a->root = (int)v->mode;
  if (!comm->caps.takes_stream && a->stream)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the %s backend takes no stream (pass NULL)", fn,
                      comm->ops->name);
  return SYMM_SUCCESS;
}
