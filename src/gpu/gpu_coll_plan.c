/*
 * Planning the collectives: which kernel runs an all-reduce of a given
 * size (the AUTO thresholds and the closest relative of an algorithm that
 * cannot run), launch grids, and how much scratch each call stages.  Plain
 * arithmetic on the call and the communicator, the same on every rank, so
 * that every rank picks the same kernel and grows the scratch at the same
 * call.
 *
 * Buffers.  The reductions push each rank's input into the peers' staging
 * (the scratch tensor, double-buffered by the device epoch, see
 * coll_kernels.cu); LL and LL128 push packets into their own areas of it.
 * Outputs go straight into recvbuf (or, zero copy, the peers' recvbuf:
 * gpu_coll_launch.c).  The scratch always holds the LL and LL128 areas and
 * both staging halves.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdint.h>

#include "gpu/gpu.h"

const char *const gpu_coll_kernel_names[GPU_COLL_KINDS] = {
    NULL, "ar_one_shot", "ar_two_shot", "ar_ll", "reduce_scatter",
    "all_gather", "broadcast", "all_to_all", "ar_ll128", "all_to_all_v",
    "copy_engine"};

/* Kernels that reduce, one per dtype and op. */
bool gpu_coll_reducing(int kind) {
  return kind <= SYMM_COLL_KERNEL_REDUCE_SCATTER || kind == SYMM_COLL_KERNEL_AR_LL128;
}

unsigned gpu_coll_grid(uint64_t work_bytes, uint64_t per_block, unsigned channels) {
  uint64_t g = (work_bytes + per_block - 1) / per_block; /* 0 for count 0: the caller takes 1 */
  if (g > channels) g = channels;
  return (unsigned)g;
}

/*
 * Most blocks of a kernel that exchanges headers: one per channel, but
 * fewer move data faster at 2 ranks: 96 for two-shot and reduce-scatter,
 * 64 for all-gather, 88 for two-shot segments up to 32 MiB (measured with
 * bench/tune-native.sh; docs/tuning.md has the figures).  At 4 and more
 * ranks there are fewer channels than that.
 */
#define GPU_COLL_TWO_SHOT_SMALL_SEG ((uint64_t)32 << 20)
unsigned gpu_coll_bw_blocks(int kind, int channels, uint64_t seg_bytes) {
  unsigned most = kind == SYMM_COLL_KERNEL_ALL_GATHER ? 64u : 96u;
  if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT && seg_bytes <= GPU_COLL_TWO_SHOT_SMALL_SEG)
    most = 88u;
  return (unsigned)channels < most ? (unsigned)channels : most;
}

/* Bytes of one rank's LL region in one parity half of the LL area. */
uint64_t gpu_coll_ll_region(int world) {
  return (SYMM_COLL_LL_BYTES / 2 / (uint64_t)world) & ~(uint64_t)15;
}

/* 128-byte lines (120 data bytes each) that carry `bytes`. */
uint64_t gpu_coll_ll128_lines(uint64_t bytes) { return ((bytes + 7) / 8 + 14) / 15; }

/* Bytes of one rank's LL128 region in one parity half (whole lines). */
uint64_t gpu_coll_ll128_region(int world) {
  return (SYMM_COLL_LL128_BYTES / 2 / (uint64_t)world) & ~(uint64_t)127;
}

/*
 * Block size and grid of the LL kernels, which wait on packets, not on
 * channels: `units` packets (LL) or lines (LL128), `per_thread` threads to
 * a unit (1, or 8 for LL128's lines).  Many small blocks, so that a
 * megabyte goes in one pass: 256 threads and up to 1024 blocks, faster
 * from 1 MiB than 512 threads and 128 blocks and the same below
 * (docs/tuning.md).  Blocks wait
 * only for the peers' blocks of the same index, so a grid that the GPU
 * runs in waves is slower, not stuck; and programmatic dependent launch
 * starts the next kernel only once every block of this one has started.
 * SYMM_COLL_LL_THREADS and SYMM_COLL_MAX_BLOCKS override both.
 */
#define GPU_COLL_LL_THREADS 256u
unsigned gpu_coll_ll_launch(const symm_gpu_t *g, uint64_t units, unsigned per_thread,
                            unsigned *threads) {
  *threads = g->ll_threads ? g->ll_threads : GPU_COLL_LL_THREADS;
  return gpu_coll_grid(units * per_thread, *threads, GPU_COLL_LL_MAX_BLOCKS);
}

/* All-reduces above this size that ask for LL or LL128 but do not fit
 * their areas run two-shot, smaller ones one-shot. */
#define GPU_COLL_ONE_SHOT_MAX ((uint64_t)1 << 20)
/* LL128 that cannot run (PCIe) runs LL up to here (docs/tuning.md). */
#define GPU_COLL_LL_FALLBACK_MAX ((uint64_t)256 << 10)

/*
 * The all-reduce kernel for algorithm `algo` on `bytes` of data: the one
 * asked for where it can run, else its closest relative.  LL that does not
 * fit the LL area is LL128; LL128 runs only where every link delivers
 * 128-byte writes whole (g->ll128) and the lines fit its area, else LL
 * (up to 256 KiB), one-shot (to 1 MiB) or two-shot.  Depends on nothing
 * that differs between ranks, so every rank picks the same kernel.
 */
static int gpu_coll_allreduce_kernel(const symm_gpu_t *g, symm_algo_t algo, uint64_t bytes,
                                     int world) {
  /* Count 0 moves nothing but is still collective: one block exchanges the
   * headers and announces, so that a rank whose count differs gets
   * SYMM_ERR_MISMATCH, and the epoch advances with the peers'.  LL and
   * LL128 would look at no peer without packets: one-shot. */
  if (bytes == 0)
    return algo == SYMM_ALGO_TWO_SHOT ? SYMM_COLL_KERNEL_AR_TWO_SHOT : SYMM_COLL_KERNEL_AR_ONE_SHOT;
  /* LL packets carry 8 data bytes in 16. */
  const bool ll_fits = (bytes + 7) / 8 * 16 <= gpu_coll_ll_region(world);
  if (algo == SYMM_ALGO_TWO_SHOT) return SYMM_COLL_KERNEL_AR_TWO_SHOT;
  if (algo == SYMM_ALGO_LL) {
    if (ll_fits) return SYMM_COLL_KERNEL_AR_LL;
    algo = SYMM_ALGO_LL128;
  }
  if (algo == SYMM_ALGO_LL128) {
    if (g->ll128 && gpu_coll_ll128_lines(bytes) * 128 <= gpu_coll_ll128_region(world))
      return SYMM_COLL_KERNEL_AR_LL128;
    if (ll_fits && bytes <= GPU_COLL_LL_FALLBACK_MAX) return SYMM_COLL_KERNEL_AR_LL;
    if (bytes > GPU_COLL_ONE_SHOT_MAX) return SYMM_COLL_KERNEL_AR_TWO_SHOT;
  }
  return SYMM_COLL_KERNEL_AR_ONE_SHOT;
}

/* Scratch bytes for staging halves of `stage` bytes: the LL and LL128
 * areas, then two halves rounded to 256 bytes. */
uint64_t gpu_coll_scratch_bytes(uint64_t stage) {
  return SYMM_COLL_STAGE_OFF + 2 * ((stage + 255) & ~(uint64_t)255);
}

/*
 * All-to-all-v: every block keeps a table and working arrays of its own
 * in the staging half (coll_abi.h), one block per channel up to what
 * gpu_coll_bw_blocks allows, fewer where those would pass
 * SYMM_COLL_V_BLOCK_AREA (thousands of chunks), so that the staging need
 * of a call is at most that area plus its send buffer.
 */
void gpu_coll_a2av_layout(const symm_gpu_t *g, int world, int n_experts, uint64_t send_bytes,
                          gpu_a2av_layout_t *l) {
  const uint64_t chunks = (uint64_t)world * (uint64_t)n_experts;
  l->table_bytes = symm_coll_v_table_bytes(chunks);
  l->plan_bytes = symm_coll_v_plan_bytes(chunks, (uint64_t)n_experts);
  const uint64_t per = l->table_bytes + l->plan_bytes;
  uint64_t grid = gpu_coll_bw_blocks(SYMM_COLL_KERNEL_ALL_TO_ALL_V,
                                     (int)symm_coll_channels((unsigned)world), 0);
  if (grid > SYMM_COLL_V_BLOCK_AREA / per) grid = SYMM_COLL_V_BLOCK_AREA / per;
  if (g->max_blocks && grid > g->max_blocks) grid = g->max_blocks;
  l->grid = grid < 1 ? 1u : (unsigned)grid;
  l->data_off = (l->grid * per + 255) & ~(uint64_t)255;
  l->stage = l->data_off + send_bytes;
}

/*
 * The kernel (SYMM_COLL_KERNEL_*, -1 for an unknown collective) that runs
 * collective `coll` (SYMM_COLL_*; all-reduce with `algo`) on `count`
 * elements of es bytes, and the bytes of one staging half it uses (see
 * coll_kernels.cu for the layouts); *seg: two-shot's segment, one-shot's
 * region, in elements.  The one place that sizes staging, for the launch
 * and for symm_comm_scratch_bytes.
 */
int gpu_coll_plan(const symm_gpu_t *g, int coll, symm_algo_t algo, uint64_t count, uint64_t es,
                  int world, uint64_t *seg, uint64_t *stage) {
  const uint64_t W = (uint64_t)world, V = 16 / es ? 16 / es : 1;
  *seg = 0;
  *stage = 0; /* LL and LL128 have areas of their own */
  switch (coll) {
    case SYMM_COLL_ALL_REDUCE: {
      const int kind = gpu_coll_allreduce_kernel(g, algo, count * es, world);
      if (kind == SYMM_COLL_KERNEL_AR_TWO_SHOT) {
        *seg = ((count + W - 1) / W + V - 1) / V * V;
        *stage = 2 * W * *seg * es;
      } else if (kind == SYMM_COLL_KERNEL_AR_ONE_SHOT) {
        *seg = (count + 63) / 64 * 64;
        *stage = W * *seg * es;
      }
      return kind;
    }
    case SYMM_COLL_REDUCE_SCATTER: *stage = W * count * es; return SYMM_COLL_KERNEL_REDUCE_SCATTER;
    case SYMM_COLL_ALL_GATHER: *stage = count * es; return SYMM_COLL_KERNEL_ALL_GATHER;
    case SYMM_COLL_BROADCAST: *stage = count * es; return SYMM_COLL_KERNEL_BROADCAST;
    case SYMM_COLL_ALL_TO_ALL: *stage = W * count * es; return SYMM_COLL_KERNEL_ALL_TO_ALL;
    /* Staged per rank: gpu_coll_a2av_layout. */
    case SYMM_COLL_ALL_TO_ALL_V: return SYMM_COLL_KERNEL_ALL_TO_ALL_V;
    default: return -1;
  }
}

symm_result_t gpu_coll_usable(const symm_comm_t *comm, symm_gpu_t **g) {
  *g = symm_gpu_of(comm);
  if (!*g || !(*g)->ready)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s backend: GPU collectives unavailable: %s",
                      symm_comm_backend_name(comm), *g ? (*g)->why : "backend not started");
  if (symm_comm_size(comm) > SYMM_COLL_MAX_WORLD)
    return symm_error(SYMM_ERR_UNSUPPORTED, "%s backend: GPU collectives support at most "
                      "%d ranks (this communicator has %d)", (*g)->name, SYMM_COLL_MAX_WORLD,
                      symm_comm_size(comm));
  return SYMM_SUCCESS;
}

size_t gpu_scratch_fixed(symm_comm_t *comm) {
  const symm_gpu_t *g = symm_gpu_of(comm);
  /* The LL areas sit in every scratch before the staging halves. */
  return g && g->ready ? (size_t)SYMM_COLL_STAGE_OFF : 0;
}

/* What AUTO asks for: at 2 ranks LL is fastest to 64 KiB, LL128 to 4 MiB,
 * two-shot above (docs/tuning.md).  What does not fit the LL areas runs as
 * its closest relative (gpu_coll_allreduce_kernel: LL128, else LL up to
 * 256 KiB, then one- or two-shot).
 * More ranks: LL and LL128 push the whole buffer to each of the W - 1
 * peers, so LL's limit keeps each rank's pushed bytes where 2 ranks put
 * it (64 KiB / (W - 1)).  Two-shot pushes 2 (W - 1) / W of the buffer
 * whatever W, so LL128's share against it shrinks faster: its limit is
 * 8 MiB / (W (W - 1)), a cost model fitted to the 2-rank figures until
 * runs on 4 and 8 GPUs replace it. */
static symm_algo_t gpu_coll_auto(int world, size_t bytes) {
  const size_t peers = world > 1 ? (size_t)world - 1 : 1;
  if (bytes <= ((size_t)64 << 10) / peers) return SYMM_ALGO_LL;
  return bytes <= ((size_t)8 << 20) / (peers * (peers + 1)) ? SYMM_ALGO_LL128 : SYMM_ALGO_TWO_SHOT;
}

symm_algo_t gpu_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes) {
  const symm_gpu_t *g = symm_gpu_of(comm);
  const int world = symm_comm_size(comm);
  if (asked == SYMM_ALGO_AUTO) asked = gpu_coll_auto(world, bytes);
  if (!g) return asked;
  switch (gpu_coll_allreduce_kernel(g, asked, bytes, world)) {
    case SYMM_COLL_KERNEL_AR_LL: return SYMM_ALGO_LL;
    case SYMM_COLL_KERNEL_AR_LL128: return SYMM_ALGO_LL128;
    case SYMM_COLL_KERNEL_AR_TWO_SHOT: return SYMM_ALGO_TWO_SHOT;
    default: return SYMM_ALGO_ONE_SHOT;
  }
}

/* The most any collective plans on buffers of at most max_bytes: every
 * kind, every dtype size, one- and two-shot (what auto and the fallbacks
 * resolve to; LL and LL128 stage nothing), with the count that fills the
 * larger buffer.  A staging half grows with the count, so that is the need.
 * All-to-all-v stages its send buffer after its tables, which stay within
 * SYMM_COLL_V_BLOCK_AREA whatever its n_experts. */
symm_result_t gpu_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes) {
  symm_gpu_t *g = NULL;
  SYMM_CHECK(gpu_coll_usable(comm, &g));
  const uint64_t W = (uint64_t)g->size;
  /* Below this every product in gpu_coll_plan stays far from overflow. */
  if ((uint64_t)max_bytes > (uint64_t)INT64_MAX / (4 * W))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_scratch_bytes: %zu bytes overflow",
                      max_bytes);
  static const struct { int coll; symm_algo_t algo; bool per_rank; } calls[] = {
      {SYMM_COLL_ALL_REDUCE, SYMM_ALGO_ONE_SHOT, false},
      {SYMM_COLL_ALL_REDUCE, SYMM_ALGO_TWO_SHOT, false},
      {SYMM_COLL_BROADCAST, SYMM_ALGO_AUTO, false},
      {SYMM_COLL_REDUCE_SCATTER, SYMM_ALGO_AUTO, true}, /* send: world x count */
      {SYMM_COLL_ALL_GATHER, SYMM_ALGO_AUTO, true},     /* recv: world x count */
      {SYMM_COLL_ALL_TO_ALL, SYMM_ALGO_AUTO, true}};
  uint64_t most = 0;
  for (int dt = 0; dt < SYMM_DTYPE_COUNT_; dt++) {
    const uint64_t es = symm_dtype_size((symm_dtype_t)dt);
    for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
      uint64_t seg, stage;
      const uint64_t count = max_bytes / es / (calls[k].per_rank ? W : 1);
      gpu_coll_plan(g, calls[k].coll, calls[k].algo, count, es, g->size, &seg, &stage);
      if (stage > most) most = stage;
    }
  }
  if (SYMM_COLL_V_BLOCK_AREA + max_bytes > most) most = SYMM_COLL_V_BLOCK_AREA + max_bytes;
  *bytes = (size_t)gpu_coll_scratch_bytes(most);
  return SYMM_SUCCESS;
}
