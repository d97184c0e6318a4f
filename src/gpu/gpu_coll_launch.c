/*
 * Launching the collectives: the parameter block of a call (the scratch's
 * pointers and layout, the call's buffers, grid and signature), zero copy
 * into the peers' recv where every rank's recv is one symmetric tensor,
 * and the launch itself on the caller's stream, with programmatic
 * dependent launch where the driver and the kernels allow it.
 *
 * Where every rank's recvbuf is the same symmetric tensor at the same
 * offset, two-shot and all-gather write into the peers' recvbuf instead of
 * staging (zero copy): the host offers a key of the tensor and offset, and
 * the kernel uses it only if every rank announced the same one, so nothing
 * has to be agreed on the host.
 *
 * One launch per call.  Nothing here allocates (but the scratch, grown
 * collectively at the same call on every rank, since its size depends only
 * on the arguments), synchronises or passes a host-side counter to a
 * kernel, so calls can be captured in CUDA graphs once the scratch is
 * reserved.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

_Static_assert(SYMM_COLL_PAD_BYTES == SYMM_SIGNAL_PAD_MIN_BYTES,
               "the kernels' pad layout assumes the library's signal pad size");
_Static_assert(sizeof(ncu_launch_attr) == 72 && offsetof(ncu_launch_attr, value) == 8 &&
                   sizeof(ncu_launch_config) == 56 &&
                   offsetof(ncu_launch_config, num_attrs) == 48,
               "CUlaunchAttribute / CUlaunchConfig layout of the CUDA 12 driver ABI");

/*
 * Launches fn on `stream` with one parameter block.  With programmatic
 * dependent launch (SYMM_GPU_PDL, where the driver has cuLaunchKernelEx)
 * the kernel may start while the kernel before it on the stream is still
 * running: every kernel of ours waits (griddepcontrol.wait) for that
 * kernel's completion and memory before it touches anything, and lets the
 * kernel after it start early (griddepcontrol.launch_dependents).  What
 * this hides is the launch latency between back-to-back kernels, in graphs
 * too, where captured launches keep the attribute as a programmatic edge.
 */
ncu_result gpu_launch(symm_gpu_t *g, ncu_function fn, unsigned grid, unsigned threads,
                      void *stream, void *params) {
  void *kparams[1] = {params};
  if (g->pdl) {
    ncu_launch_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = NCU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization = 1;
    ncu_launch_config cfg = {grid, 1, 1, threads, 1, 1, 0, (ncu_stream)stream, &attr, 1};
    ncu_result cu = g->cd->cuLaunchKernelEx(&cfg, fn, kparams, NULL);
    if (cu != NCU_ERROR_INVALID_VALUE && cu != NCU_ERROR_NOT_SUPPORTED) return cu;
    /* A driver that refuses the attribute (if a plain launch goes): launch
     * plainly from now on.  Other bad values fail the plain launch too. */
    ncu_result plain = g->cd->cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0,
                                             (ncu_stream)stream, kparams, NULL);
    if (plain == NCU_SUCCESS) {
      g->pdl = false;
      SYMM_WARN(COLL, "%s: cuLaunchKernelEx refused programmatic dependent launch (%s); "
                "launching without it", g->name, symm_cu_error(cu));
    }
    return plain;
  }
  return g->cd->cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, (ncu_stream)stream, kparams,
                               NULL);
}

symm_result_t gpu_coll_function(symm_gpu_t *g, int kind, int dti, int op, ncu_function *fn) {
  bool reducing = gpu_coll_reducing(kind);
  if (!reducing) dti = op = 0;
  ncu_function *slot = &g->fn[kind][dti][op];
  if (!*slot) {
    char name[96];
    if (reducing)
      snprintf(name, sizeof name, "symm_coll_%s_%s_%s", gpu_coll_kernel_names[kind],
               symm_dtype_name((symm_dtype_t)dti), symm_redop_name((symm_redop_t)op));
    else
      snprintf(name, sizeof name, "symm_coll_%s", gpu_coll_kernel_names[kind]);
    ncu_result cu = g->cd->cuModuleGetFunction(slot, g->module, name);
    if (cu != NCU_SUCCESS) {
      *slot = NULL;
      return symm_gpu_fail(cu, "cuModuleGetFunction(%s)", name);
    }
  }
  *fn = *slot;
  return SYMM_SUCCESS;
}

/* The call (count included), the kernel and its launch shape: ranks whose
 * blocks differ (a different SYMM_COLL_LL_THREADS) would wait on peer
 * blocks of other indices even where their grids agree.  All-to-all-v:
 * also its mode, n_experts, major_align as it runs and row bytes, not the
 * counts or capacities, which differ by rank. */
static uint32_t gpu_coll_sig(const symm_coll_args_t *args, int kind, unsigned grid,
                             unsigned threads) {
  uint64_t f[7] = {symm_coll_signature(args), (uint64_t)kind, (uint64_t)threads << 32 | grid};
  size_t n = 3;
  const symm_coll_v_t *v = args->kind == SYMM_COLL_ALL_TO_ALL_V ? args->v : NULL;
  if (v) {
    f[3] = (uint64_t)v->mode;
    f[4] = (uint64_t)v->n_experts;
    f[5] = v->mode == SYMM_V_DEV_2D && v->major_align > 1 ? v->major_align : 1;
    f[6] = v->row_elems * symm_dtype_size(args->dtype);
    n = 7;
  }
  uint64_t h = symm_hash64(f, n * sizeof f[0], 0x636f6c6cull);
  return (uint32_t)(h ^ (h >> 32)) | 1u; /* never SYMM_COLL_SIG_REFUSED */
}

static bool aligned16(uint64_t v) { return (v & 15u) == 0; }

/* Fills g->base, the parameters that only change with the scratch: every
 * rank's scratch data and pad pointers, the LL and staging layout, and the
 * flags' nonce (the same on every rank: they all reserved this scratch at
 * the same call).  Kept so that a call costs a copy, not a recomputation. */
static symm_result_t gpu_coll_describe_scratch(symm_comm_t *comm, symm_gpu_t *g,
                                               const symm_tensor_t *scratch) {
  symm_coll_params_t *p = &g->base;
  memset(p, 0, sizeof *p);
  const int world = g->size;
  void *const *data = NULL;
  SYMM_CHECK(symm_tensor_peer_ptrs(scratch, &data));
  for (int r = 0; r < world; r++) {
    void *pad = NULL;
    SYMM_CHECK(symm_tensor_signal_pad(scratch, r, &pad));
    p->peer_data[r] = (uint64_t)(uintptr_t)data[r];
    p->peer_pad[r] = (uint64_t)(uintptr_t)pad;
  }
  const uint64_t S = symm_tensor_nbytes(scratch);
  if (S < gpu_coll_scratch_bytes(0))
    return symm_error(SYMM_ERR_INTERNAL, "%s collective: scratch of %llu bytes is smaller "
                      "than the LL and LL128 areas", g->name, (unsigned long long)S);
  p->ll_region = gpu_coll_ll_region(world);
  p->ll128_region = gpu_coll_ll128_region(world);
  p->stage_half = ((S - SYMM_COLL_STAGE_OFF) / 2) & ~(uint64_t)255;
  p->err = g->err_dev;
  p->timeout_ns = (uint64_t)symm_comm_timeout_ms(comm) * 1000000ull;
  /* The scratch's identity (its memory on every rank), not the time of the
   * first collective on it: ranks may rendezvous other tensors in between
   * in different orders relative to their (asynchronous) collectives. */
  const char *prefix = symm_comm_key_prefix(comm);
  uint64_t f[2] = {symm_tensor_peer_sig(scratch), S};
  uint64_t h = symm_hash64(f, sizeof f, symm_hash64(prefix, strlen(prefix), 7));
  p->nonce = (uint32_t)(h ^ (h >> 32));
  p->rank = g->rank;
  p->world = world;
  p->channels = (int32_t)symm_coll_channels((unsigned)world);
  if (p->channels < 1)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s backend: no signal channels for %d ranks",
                      g->name, world);
  g->scratch = scratch;
  return SYMM_SUCCESS;
}

bool gpu_coll_symm_range(symm_comm_t *comm, const symm_gpu_t *g, const void *ptr,
                         uint64_t bytes, uint64_t peer[SYMM_COLL_MAX_WORLD], uint64_t *key) {
  symm_tensor_t *t;
  int rank;
  size_t offset;
  if (!ptr || !symm_tensor_find(ptr, &t, &rank, &offset)) return false;
  void *const *peer_data = symm_tensor_peer_data(t);
  if (symm_tensor_comm(t) != comm || !symm_tensor_is_rendezvoused(t) || rank != g->rank ||
      !peer_data)
    return false;
  const uint64_t off = offset, nbytes = symm_tensor_nbytes(t);
  if (off > nbytes || bytes > nbytes - off) return false;
  for (int r = 0; r < g->size; r++) {
    if (!peer_data[r]) return false; /* not load/store reachable */
    peer[r] = (uint64_t)(uintptr_t)peer_data[r] + off;
  }
  uint64_t f[2] = {symm_tensor_peer_sig(t), off};
  *key = symm_hash64(f, sizeof f, 0x7a63ull);
  return true;
}

/* Two-shot (its reduced segments) and all-gather (its pieces) write
 * straight into the peers' recv when recv lies in a rendezvoused tensor of
 * this communicator: p->zc is a key of the tensor and offset, and
 * p->peer_recv every rank's mapping of recv.  The kernel uses them only if
 * every rank announces the same key, so ranks that pass ordinary memory
 * (or another offset) still work, staged. */
static void gpu_coll_zero_copy(symm_comm_t *comm, const symm_gpu_t *g,
                               const symm_coll_args_t *args, symm_coll_params_t *p) {
  uint64_t h = 0;
  p->zc = 0;
  p->zc_key = 0;
  if (!gpu_coll_symm_range(comm, g, args->recvbuf, args->recv_bytes, p->peer_recv, &h)) return;
  p->zc = (uint32_t)(h ^ (h >> 32)) | 1u;
  p->zc_key = h;
}

/*
 * The parameters a launch starts from: the scratch's (g->base), on a
 * scratch with at least `stage` staging bytes per half.  The size depends
 * only on the arguments, so every rank grows the scratch (collectively) at
 * the same call; reserve it before capturing graphs.  Nothing is agreed
 * first (the kernels check the call), so a rank whose arguments differ so
 * that it need not grow never joins the growth: a timeout, which the
 * message explains.
 */
symm_result_t gpu_coll_base(symm_comm_t *comm, symm_gpu_t *g, uint64_t stage,
                            symm_coll_params_t *p) {
  symm_tensor_t *scratch = NULL;
  symm_result_t res = symm_comm_scratch(comm, gpu_coll_scratch_bytes(stage), &scratch);
  if (res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_PEER_LOST)
    symm_error_context("ranks whose calls differ grow the scratch at different calls; "
                       "symm_comm_reserve_scratch up front makes that a mismatch");
  if (res != SYMM_SUCCESS) return res;
  if (g->scratch != scratch) SYMM_CHECK(gpu_coll_describe_scratch(comm, g, scratch));
  *p = g->base;
  if (p->stage_half < stage)
    return symm_error(SYMM_ERR_INTERNAL, "%s collective: scratch of %zu bytes holds %llu "
                      "staging bytes, %llu needed", g->name, symm_tensor_nbytes(scratch),
                      (unsigned long long)p->stage_half, (unsigned long long)stage);
  return SYMM_SUCCESS;
}

/* Launches collective kernel fn (`what` names it) in the GPU's context. */
static symm_result_t gpu_coll_run(symm_gpu_t *g, ncu_function fn, unsigned grid,
                                  unsigned threads, void *stream, symm_coll_params_t *p,
                                  const char *what) {
  ncu_context saved;
  SYMM_CHECK(symm_gpu_enter(g, &saved));
  ncu_result cu = gpu_launch(g, fn, grid, threads, stream, p);
  symm_gpu_leave(g, saved);
  if (cu != NCU_SUCCESS)
    return symm_gpu_fail(cu, "cuLaunchKernel(%s collective, %u blocks of %u threads)", what,
                         grid, threads);
  return SYMM_SUCCESS;
}

/* The launch shape of kernel `kind` for the call in p. */
static unsigned gpu_coll_shape(const symm_gpu_t *g, int kind, const symm_coll_params_t *p,
                               uint64_t es, unsigned *threads) {
  unsigned grid;
  *threads = SYMM_COLL_THREADS;
  switch (kind) {
    case SYMM_COLL_KERNEL_AR_LL: /* a packet per thread and pass */
      grid = gpu_coll_ll_launch(g, (p->count * es + 7) / 8, 1, threads);
      break;
    case SYMM_COLL_KERNEL_AR_LL128: /* a line per 8 threads and pass */
      grid = gpu_coll_ll_launch(g, gpu_coll_ll128_lines(p->count * es), 8, threads);
      break;
    case SYMM_COLL_KERNEL_AR_TWO_SHOT:
      grid = gpu_coll_grid(p->seg * es, 8192, gpu_coll_bw_blocks(kind, p->channels, p->seg * es));
      break;
    default:
      grid = gpu_coll_grid(p->count * es, 8192, gpu_coll_bw_blocks(kind, p->channels, 0));
      break;
  }
  if (g->max_blocks && grid > g->max_blocks) grid = g->max_blocks;
  return grid < 1 ? 1 : grid; /* count 0 */
}

/* An all-to-all-v refused on this rank with res (its message kept), after
 * meeting the peers as a call refused by the core does (gpu_abstain). */
static symm_result_t gpu_a2av_refuse(symm_comm_t *comm, const symm_coll_args_t *args,
                                     symm_result_t res) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  (void)gpu_abstain(comm, args);
  symm_error_restore(saved);
  return res;
}

/*
 * All-to-all-v (gpu_coll_a2av.c): staged in the scratch as it is (made at
 * its default size if there is none yet), never grown, since the need
 * differs by rank.  A rank whose rows do not fit still runs the kernel,
 * which stages nothing and tells every peer why (each fails the call
 * through symm_comm_check_async_error), and returns the error here too.
 */
static symm_result_t gpu_coll_a2av(symm_comm_t *comm, symm_gpu_t *g,
                                   const symm_coll_args_t *args) {
  gpu_a2av_layout_t l;
  symm_result_t res = gpu_a2av_check(g, args, &l);
  if (res != SYMM_SUCCESS) return gpu_a2av_refuse(comm, args, res);
  ncu_function fn = NULL;
  SYMM_CHECK(gpu_coll_function(g, SYMM_COLL_KERNEL_ALL_TO_ALL_V, 0, 0, &fn));
  symm_coll_params_t p;
  SYMM_CHECK(gpu_coll_base(comm, g, 0, &p));
  gpu_a2av_fill(g, args, &l, &p);
  const char *fname = gpu_a2av_name(args->v);
  if (p.stage_half < l.data_off)
    return gpu_a2av_refuse(comm, args, symm_error(SYMM_ERR_STATE, "%s: the collective scratch "
                           "holds %llu staging bytes, less than the %llu of the call's tables: "
                           "reserve more with symm_comm_reserve_scratch", fname,
                           (unsigned long long)p.stage_half, (unsigned long long)l.data_off));
  res = SYMM_SUCCESS;
  if (p.stage_half < l.stage) {
    p.v.refused = SYMM_COLL_WHY_SCRATCH;
    res = symm_error(SYMM_ERR_STATE, "%s: rank %d stages %llu bytes (%zu send rows of %llu "
                     "bytes, and tables), its collective scratch holds %llu; all-to-all-v does "
                     "not grow the scratch (the need differs by rank): reserve "
                     "symm_comm_scratch_bytes of the largest buffer with "
                     "symm_comm_reserve_scratch first; every rank fails this call "
                     "(symm_comm_check_async_error)", fname, g->rank,
                     (unsigned long long)l.stage, args->v->send_rows,
                     (unsigned long long)p.v.row_bytes, (unsigned long long)p.stage_half);
  }
  p.sig = gpu_coll_sig(args, SYMM_COLL_KERNEL_ALL_TO_ALL_V, l.grid, SYMM_COLL_THREADS);
  SYMM_CHECK(gpu_coll_run(g, fn, l.grid, SYMM_COLL_THREADS, args->stream, &p, "all_to_all_v"));
  return res;
}

symm_result_t gpu_collective(symm_comm_t *comm, const symm_coll_args_t *args) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  if (args->kind == SYMM_COLL_ALL_TO_ALL_V) return gpu_coll_a2av(comm, g, args);
  const uint64_t es = symm_dtype_size(args->dtype);
  const uint64_t count = args->count;

  uint64_t seg = 0, stage = 0;
  int kind = gpu_coll_plan(g, args->kind, args->algo, count, es, g->size, &seg, &stage);
  if (kind < 0)
    return symm_error(SYMM_ERR_INTERNAL, "%s collective: kind %d", g->name, (int)args->kind);
  ncu_function fn = NULL;
  SYMM_CHECK(gpu_coll_function(g, kind, (int)args->dtype, (int)args->op, &fn));
  symm_coll_params_t p;
  SYMM_CHECK(gpu_coll_base(comm, g, stage, &p));
  const bool has_send = args->kind != SYMM_COLL_BROADCAST || g->rank == args->root;
  p.root = args->root;
  p.esize = (int32_t)es;
  p.kind = kind;
  p.send = has_send ? (uint64_t)(uintptr_t)args->sendbuf : 0;
  p.recv = (uint64_t)(uintptr_t)args->recvbuf;
  p.count = count;
  p.seg = seg;
  bool vec = aligned16(p.recv) && (!has_send || aligned16(p.send));
  if (kind == SYMM_COLL_KERNEL_REDUCE_SCATTER || kind == SYMM_COLL_KERNEL_ALL_TO_ALL ||
      kind == SYMM_COLL_KERNEL_ALL_GATHER)
    vec = vec && aligned16(count * es);
  p.vec = vec;
  unsigned threads;
  const unsigned grid = gpu_coll_shape(g, kind, &p, es, &threads);
  p.sig = gpu_coll_sig(args, kind, grid, threads);
  /* All-gather waits for every announce before it moves data when it may
   * write into the peers' recv: worth it from 1 MiB of output. */
  if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT ||
      (kind == SYMM_COLL_KERNEL_ALL_GATHER && args->recv_bytes >= ((uint64_t)1 << 20)))
    gpu_coll_zero_copy(comm, g, args, &p);

  return gpu_coll_run(g, fn, grid, threads, args->stream, &p, gpu_coll_kernel_names[kind]);
}

/* A call that failed the core's argument checks on this rank still takes
 * part (engine abstain): one block with a signature no valid call has meets
 * the peers, so that their call ends in SYMM_ERR_MISMATCH (and this rank's
 * device epoch stays in step with theirs) instead of pairing with this
 * rank's next call.  It moves no data and touches no buffer of the call;
 * its own kernel records the mismatch as well. */
symm_result_t gpu_abstain(symm_comm_t *comm, const symm_coll_args_t *args) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  ncu_function fn = NULL;
  SYMM_CHECK(gpu_coll_function(g, SYMM_COLL_KERNEL_ALL_GATHER, 0, 0, &fn));
  symm_coll_params_t p;
  SYMM_CHECK(gpu_coll_base(comm, g, 0, &p));
  p.kind = SYMM_COLL_KERNEL_ALL_GATHER;
  p.esize = 1;
  p.vec = 1;
  p.sig = SYMM_COLL_SIG_REFUSED;
  return gpu_coll_run(g, fn, 1, SYMM_COLL_THREADS, args->stream, &p, "refused");
}
