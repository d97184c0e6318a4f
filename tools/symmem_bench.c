/*
 * symmem-bench: time symmem's collectives over a sweep of sizes and print
 * them the way nccl-tests does, so that people and scripts that read those
 * tables read ours.
 *
 *   symmem-run -n N -- symmem-bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
 *       [-w WARMUP] [-c 0|1] [--coll C] [--skew S] [--op OP] [--dtype T]
 *       [--algo A] [--inplace 0|1] [--root R] [-g GROUPS] [--graph]
 *       [--csv|--json] [--plot FILE.png]
 *
 * Every rank runs the same sweep; rank 0 prints.  Per size: `warmup` calls,
 * a barrier, then `iters` calls back to back; the time is the mean per call
 * of the slowest rank (each rank posts its own mean in the job's store,
 * rank 0 takes the maximum, so no collective of ours is needed to report).
 * With -g the ranks split into groups of consecutive ranks, each group runs
 * the sweep on its own communicator, and the barrier before each timed loop
 * is the whole job's, so that the groups run side by side; rank 0 prints a
 * row per group.
 * With -c 1 the buffers are then filled with deterministic per-rank data,
 * one more call runs (with --graph: one replay of a graph capturing it),
 * and every received value is compared with a reference computed here;
 * mismatches are the #wrong column.
 *
 * On GPU backends (CUDA builds) the calls go on one stream and are timed
 * with CUDA events, eagerly or (--graph) captured in one CUDA graph; when
 * libnccl loads, the same calls through NCCL on the same buffers and stream
 * give the nccl_time and ratio columns.
 *
 * Exit status: 0; 1 when a call fails, a value is wrong, or the plot cannot
 * be made (the table is printed first); 2 for usage errors.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "symmem_bench.h"
#include "symmem_bench_split.h"
#include "tool_common.h"

static double now_us(void) { return (double)tool_now_ns() / 1e3; }

/* ---- sizes and buffers */

/* Where an all-to-all-v's receive buffer starts in the symmetric tensor,
 * in elements: past the n elements of send data, on a 64-element line. */
static size_t a2av_recv_at(size_t n) { return (n + 63) & ~(size_t)63; }

/* all_to_all_v: every rank sends n elements, split over the ranks by the
 * shares of symmem_bench_split.h and packed in rank order; it receives its
 * own count from every rank, packed in rank order. */
static void split_layout(bench_t *b, size_t n, layout_t *l) {
  size_t world = (size_t)b->size, *sc = b->split, *sd = sc + world, *rc = sd + world,
         *rd = rc + world, largest = 0;
  bench_split_counts(n, b->size, b->opt.skew, b->shares, sc);
  for (size_t p = 0; p < world; p++) {
    sd[p] = p ? sd[p - 1] + sc[p - 1] : 0;
    rc[p] = sc[b->rank];
    rd[p] = p * sc[b->rank];
    if (sc[p] > largest) largest = sc[p];
  }
  l->count = l->send_elems = l->total_elems = n;
  l->recv_elems = world * sc[b->rank];
  /* The hottest rank's; a symmetric tensor holds the send data and, after
   * it, the receive buffer (see layout_for). */
  l->most_elems = b->opt.inplace ? a2av_recv_at(n) + world * largest
                                 : n > world * largest ? n : world * largest;
  l->send_counts = sc;
  l->send_displs = sd;
  l->recv_counts = rc;
  l->recv_displs = rd;
}

/* Counts and buffers for `bytes`, following nccl-tests: the size is the
 * whole result; gathers and scatters split it over the ranks (at least one
 * element each); all_to_all_v's is what each rank sends. */
static layout_t layout_for(bench_t *b, size_t bytes) {
  size_t n = bytes / b->esize, world = (size_t)b->size;
  if (n == 0) n = 1;
  layout_t l = {0};
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE:
  case BENCH_BROADCAST:
    l.count = l.send_elems = l.recv_elems = l.total_elems = n;
    break;
  case BENCH_ALL_GATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALL_TO_ALL:
    l.count = n / world ? n / world : 1;
    l.total_elems = l.count * world;
    l.send_elems = b->opt.coll == BENCH_ALL_GATHER ? l.count : l.total_elems;
    l.recv_elems = b->opt.coll == BENCH_REDUCE_SCATTER ? l.count : l.total_elems;
    break;
  case BENCH_ALL_TO_ALL_V: split_layout(b, n, &l); break;
  default: break;
  }
  if (b->opt.coll != BENCH_ALL_TO_ALL_V)
    l.most_elems = l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems;
  if (!b->opt.inplace) {
    l.send = b->send_base;
    l.recv = b->recv_base;
    return l;
  }
  /* In place as nccl-tests and NCCL define it: gathers send from their own
   * slot of the result, scatters receive into their own slot of the input.
   * All-to-all-v, whose sizes differ by rank, sends and receives apart in
   * the tensor, as MoE dispatch and combine do (peers then read the send
   * data where it lies). */
  unsigned char *base = symm_tensor_data(b->tensor);
  size_t slot = (size_t)b->rank * l.count * b->esize;
  l.send = l.recv = base;
  if (b->opt.coll == BENCH_ALL_GATHER) l.send = base + slot;
  if (b->opt.coll == BENCH_REDUCE_SCATTER) l.recv = base + slot;
  if (b->opt.coll == BENCH_ALL_TO_ALL_V) l.recv = base + a2av_recv_at(l.count) * b->esize;
  return l;
}

/* The sizes of the sweep, each once (rounding can make neighbours equal). */
static int sweep_sizes(bench_t *b, size_t *sizes) {
  int n = 0;
  size_t last = 0;
  for (size_t s = b->opt.min_bytes; s <= b->opt.max_bytes && n < BENCH_MAX_SIZES;) {
    layout_t l = layout_for(b, s);
    size_t bytes = l.total_elems * b->esize;
    if (bytes != last) sizes[n++] = s;
    last = bytes;
    if (s > b->opt.max_bytes / b->opt.step_factor) break;
    s *= b->opt.step_factor;
  }
  return n;
}

static void alloc_buffers(bench_t *b, const size_t *sizes, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    layout_t l = layout_for(b, sizes[i]);
    if (l.most_elems > most) most = l.most_elems;
  }
  b->buf_bytes = most * b->esize;
  if (b->opt.inplace) {
    int64_t numel = (int64_t)most;
    BENCH_CHECK(symm_tensor_alloc(b->comm, &numel, 1, b->opt.dtype, &b->tensor));
    BENCH_CHECK(symm_tensor_rendezvous(b->tensor));
  } else {
    b->send_base = mem_alloc(b, b->buf_bytes);
    b->recv_base = mem_alloc(b, b->buf_bytes);
  }
  b->host_data = malloc(b->buf_bytes);
  b->host_result = malloc(b->buf_bytes);
  if (!b->host_data || !b->host_result) bench_die("out of memory for %zu-byte staging", b->buf_bytes);
  /* Ordinary memory is staged through the communicator's scratch; growing
   * it is collective and must not happen inside a timed loop or a graph
   * (and GPU all-to-all-v never grows it): what every collective on these
   * buffers needs (symm_comm_scratch_bytes), before the first. */
  size_t need = 0;
  BENCH_CHECK(symm_comm_scratch_bytes(b->comm, b->buf_bytes, &need));
  BENCH_CHECK(symm_comm_reserve_scratch(b->comm, need));
}

static void free_buffers(bench_t *b) {
  symm_tensor_free(b->tensor);
  mem_free(b, b->send_base);
  mem_free(b, b->recv_base);
  free(b->host_data);
  free(b->host_result);
}

/* ---- one call */

static symm_result_t run_symm(bench_t *b, const layout_t *l) {
  const bench_options_t *o = &b->opt;
  switch (o->coll) {
  case BENCH_ALL_REDUCE:
    return symm_all_reduce(b->comm, l->send, l->recv, l->count, o->dtype, o->op, b->stream);
  case BENCH_ALL_GATHER:
    return symm_all_gather(b->comm, l->send, l->recv, l->count, o->dtype, b->stream);
  case BENCH_REDUCE_SCATTER:
    return symm_reduce_scatter(b->comm, l->send, l->recv, l->count, o->dtype, o->op, b->stream);
  case BENCH_BROADCAST:
    return symm_broadcast(b->comm, l->send, l->recv, l->count, o->dtype, o->root, b->stream);
  case BENCH_ALL_TO_ALL:
    return symm_all_to_all(b->comm, l->send, l->recv, l->count, o->dtype, b->stream);
  case BENCH_ALL_TO_ALL_V:
    return symm_all_to_all_v(b->comm, l->send, l->send_counts, l->send_displs, l->recv,
                             l->recv_counts, l->recv_displs, o->dtype, b->stream);
  default: return SYMM_ERR_INVALID_ARG;
  }
}

static void call_symm(bench_t *b, const layout_t *l) {
  symm_result_t r = run_symm(b, l);
  if (r != SYMM_SUCCESS)
    bench_die("symm_%s of %zu x %s failed: %s (%s)", coll_names[b->opt.coll], l->count,
              symm_dtype_name(b->opt.dtype), symm_strerror(r), symm_last_error());
}

/* Called with this rank's queue empty, just before its clock starts: ranks
 * reach a size's timed loop at different moments (rank 0 was printing the
 * previous row), and the first calls of an early rank would time the wait
 * for the late one.  Outside the timed region, as in nccl-tests.  The
 * whole job's barrier: with -g every group starts at once. */
static void start_together(bench_t *b) { BENCH_CHECK(symm_comm_barrier(b->world)); }

#ifdef SYMM_HAVE_CUDA
/* Captures n calls into a CUDA graph, instantiates it and replays it once
 * (the first replay also uploads the graph). */
static void graph_capture_replay(bench_t *b, const layout_t *l, bool nccl, int n,
                                 cudaGraph_t *graph, cudaGraphExec_t *exec) {
  cudaStream_t s = (cudaStream_t)b->stream;
  BENCH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  BENCH_CUDA_CHECK(cudaStreamEndCapture(s, graph));
  BENCH_CUDA_CHECK(cudaGraphInstantiateWithFlags(exec, *graph, 0));
  BENCH_CUDA_CHECK(cudaGraphLaunch(*exec, s));
  bench_sync(b);
}

/* Mean µs per call on this rank's stream, eagerly or replaying a graph of
 * `iters` captured calls. */
static double gpu_time_us(bench_t *b, const layout_t *l, bool nccl) {
  cudaStream_t s = (cudaStream_t)b->stream;
  for (int i = 0; i < b->opt.warmup; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  bench_sync(b);
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (b->opt.graph) graph_capture_replay(b, l, nccl, b->opt.iters, &graph, &exec);
  start_together(b);
  BENCH_CUDA_CHECK(cudaEventRecord(start, s));
  if (exec) {
    BENCH_CUDA_CHECK(cudaGraphLaunch(exec, s));
  } else {
    for (int i = 0; i < b->opt.iters; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  }
  BENCH_CUDA_CHECK(cudaEventRecord(stop, s));
  bench_sync(b);
  float ms = 0;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return (double)ms * 1e3 / b->opt.iters;
}
#endif

static double host_time_us(bench_t *b, const layout_t *l) {
  for (int i = 0; i < b->opt.warmup; i++) call_symm(b, l);
  start_together(b);
  double t0 = now_us();
  for (int i = 0; i < b->opt.iters; i++) call_symm(b, l);
  return (now_us() - t0) / b->opt.iters;
}

static double time_symm(bench_t *b, const layout_t *l) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) return gpu_time_us(b, l, false);
#endif
  return host_time_us(b, l);
}

/* The checked call, made the way the timed ones were: eagerly, or with
 * --graph one replay of a CUDA graph that captured it (a captured call can
 * go wrong where an eager one does not). */
static void call_checked(bench_t *b, const layout_t *l) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b) && b->opt.graph) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    graph_capture_replay(b, l, false, 1, &graph, &exec);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return;
  }
#endif
  call_symm(b, l);
}

/* ---- reporting through the store */

/* Keys by world rank: rank 0 reads every group's. */
static void post_report(bench_t *b, int index, const rank_report_t *rep) {
  char key[64];
  snprintf(key, sizeof key, "bench/report/%d/%d", index, b->world_rank);
  BENCH_CHECK(symm_store_set(b->store, key, rep, sizeof *rep));
}

/* Rank 0: the reports of size `index` of group g's ranks, combined. */
static void collect_reports(bench_t *b, int index, int g, rank_report_t *all) {
  *all = (rank_report_t){0, -1, 0};
  for (int r = g * b->size; r < (g + 1) * b->size; r++) {
    char key[64];
    snprintf(key, sizeof key, "bench/report/%d/%d", index, r);
    rank_report_t rep;
    size_t len = 0;
    BENCH_CHECK(symm_store_get(b->store, key, &rep, sizeof rep, &len, -1));
    if (len != sizeof rep) bench_die("store key %s holds %zu bytes, not a report", key, len);
    symm_store_delete(b->store, key);
    if (rep.time_us > all->time_us) all->time_us = rep.time_us;
    if (rep.nccl_us > all->nccl_us) all->nccl_us = rep.nccl_us;
    all->wrong = rep.wrong < 0 || all->wrong < 0 ? -1 : all->wrong + rep.wrong;
  }
}

/* ---- main */

static void setup_device(bench_t *b) {
  if (!on_gpu(b)) return;
#ifdef SYMM_HAVE_CUDA
  BENCH_CUDA_CHECK(cudaSetDevice(b->device));
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  b->stream = s;
#endif
}

static void gather_devices(bench_t *b) {
  char key[64];
  snprintf(key, sizeof key, "bench/device/%d", b->world_rank);
  BENCH_CHECK(symm_store_set(b->store, key, &b->device, sizeof b->device));
  if (b->world_rank != 0) return;
  b->devices = calloc((size_t)b->world_size, sizeof *b->devices);
  if (!b->devices) bench_die("out of memory");
  for (int r = 0; r < b->world_size; r++) {
    size_t len;
    snprintf(key, sizeof key, "bench/device/%d", r);
    BENCH_CHECK(symm_store_get(b->store, key, &b->devices[r], sizeof b->devices[r], &len, -1));
  }
}

/* Settings that only make sense on some backends, or with enough ranks;
 * refused on rank 0 with the reason, quietly elsewhere. */
static int refuse_unfit_setup(bench_t *b) {
  const char *why = NULL;
  char buf[256];
  if (b->opt.graph && !on_gpu(b))
    why = "--graph captures calls in a CUDA graph, which needs a GPU backend; the host "
          "backend runs every call synchronously (drop --graph)";
#ifndef SYMM_HAVE_CUDA
  if (on_gpu(b)) why = "this symmem-bench was built without CUDA; GPU backends need a CUDA build";
#endif
  int rc = -1, groups = b->opt.groups, per = b->world_size / groups;
  buf[0] = 0;
  if (b->world_size % groups)
    snprintf(buf, sizeof buf, "-g %d does not divide the %d ranks of this job into groups of "
             "equal size", groups, b->world_size);
  else if (b->opt.root >= per && groups > 1)
    snprintf(buf, sizeof buf, "--root %d is not a rank of this job's %d-rank groups",
             b->opt.root, per);
  else if (b->opt.root >= per)
    snprintf(buf, sizeof buf, "--root %d is not a rank of this %d-rank job", b->opt.root, per);
  if (buf[0]) {
    rc = b->world_rank == 0 ? usage_error("%s", buf) : BENCH_EXIT_USAGE;
  } else if (why) {
    if (b->world_rank == 0) fprintf(stderr, "symmem-bench: %s\n", why);
    rc = BENCH_EXIT_FAIL;
  }
  /* The other ranks wait for rank 0's message: a launcher stops the job as
   * soon as one rank fails, and would cut it off. */
  if (rc >= 0) symm_comm_barrier(b->world);
  return rc;
}

/* -g: this rank's group of consecutive ranks, its own communicator. */
static void join_group(bench_t *b) {
  b->comm = b->world;
  b->rank = b->world_rank;
  b->size = b->world_size;
  b->group = 0;
  if (b->opt.groups == 1) return;
  int per = b->world_size / b->opt.groups;
  b->group = b->world_rank / per;
  BENCH_CHECK(symm_comm_split(b->world, b->group, b->world_rank, &b->comm));
  b->rank = symm_comm_rank(b->comm);
  b->size = symm_comm_size(b->comm);
}

/* Rank 0: the row of group g for size number `index` (layout l). */
static size_result_t *record(bench_t *b, const layout_t *l, int index, int g) {
  const bench_options_t *o = &b->opt;
  rank_report_t all;
  collect_reports(b, index, g, &all);
  size_result_t *r = &b->results[b->n_results++];
  r->bytes = l->total_elems * b->esize;
  r->count = l->total_elems;
  r->time_us = all.time_us;
  r->algbw = all.time_us > 0 ? (double)r->bytes / (all.time_us * 1e3) : 0;
  r->busbw = r->algbw * bus_factor(b);
  r->wrong = o->check ? all.wrong : -1;
  r->nccl_us = all.nccl_us;
  r->algo = "-";
  r->group = g;
  symm_algo_t algo;
  if (o->coll == BENCH_ALL_REDUCE &&
      symm_all_reduce_algo(b->comm, l->count, o->dtype, &algo) == SYMM_SUCCESS)
    r->algo = symm_algo_name(algo);
  else if (o->coll != BENCH_REDUCE_SCATTER && symm_comm_copy_algo(b->comm, &algo) ==
           SYMM_SUCCESS && algo == SYMM_ALGO_CE)
    r->algo = symm_algo_name(algo);
  return r;
}

static int run_sweep(bench_t *b, const size_t *sizes, int n_sizes) {
  const bench_options_t *o = &b->opt;
  int64_t wrong_total = 0;
  double busbw_sum = 0;
  if (b->world_rank == 0 && o->format == BENCH_TABLE) print_table_header(b);
  if (b->world_rank == 0 && o->format == BENCH_CSV) print_csv_header(b);
  for (int i = 0; i < n_sizes; i++) {
    layout_t l = layout_for(b, sizes[i]);
    rank_report_t rep = {time_symm(b, &l), -1, -1};
#ifdef SYMM_HAVE_CUDA
    if (b->nccl.used) rep.nccl_us = gpu_time_us(b, &l, true);
#endif
    if (o->check) rep.wrong = check_once(b, &l, call_checked);
    post_report(b, i, &rep);
    if (b->world_rank != 0) continue;
    for (int g = 0; g < o->groups; g++) {
      size_result_t *r = record(b, &l, i, g);
      if (r->wrong > 0) wrong_total += r->wrong;
      busbw_sum += r->busbw;
      if (o->format == BENCH_TABLE) print_table_row(b, r);
      if (o->format == BENCH_CSV) print_csv_row(b, r);
    }
  }
  if (b->world_rank != 0) return 0;
  double avg = b->n_results ? busbw_sum / b->n_results : 0;
  if (o->format == BENCH_TABLE) {
    if (o->check)
      printf("# Out of bounds values : %lld %s\n", (long long)wrong_total,
             wrong_total ? "FAILED" : "OK");
    else printf("# Out of bounds values : N/A (-c 0)\n");
    printf("# Avg bus bandwidth    : %.4f\n#\n", avg);
    fflush(stdout);
  }
  if (o->format == BENCH_JSON) print_json(b, wrong_total, avg);
  if (wrong_total) {
    fprintf(stderr, "symmem-bench: %lld wrong values\n", (long long)wrong_total);
    return BENCH_EXIT_FAIL;
  }
  return 0;
}

/* What a run holds besides its buffers: all_to_all_v's split, rank 0's
 * rows. */
static void alloc_state(bench_t *b, int n_sizes) {
  b->split = calloc(4 * (size_t)b->size, sizeof *b->split);
  b->shares = calloc((size_t)b->size, sizeof *b->shares);
  b->results = calloc((size_t)n_sizes * (size_t)b->opt.groups + 1, sizeof *b->results);
  if (!b->split || !b->shares || !b->results) bench_die("out of memory");
  bench_split_shares(b->size, b->opt.skew, b->shares);
}

static void free_state(bench_t *b) {
  free(b->split);
  free(b->shares);
  free(b->results);
  free(b->devices);
}

/* symm_comm_init and what the run needs of it; -1 to go on, else the exit
 * status. */
static int start(bench_t *b) {
  symm_result_t res = symm_comm_init(NULL, &b->world);
  if (res != SYMM_SUCCESS) {
    fprintf(stderr, "symmem-bench: symm_comm_init: %s (%s)\n", symm_strerror(res),
            symm_last_error());
    return BENCH_EXIT_FAIL;
  }
  b->world_rank = b->rank = symm_comm_rank(b->world);
  bench_set_rank(b->world_rank);
  b->world_size = b->size = symm_comm_size(b->world);
  b->device = symm_comm_device(b->world);
  b->store = symm_comm_store(b->world);
  b->esize = symm_dtype_size(b->opt.dtype);
  int rc = refuse_unfit_setup(b);
  if (rc >= 0) {
    symm_comm_destroy(b->world);
    return rc;
  }
  join_group(b);
  setup_device(b);
  /* Without --algo the communicator keeps what SYMM_ALLREDUCE_ALGO chose
   * (symm_comm_init checked the name), and the header says so. */
  if (!b->opt.algo_given)
    BENCH_CHECK(symm_comm_allreduce_algo(b->comm, &b->opt.algo));
  else if (b->opt.coll == BENCH_ALL_REDUCE || b->opt.coll == BENCH_REDUCE_SCATTER)
    BENCH_CHECK(symm_comm_set_allreduce_algo(b->comm, b->opt.algo)); /* ce: refused */
  else
    BENCH_CHECK(symm_comm_set_copy_algo(b->comm, b->opt.algo == SYMM_ALGO_CE ? SYMM_ALGO_CE
                                                                            : SYMM_ALGO_AUTO));
  return -1;
}

int main(int argc, char **argv) {
  bench_t b = {0};
  int rc = parse_options(argc, argv, &b.opt);
  if (rc >= 0) return rc;
  /* The GPU safety rule (README): NVLS stays off for NCCL (and for symmem's
   * own multicast, which honours the same variable). */
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  rc = start(&b);
  if (rc >= 0) return rc;
  size_t sizes[BENCH_MAX_SIZES];
  alloc_state(&b, BENCH_MAX_SIZES);
  int n_sizes = sweep_sizes(&b, sizes);
  gather_devices(&b);
  alloc_buffers(&b, sizes, n_sizes);
  nccl_setup(&b);
  measure_floor(&b);

  rc = run_sweep(&b, sizes, n_sizes);

  nccl_teardown(&b);
  bench_sync(&b);
  /* Rank 0 may serve the store (launchers other than symmem-run): nobody
   * leaves while another rank may still use it. */
  BENCH_CHECK(symm_comm_barrier(b.world));
  if (b.world_rank == 0 && b.opt.plot) {
    int prc = plot(&b);
    if (prc) rc = prc;
  }
  free_buffers(&b);
  free_state(&b);
  if (b.comm != b.world) symm_comm_destroy(b.comm);
  symm_comm_destroy(b.world);
  return rc;
}
