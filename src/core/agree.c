/* The core's own collectives over the bootstrap: all-gathers tagged with
 * the operation, so that ranks in different operations (a barrier and a
 * rendezvous, an allocation and a free) get SYMM_ERR_MISMATCH instead of
 * exchanging garbage; the agreement of every rank on a local step's
 * result; the user-visible barrier. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "symm_fault.h"

static const char *op_name(uint32_t op) {
  switch (op) {
    case SYMM_TAG_BARRIER: return "barrier";
    case SYMM_TAG_RENDEZVOUS: return "rendezvous";
    case SYMM_TAG_STATUS: return "status";
    case SYMM_TAG_STARTUP: return "init";
    case SYMM_TAG_ALLOC: return "tensor alloc";
    case SYMM_TAG_FREE: return "tensor free";
    default: return "collective";
  }
}

symm_result_t symm_comm_allgatherv_op(symm_comm_t *comm, uint32_t op, const void *send,
                                      size_t len, void **values, size_t *lens) {
  const size_t hdr_len = sizeof(uint32_t);
  uint8_t *mine = malloc(hdr_len + len);
  symm_result_t res = SYMM_SUCCESS;
  if (!mine) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", op_name(op));
  memcpy(mine, &op, hdr_len);
  if (len) memcpy(mine + hdr_len, send, len);
  res = comm->bootstrap->ops->allgatherv(comm->bootstrap, mine, hdr_len + len, values, lens);
  free(mine);
  if (res != SYMM_SUCCESS) {
    symm_error_context("%s", op_name(op));
    return res;
  }
  /* Every rank sees the same contributions, so all reach the same verdict. */
  for (int r = 0; r < comm->size && res == SYMM_SUCCESS; r++) {
    uint32_t other = 0;
    if (lens[r] >= hdr_len) memcpy(&other, values[r], hdr_len);
    if (lens[r] < hdr_len || other != op)
      res = symm_error(SYMM_ERR_MISMATCH, "rank %d called %s while rank %d called %s", r,
                       op_name(other), comm->rank, op_name(op));
  }
  for (int r = 0; r < comm->size; r++) {
    if (res != SYMM_SUCCESS) {
      free(values[r]);
      values[r] = NULL;
      lens[r] = 0;
      continue;
    }
    lens[r] -= hdr_len;
    memmove(values[r], (uint8_t *)values[r] + hdr_len, lens[r]);
  }
  return res;
}

symm_result_t symm_comm_allgather_op(symm_comm_t *comm, uint32_t op, const void *send,
                                     size_t len, void *recv) {
  void **values = calloc((size_t)comm->size, sizeof *values);
  size_t *lens = calloc((size_t)comm->size, sizeof *lens);
  symm_result_t res = SYMM_SUCCESS;
  if (!values || !lens) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", op_name(op));
    goto out;
  }
  SYMM_CHECK_GOTO(symm_comm_allgatherv_op(comm, op, send, len, values, lens), res, out);
  for (int r = 0; r < comm->size; r++) {
    if (lens[r] != len) {
      res = symm_error(SYMM_ERR_MISMATCH, "rank %d called %s with %zu bytes, rank %d with %zu",
                       r, op_name(op), lens[r], comm->rank, len);
      goto out;
    }
    if (recv && len) memcpy((uint8_t *)recv + (size_t)r * len, values[r], len);
  }
out:
  for (int r = 0; values && r < comm->size; r++) free(values[r]);
  free(values);
  free(lens);
  return res;
}

symm_result_t symm_comm_agree(symm_comm_t *comm, symm_result_t mine, const char *what) {
  int32_t *codes = calloc((size_t)comm->size, sizeof *codes);
  if (!codes) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", what);
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  int32_t code = (int32_t)mine;
  symm_result_t res = symm_comm_allgather_op(comm, SYMM_TAG_STATUS, &code, sizeof code, codes);
  if (res == SYMM_SUCCESS) {
    if (mine != SYMM_SUCCESS) {
      res = symm_error(mine, "%s", saved);
    } else {
      for (int r = 0; r < comm->size; r++)
        if (codes[r] != SYMM_SUCCESS) {
          res = symm_error((symm_result_t)codes[r], "%s failed on rank %d (%s)", what, r,
                           symm_strerror((symm_result_t)codes[r]));
          break;
        }
    }
  }
  free(codes);
  return res;
}

/* A user-visible barrier is an agreed all-gather with its own tag, so that a
 * rank in a barrier and a rank in another collective see a mismatch. */
symm_result_t symm_comm_barrier(symm_comm_t *comm) {
  if (!comm) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_barrier: comm is NULL");
  symm_fault_point(SYMM_FAULT_BARRIER, comm->rank);
  return symm_comm_allgather_op(comm, SYMM_TAG_BARRIER, NULL, 0, NULL);
}

