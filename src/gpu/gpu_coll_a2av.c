/*
 * All-to-all-v's launch parameters (the kernel: coll_a2av.cuh): what the
 * host can check of a call, and the call's part of the parameter block:
 * its mode and row shape, capacities, device split pointers, the host
 * counts (SYMM_V_HOST) copied in so that a captured graph replays them,
 * and whether the call writes memory that it also reads.
 *
 * The staging layout (gpu_coll_a2av_layout, gpu_coll_plan.c) depends on
 * this rank's send capacity, which differs by rank: all-to-all-v never
 * grows the scratch (growing is collective, at the same size everywhere),
 * it runs in what was reserved, and a rank whose rows do not fit tells its
 * peers through the kernel instead of staging (gpu_coll_launch.c).
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdint.h>
#include <string.h>

#include "gpu/gpu.h"

/* Most rows of a buffer: far above any device memory, low enough that the
 * kernel's sums of a few thousand counts cannot wrap. */
#define GPU_A2AV_MAX_ROWS ((uint64_t)1 << 48)
/* Largest major_align: likewise. */
#define GPU_A2AV_MAX_ALIGN ((uint64_t)1 << 32)

const char *gpu_a2av_name(const symm_coll_v_t *v) {
  static const char *const names[] = {"symm_all_to_all_v", "symm_all_to_all_vdev",
                                      "symm_all_to_all_vdev_2d",
                                      "symm_all_to_all_vdev_2d_combine"};
  return v && (unsigned)v->mode < 4 ? names[v->mode] : "all_to_all_v";
}

/* Bytes of the device split arrays: in (counts, and offsets for combine)
 * and out ([2][chunks]). */
static uint64_t in_splits_bytes(const symm_coll_v_t *v, uint64_t chunks) {
  return v->mode == SYMM_V_DEV_2D_COMBINE ? 2 * chunks * 8 : v->mode == SYMM_V_HOST ? 0
                                                                                    : chunks * 8;
}

static bool ranges_overlap(const void *a, uint64_t an, const void *b, uint64_t bn) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a && b && an && bn && x < y + bn && y < x + an;
}

/* The host-count arrays, present (the core fills the displacements). */
static symm_result_t check_host_counts(const symm_coll_v_t *v, const char *fn) {
  if (!v->send_counts || !v->send_displs || !v->recv_counts || !v->recv_displs)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: NULL count or displacement array", fn);
  if (v->n_experts != 1 || v->row_elems != 1)
    return symm_error(SYMM_ERR_INTERNAL, "%s: host counts with %d experts and rows of %zu "
                      "elements", fn, v->n_experts, v->row_elems);
  return SYMM_SUCCESS;
}

/* The device modes' split arrays and major_align. */
static symm_result_t check_device_splits(const symm_coll_v_t *v, const symm_coll_args_t *args,
                                         uint64_t chunks, const char *fn) {
  if (!v->in_splits || !v->out_splits_offsets)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: NULL %s", fn,
                      v->in_splits ? "out_splits_offsets" : "in_splits");
  if (v->mode == SYMM_V_DEV_2D && v->major_align > GPU_A2AV_MAX_ALIGN)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: major_align %zu is larger than any buffer "
                      "(at most %llu rows)", fn, v->major_align,
                      (unsigned long long)GPU_A2AV_MAX_ALIGN);
  if (ranges_overlap(v->out_splits_offsets, 2 * chunks * 8, args->recvbuf, args->recv_bytes))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: out_splits_offsets overlaps recvbuf", fn);
  return SYMM_SUCCESS;
}

symm_result_t gpu_a2av_check(const symm_gpu_t *g, const symm_coll_args_t *args,
                             gpu_a2av_layout_t *l) {
  const symm_coll_v_t *v = args->v;
  const char *fn = gpu_a2av_name(v);
  if (!v || (unsigned)v->mode > SYMM_V_DEV_2D_COMBINE)
    return symm_error(SYMM_ERR_INTERNAL, "%s collective: all-to-all-v without a valid "
                      "description", g->name);
  const uint64_t chunks = (uint64_t)g->size * (uint64_t)(v->n_experts > 0 ? v->n_experts : 0);
  if (v->n_experts < 1 || v->row_elems == 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %s", fn,
                      v->n_experts < 1 ? "n_experts below 1" : "rows of 0 elements");
  if (chunks > SYMM_COLL_V_MAX_CHUNKS)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s: %s backend: %d ranks x %d experts are %llu "
                      "chunks; the GPU kernels take at most %d (the host backend has no limit)",
                      fn, g->name, g->size, v->n_experts, (unsigned long long)chunks,
                      SYMM_COLL_V_MAX_CHUNKS);
  if (v->send_rows > GPU_A2AV_MAX_ROWS || v->recv_rows > GPU_A2AV_MAX_ROWS)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: %zu send rows, %zu receive rows: more than "
                      "any GPU buffer holds", fn, v->send_rows, v->recv_rows);
  SYMM_CHECK(v->mode == SYMM_V_HOST ? check_host_counts(v, fn)
                                    : check_device_splits(v, args, chunks, fn));
  gpu_coll_a2av_layout(g, g->size, v->n_experts, args->send_bytes, l);
  return SYMM_SUCCESS;
}

/* Whether the call writes (recv, out_splits_offsets) memory that it reads
 * (send, in_splits): then every block stages before any block writes. */
static bool writes_what_it_reads(const symm_coll_args_t *args, uint64_t chunks) {
  const symm_coll_v_t *v = args->v;
  const uint64_t in_n = in_splits_bytes(v, chunks);
  const uint64_t out_n = v->mode == SYMM_V_HOST ? 0 : 2 * chunks * 8;
  return ranges_overlap(args->recvbuf, args->recv_bytes, args->sendbuf, args->send_bytes) ||
         ranges_overlap(args->recvbuf, args->recv_bytes, v->in_splits, in_n) ||
         ranges_overlap(v->out_splits_offsets, out_n, args->sendbuf, args->send_bytes) ||
         ranges_overlap(v->out_splits_offsets, out_n, v->in_splits, in_n);
}

void gpu_a2av_fill(const symm_gpu_t *g, const symm_coll_args_t *args,
                   const gpu_a2av_layout_t *l, symm_coll_params_t *p) {
  const symm_coll_v_t *v = args->v;
  symm_coll_v_params_t *pv = &p->v;
  const uint64_t es = symm_dtype_size(args->dtype), chunks = (uint64_t)g->size * v->n_experts;
  memset(pv, 0, sizeof *pv);
  if (v->mode == SYMM_V_HOST)
    for (int r = 0; r < g->size; r++) {
      pv->send_counts[r] = v->send_counts[r];
      pv->send_displs[r] = v->send_displs[r];
      pv->recv_counts[r] = v->recv_counts[r];
      pv->recv_displs[r] = v->recv_displs[r];
    }
  pv->in_splits = (uint64_t)(uintptr_t)v->in_splits;
  pv->out_splits = (uint64_t)(uintptr_t)v->out_splits_offsets;
  pv->row_bytes = v->row_elems * es;
  pv->send_rows = v->send_rows;
  pv->recv_rows = v->recv_rows;
  pv->major_align = v->mode == SYMM_V_DEV_2D && v->major_align > 1 ? v->major_align : 1;
  pv->table_bytes = l->table_bytes;
  pv->plan_bytes = l->plan_bytes;
  pv->data_off = l->data_off;
  pv->mode = (int32_t)v->mode;
  pv->n_experts = v->n_experts;
  pv->ordered = writes_what_it_reads(args, chunks);
  p->kind = SYMM_COLL_KERNEL_ALL_TO_ALL_V;
  p->esize = (int32_t)es;
  p->root = (int32_t)v->mode;
  p->count = v->row_elems;
  p->send = (uint64_t)(uintptr_t)args->sendbuf;
  p->recv = (uint64_t)(uintptr_t)args->recvbuf;
  p->vec = (p->send & 15u) == 0 && (p->recv & 15u) == 0 && pv->row_bytes % 16 == 0;
}
