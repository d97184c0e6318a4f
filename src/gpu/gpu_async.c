/*
 * Errors raised on the device: the kernels write them into one record in
 * pinned host memory mapped for the device (plain stores, see coll_abi.h),
 * and symm_comm_check_async_error moves them into the communicator from
 * here, with the kernel and the peer named.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

bool gpu_async_alloc(symm_gpu_t *g) {
  void *host = NULL;
  ncu_result cu = g->cd->cuMemHostAlloc(&host, sizeof(symm_coll_error_t),
                                        NCU_MEMHOSTALLOC_PORTABLE | NCU_MEMHOSTALLOC_DEVICEMAP);
  if (cu != NCU_SUCCESS) {
    snprintf(g->why, sizeof g->why, "cuMemHostAlloc of the error record failed: %s",
             symm_cu_error(cu));
    return false;
  }
  memset(host, 0, sizeof(symm_coll_error_t));
  g->err = host;
  cu = g->cd->cuMemHostGetDevicePointer(&g->err_dev, host, 0);
  if (cu != NCU_SUCCESS) {
    snprintf(g->why, sizeof g->why, "cuMemHostGetDevicePointer failed: %s", symm_cu_error(cu));
    return false;
  }
  return true;
}

void gpu_async_free(symm_gpu_t *g) {
  if (g->err) g->cd->cuMemFreeHost((void *)g->err);
  g->err = NULL;
  g->err_dev = 0;
}

/* What an all-to-all-v refused (e->why), after the "collective #N (kind) on
 * rank R: " prefix: rank e->peer's counts and what was wrong with them.
 * Host counts are in elements, device splits in rows. */
static void gpu_async_a2av(const symm_coll_error_t *e, char *msg, size_t cap) {
  const bool host = e->mode == SYMM_V_HOST;
  const char *unit = host ? "elements" : "rows";
  const char *counts = host ? "send_counts" : e->mode == SYMM_V_DEV_2D_COMBINE
                                                  ? "in_splits_offsets[0]" : "in_splits";
  const unsigned long long got = e->got, limit = e->limit;
  const unsigned peer = e->peer;
  switch (e->why) {
    case SYMM_COLL_WHY_NEG_COUNT:
      snprintf(msg, cap, "rank %u's %s[%llu] is %lld, negative", peer, counts, got,
               (long long)limit);
      break;
    case SYMM_COLL_WHY_NEG_OFFSET:
      snprintf(msg, cap, "rank %u's %s[%llu] is %lld, negative", peer,
               host ? "send_displs" : "in_splits_offsets[1]", got, (long long)limit);
      break;
    case SYMM_COLL_WHY_SEND_ROWS:
      snprintf(msg, cap, "rank %u's %s exceed its %s: they need %llu %s, %llu fit", peer,
               host ? "counts and displacements" : "splits",
               host ? "send buffer" : "send_rows", got, unit, limit);
      break;
    case SYMM_COLL_WHY_RECV_ROWS:
      snprintf(msg, cap, "rank %u got %llu %s, %llu fit recv_rows (from rank %u on, rows do "
               "not fit)", peer, got, unit, limit, e->other);
      break;
    case SYMM_COLL_WHY_COUNT:
      snprintf(msg, cap, "rank %u sent %llu %s to rank %u, rank %u's recv_counts says %llu",
               peer, got, unit, e->other, e->other, limit);
      break;
    case SYMM_COLL_WHY_SCRATCH:
      snprintf(msg, cap, "rank %u stages %llu bytes, its collective scratch holds %llu "
               "(symm_comm_reserve_scratch)", peer, got, limit);
      break;
    default: snprintf(msg, cap, "rank %u's counts were refused (reason %u)", peer, e->why);
  }
  size_t len = strlen(msg);
  snprintf(msg + len, cap - len, "; no rank wrote anything");
}

/* The message for error `code` of the record's fields. */
static void gpu_async_message(const symm_comm_t *comm, symm_result_t code,
                              const symm_coll_error_t *e, char *msg, size_t cap) {
  const unsigned peer = e->peer, kind = e->kind, epoch = e->epoch;
  const char *what = kind < GPU_COLL_KINDS && gpu_coll_kernel_names[kind]
                         ? gpu_coll_kernel_names[kind] : "?";
  const int rank = symm_comm_rank(comm), timeout_ms = symm_comm_timeout_ms(comm);
  if (e->why) {
    int n = snprintf(msg, cap, "collective #%u (%s kernel) on rank %d: ", epoch, what, rank);
    gpu_async_a2av(e, msg + n, cap - (size_t)n);
  } else if (code == SYMM_ERR_MISMATCH && kind == SYMM_COLL_KERNEL_CE)
    snprintf(msg, cap, "a copy-engine collective on rank %d: rank %u's call differs (kind, "
             "count, dtype, root, algorithm, the all-to-all-v counts between the two, or "
             "where its buffers lie: in a symmetric tensor at the same offset on some ranks "
             "only), or was refused there; the call's recvbuf is undefined", rank, peer);
  else if (code == SYMM_ERR_TIMEOUT && kind == SYMM_COLL_KERNEL_CE)
    snprintf(msg, cap, "a copy-engine collective on rank %d: rank %u did not arrive within %d "
             "ms; the communicator's collectives are unusable from now on", rank, peer,
             timeout_ms);
  else if (code == SYMM_ERR_MISMATCH)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d: rank %u enqueued a different "
             "collective (kind, count, dtype, op, root or algorithm differ)", epoch, what, rank,
             peer);
  else if (code == SYMM_ERR_TIMEOUT && kind == 0)
    snprintf(msg, cap, "a signal put, wait or barrier on rank %d: rank %u did not signal (or "
             "consume a signal) within %d ms; the tensor's pads are unusable from now on", rank,
             peer, timeout_ms);
  else if (code == SYMM_ERR_TIMEOUT && peer == 0xffffffffu)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d did not run: an earlier "
             "collective timed out and the communicator's collectives are unusable", epoch, what,
             rank);
  else if (code == SYMM_ERR_TIMEOUT)
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d: rank %u did not arrive within %d "
             "ms; the communicator's collectives are unusable from now on", epoch, what, rank,
             peer, timeout_ms);
  else
    snprintf(msg, cap, "collective #%u (%s kernel) on rank %d failed on the device (peer %u)",
             epoch, what, rank, peer);
}

symm_result_t gpu_poll_async_error(symm_comm_t *comm) {
  const symm_gpu_t *g = symm_gpu_of(comm);
  if (!g || !g->err) return SYMM_SUCCESS;
  symm_coll_error_t *e = (symm_coll_error_t *)g->err;
  /* `more` is taken atomically: a kernel that stores it after this keeps
   * it for the next poll. */
  const uint32_t more = __atomic_exchange_n(&e->more, 0u, __ATOMIC_ACQ_REL);
  const uint32_t raw = __atomic_load_n(&e->code, __ATOMIC_ACQUIRE);
  if (!raw && !more) return SYMM_SUCCESS;
  char msg[512];
  symm_result_t code = (symm_result_t)(raw ? raw : more);
  if (raw)
    gpu_async_message(comm, code, e, msg, sizeof msg);
  else
    snprintf(msg, sizeof msg, "a collective on rank %d failed on the device (%s) while an "
             "earlier error was not yet read; its details were not kept", symm_comm_rank(comm),
             symm_strerror((symm_result_t)more));
  if (raw && more) {
    size_t len = strlen(msg);
    snprintf(msg + len, sizeof msg - len, "; a later collective failed too (%s)",
             symm_strerror((symm_result_t)more));
  }
  symm_comm_set_async_error(comm, code, "%s", msg);
  if (raw) {
    /* Code last: a kernel that sees it 0 writes a whole new record. */
    e->peer = e->kind = e->epoch = e->why = e->other = e->mode = 0;
    e->got = e->limit = 0;
    __atomic_store_n(&e->code, 0u, __ATOMIC_RELEASE);
  }
  return code;
}
