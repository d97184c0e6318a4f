/*
 * GPU tests of the collectives (list-gpu-coll.h) on the native backend, or
 * the GPU backend that SYMM_BACKEND names.  A rank program (runner.c's rank
 * mode, gpu_harness.h), run under the launcher:
 *   SYMM_BACKEND=native symmem-run -n 2 -- symm-gpu-coll-tests [NAME...]
 *   SYMM_TIMEOUT_MS=3000 symmem-run -n 2 -- symm-gpu-coll-tests \
 *     gpu_coll_rank_never_calls
 * Every op x dtype x reduction against a host reference at odd sizes, the
 * all-reduce algorithms, in place and out of place, CUDA graph capture and
 * replay, mismatched calls (SYMM_ERR_MISMATCH on every rank), and a rank
 * that never calls (SYMM_ERR_TIMEOUT, no hang).  Inputs are small integers,
 * exact in every dtype, so results compare exactly whatever the order of
 * reduction.  Public API only, like an application.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_harness.h"
#include "symmem.h"

typedef struct coll {
  symm_comm_t *comm;
  int rank, size;
  cudaStream_t stream;
  symm_algo_t algo; /* the all-reduce algorithm set last (for messages) */
  void *recv_buf;   /* not NULL: run_case's recv (and in place, send) buffer */
  void *send_buf;   /* not NULL: run_case's send buffer where recv_buf is not it */
} coll_t;

/* The rank's communicator (gpu_harness.h) for a test of min_ranks ranks
 * or more; 0, or TEST_SKIP with the reason printed. */
static int coll_begin(coll_t *c, int min_ranks) {
  gpu_rank_t *g = NULL;
  memset(c, 0, sizeof *c);
  if (gpu_rank_get(SYMM_BACKEND_AUTO, min_ranks, &g)) return TEST_SKIP;
  c->comm = g->comm;
  c->rank = g->rank;
  c->size = g->size;
  c->stream = g->stream;
  c->algo = SYMM_ALGO_AUTO;
  return 0;
}

/* --------------------------------------------------- host-side values */

static bool is_unsigned(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_U8 || dt == SYMM_DTYPE_U16 || dt == SYMM_DTYPE_U32 ||
         dt == SYMM_DTYPE_U64;
}

static bool is_float(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_F16 || dt == SYMM_DTYPE_BF16 || dt == SYMM_DTYPE_F32 ||
         dt == SYMM_DTYPE_F64 || dt == SYMM_DTYPE_F8E4M3 || dt == SYMM_DTYPE_F8E5M2;
}

/* Element i of rank r's input (salt varies per case): small integers,
 * exact in every dtype, so that every order of reduction gives the same
 * exact sum; [0, 8] for unsigned dtypes, [-8, 8] otherwise; products ±1
 * with one rank's 2 (exact at any world size). */
static int value(int r, size_t i, int salt, symm_redop_t op, symm_dtype_t dt, int world) {
  if (op == SYMM_REDUCE_PROD) {
    if ((size_t)r == (i + (size_t)salt) % (size_t)world) return 2;
    return is_unsigned(dt) || ((i + (size_t)r) % 3) ? 1 : -1;
  }
  int v = (int)((i * 7 + (size_t)r * 13 + (size_t)salt * 5) % 17);
  return is_unsigned(dt) ? v / 2 : v - 8;
}

/* The binary formats narrower than f32: mantissa bits, exponent bias,
 * largest finite value, and whether they saturate there (FP8) rather than
 * overflow to Inf. */
typedef struct {
  int mbits, bias;
  double max_finite;
  bool saturates;
} fmt_t;
static const fmt_t fmt_f16 = {10, 15, 65504, false}, fmt_bf16 = {7, 127, 3.3895313892515355e38,
                                                                 false},
                   fmt_e4m3 = {3, 7, 448, true}, fmt_e5m2 = {2, 15, 57344, true};

static const fmt_t *fmt_of(symm_dtype_t dt) {
  switch (dt) {
    case SYMM_DTYPE_F16: return &fmt_f16;
    case SYMM_DTYPE_BF16: return &fmt_bf16;
    case SYMM_DTYPE_F8E4M3: return &fmt_e4m3;
    case SYMM_DTYPE_F8E5M2: return &fmt_e5m2;
    default: return NULL;
  }
}

/* v rounded to the format, to nearest even (rint, in the default mode). */
static double fmt_round(const fmt_t *f, double v) {
  if (v == 0 || isnan(v)) return v;
  double a = fabs(v);
  int e;
  (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
  int lead = e - 1 < 1 - f->bias ? 1 - f->bias : e - 1;
  double q = ldexp(1.0, lead - f->mbits);
  double r = rint(a / q) * q;
  if (r > f->max_finite) r = f->saturates ? f->max_finite : INFINITY;
  return v < 0 ? -r : r;
}

/* Bits of an exact value of the format (normal or zero). */
static uint32_t fmt_bits(const fmt_t *f, int ebits, double v) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 1u << (ebits + f->mbits) : 0;
  int e;
  double m = frexp(fabs(v), &e);
  return sign | (uint32_t)(e - 1 + f->bias) << f->mbits | (uint32_t)((m * 2 - 1) * (1 << f->mbits));
}

/* The value of bits of the format. */
static double fmt_value(const fmt_t *f, int ebits, uint32_t bits) {
  uint32_t emask = (1u << ebits) - 1, e = (bits >> f->mbits) & emask;
  uint32_t frac = bits & ((1u << f->mbits) - 1);
  double v = e == 0 ? ldexp((double)frac, 1 - f->bias - f->mbits)
                    : ldexp(1.0 + frac / (double)(1 << f->mbits), (int)e - f->bias);
  if (e == emask && ebits != 4) v = frac ? NAN : INFINITY; /* E4M3 has no Inf */
  return (bits >> (ebits + f->mbits)) & 1 ? -v : v;
}

static int ebits_of(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_BF16 ? 8 : dt == SYMM_DTYPE_F8E4M3 ? 4 : 5;
}

static void put(symm_dtype_t dt, void *buf, size_t i, double v) {
  const size_t es = symm_dtype_size(dt);
  const fmt_t *f = fmt_of(dt);
  char *p = (char *)buf + i * es;
  if (f) {
    uint32_t bits = fmt_bits(f, ebits_of(dt), v);
    memcpy(p, &bits, es); /* little-endian: the low bytes */
  } else if (dt == SYMM_DTYPE_F32) {
    float x = (float)v;
    memcpy(p, &x, 4);
  } else if (dt == SYMM_DTYPE_F64) {
    memcpy(p, &v, 8);
  } else {
    int64_t x = (int64_t)v; /* two's complement: the low bytes are the narrow value */
    memcpy(p, &x, es);
  }
}

static double get(symm_dtype_t dt, const void *buf, size_t i) {
  const size_t es = symm_dtype_size(dt);
  const fmt_t *f = fmt_of(dt);
  const char *p = (const char *)buf + i * es;
  if (f) {
    uint32_t bits = 0;
    memcpy(&bits, p, es);
    return fmt_value(f, ebits_of(dt), bits);
  }
  if (dt == SYMM_DTYPE_F32) {
    float x;
    memcpy(&x, p, 4);
    return x;
  }
  if (dt == SYMM_DTYPE_F64) {
    double x;
    memcpy(&x, p, 8);
    return x;
  }
  uint64_t u = 0;
  memcpy(&u, p, es);
  if (is_unsigned(dt)) return (double)u;
  int shift = 64 - 8 * (int)es;
  return (double)((int64_t)(u << shift) >> shift);
}

/* op over ranks of element i (the caller passes the global index), as the
 * dtype holds it: the exact sum, product, minimum or maximum of small
 * integers; avg that sum divided by the ranks in the accumulator's
 * precision (f32, f64 for f64; integers truncate), then rounded once to
 * the dtype. */
static double reduce_ref(symm_redop_t op, symm_dtype_t dt, int world, size_t i, int salt) {
  double acc = 0;
  for (int r = 0; r < world; r++) {
    double v = value(r, i, salt, op, dt, world);
    if (r == 0) acc = v;
    else if (op == SYMM_REDUCE_MIN) acc = v < acc ? v : acc;
    else if (op == SYMM_REDUCE_MAX) acc = v > acc ? v : acc;
    else if (op == SYMM_REDUCE_PROD) acc *= v;
    else acc += v;
  }
  if (op == SYMM_REDUCE_AVG) {
    if (!is_float(dt)) acc = trunc(acc / world);
    else if (dt != SYMM_DTYPE_F64) acc = (float)acc / (float)world;
    else acc /= world;
  }
  const fmt_t *f = fmt_of(dt);
  return f ? fmt_round(f, acc) : acc;
}

/* ------------------------------------------------------------- cases */

typedef enum { K_AR, K_RS, K_AG, K_BC, K_A2A } kind_t;
static const char *const kind_names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                         "broadcast", "all_to_all"};

/* Runs one collective on device buffers made from the host reference and
 * compares the result on the host. */
static void run_case(coll_t *c, kind_t kind, symm_dtype_t dt, symm_redop_t op, size_t n,
                       bool in_place, int salt) {
  const int W = c->size, R = c->rank, root = W - 1;
  const size_t es = symm_dtype_size(dt);
  size_t send_n = (kind == K_RS || kind == K_A2A) ? n * W : n;
  size_t recv_n = (kind == K_AG || kind == K_A2A) ? n * W : n;
  size_t buf_n = send_n > recv_n ? send_n : recv_n;
  char *h = malloc(buf_n * es), *out = malloc(buf_n * es);
  void *dsend = NULL, *drecv = NULL;
  size_t wrong = 0;
  ASSERT(h != NULL && out != NULL);
  /* Input: global index g of this rank's send buffer holds value(R, g). */
  for (size_t i = 0; i < send_n; i++) put(dt, h, i, value(R, i, salt, op, dt, W));
  if (c->recv_buf && in_place) dsend = c->recv_buf;
  else if (c->send_buf) dsend = c->send_buf;
  else ASSERT_CUDA(cudaMalloc(&dsend, buf_n * es));
  if (c->recv_buf && !in_place) drecv = c->recv_buf;
  else if (!in_place) ASSERT_CUDA(cudaMalloc(&drecv, buf_n * es));
  if (in_place) drecv = dsend;
  ASSERT_CUDA(cudaMemset(drecv, 0x7f, buf_n * es));
  if (kind == K_AG && in_place) {
    /* In-place all-gather: this rank's part already sits at rank * n. */
    ASSERT_CUDA(gpu_upload((char *)dsend + (size_t)R * n * es, h, n * es));
  } else {
    ASSERT_CUDA(gpu_upload(dsend, h, send_n * es));
  }
  /* A copy from pageable memory may return before its last piece reached
   * the device, and c->stream (non-blocking) does not wait for it: without
   * this the kernels read a stale tail (seen: the last 5 elements of
   * 1048581, which an earlier session took for a library bug). */
  ASSERT_CUDA(cudaDeviceSynchronize());
  const void *sb = kind == K_AG && in_place ? (char *)dsend + (size_t)R * n * es : dsend;
  symm_result_t res = SYMM_ERR_INTERNAL;
  switch (kind) {
    case K_AR: res = symm_all_reduce(c->comm, sb, drecv, n, dt, op, c->stream); break;
    case K_RS: res = symm_reduce_scatter(c->comm, sb, drecv, n, dt, op, c->stream); break;
    case K_AG: res = symm_all_gather(c->comm, sb, drecv, n, dt, c->stream); break;
    case K_BC: res = symm_broadcast(c->comm, sb, drecv, n, dt, root, c->stream); break;
    case K_A2A: res = symm_all_to_all(c->comm, sb, drecv, n, dt, c->stream); break;
  }
  ASSERT_MSG(res == SYMM_SUCCESS, "%s: %s", kind_names[kind], symm_last_error());
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  ASSERT_CUDA(cudaMemcpy(out, drecv, recv_n * es, cudaMemcpyDeviceToHost));
  size_t first = (size_t)-1;
  for (size_t i = 0; i < recv_n; i++) {
    double want;
    switch (kind) {
      case K_AR: want = reduce_ref(op, dt, W, i, salt); break;
      case K_RS: want = reduce_ref(op, dt, W, (size_t)R * n + i, salt); break;
      case K_AG: want = value((int)(i / n), i % n, salt, op, dt, W); break;
      case K_BC: want = value(root, i, salt, op, dt, W); break;
      default: want = value((int)(i / n), (size_t)R * n + i % n, salt, op, dt, W); break;
    }
    if (get(dt, out, i) != want) {
      if (first == (size_t)-1) first = i;
      wrong++;
    }
  }
  ASSERT_MSG(wrong == 0, "%s %s %s n=%zu %s (algorithm %s): %zu of %zu wrong (first at %zu: %g)",
             kind_names[kind], symm_dtype_name(dt), symm_redop_name(op), n,
             in_place ? "in place" : "out of place", symm_algo_name(c->algo), wrong, recv_n,
             first, get(dt, out, first));
  if (dsend != c->recv_buf && dsend != c->send_buf) cudaFree(dsend);
  if (!in_place && drecv != c->recv_buf) cudaFree(drecv);
  free(h);
  free(out);
}

/* The first four: every op everywhere (the large sizes: sum of the floats);
 * the others every op below 4096 elements. */
static const symm_dtype_t reducible[] = {
    SYMM_DTYPE_F32, SYMM_DTYPE_BF16, SYMM_DTYPE_F16, SYMM_DTYPE_I32, SYMM_DTYPE_F64,
    SYMM_DTYPE_F8E4M3, SYMM_DTYPE_F8E5M2, SYMM_DTYPE_I8, SYMM_DTYPE_I16, SYMM_DTYPE_I64,
    SYMM_DTYPE_U8, SYMM_DTYPE_U16, SYMM_DTYPE_U32, SYMM_DTYPE_U64};
enum { N_REDUCIBLE = sizeof reducible / sizeof reducible[0] };

/* Every op x dtype x reduction at each of sizes, all-reduce under each
 * algorithm; salt from *salt on.  The newer dtypes and ops (beyond f32,
 * bf16, f16, i32 with sum, min, max) in one placement per size, to keep
 * the run short. */
static void ops_at_sizes(coll_t *c, const size_t *sizes, int nsizes, int *salt) {
  symm_algo_t algos[] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT,
                         SYMM_ALGO_AUTO};
  for (int s = 0; s < nsizes; s++)
    for (int d = 0; d < N_REDUCIBLE; d++)
      for (int op = 0; op < SYMM_REDUCE_COUNT_; op++)
        for (int ip = 0; ip < 2; ip++) {
          bool big = sizes[s] > 4096;
          bool newer = d >= 4 || op > SYMM_REDUCE_MAX;
          if (big && (op != SYMM_REDUCE_SUM || d >= 3)) continue; /* keep large cases few */
          if (newer && ip != s % 2) continue;
          for (int a = 0; a < 5; a++) {
            if (newer && algos[a] == SYMM_ALGO_AUTO) continue;
            symm_comm_set_allreduce_algo(c->comm, algos[a]);
            c->algo = algos[a];
            run_case(c, K_AR, reducible[d], (symm_redop_t)op, sizes[s], ip, ++*salt);
          }
          symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
          c->algo = SYMM_ALGO_AUTO;
          run_case(c, K_RS, reducible[d], (symm_redop_t)op, sizes[s], ip, ++*salt);
          if (op == SYMM_REDUCE_SUM && d < 4) {
            run_case(c, K_AG, reducible[d], op, sizes[s], ip, ++*salt);
            run_case(c, K_BC, reducible[d], op, sizes[s], ip, ++*salt);
            run_case(c, K_A2A, reducible[d], op, sizes[s], ip, ++*salt);
          }
        }
}

/* Small and middle sizes; 65537: an LL grid of many blocks (the packets
 * still fit the LL area). */
TEST_IMPL(gpu_coll_ops) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t sizes[] = {1, 7, 1003, 65537};
  int salt = 0;
  ops_at_sizes(c, sizes, 4, &salt);
  /* Copies of a dtype that cannot be reduced (bytes). */
  run_case(c, K_AG, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, 5, false, ++salt);
  symm_comm_barrier(c->comm);
  return 0;
}

/* Sizes of several MiB: sums of the float dtypes only. */
TEST_IMPL(gpu_coll_ops_large) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t sizes[] = {((size_t)1 << 20) + 5, ((size_t)3 << 20) + 1};
  int salt = 1000;
  ops_at_sizes(c, sizes, 2, &salt);
  symm_comm_barrier(c->comm);
  return 0;
}

/* Collectives captured in a CUDA graph replay correctly several times:
 * the kernels carry no host-side sequence number. */
TEST_IMPL(gpu_coll_graph) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t n = 4099;
  const int W = c->size;
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, (size_t)32 << 20));
  float *in = NULL, *ar[4] = {NULL, NULL, NULL, NULL}, *ag = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&in, n * sizeof(float)));
  for (int a = 0; a < 4; a++) ASSERT_CUDA(cudaMalloc((void **)&ar[a], n * sizeof(float)));
  ASSERT_CUDA(cudaMalloc((void **)&ag, n * W * sizeof(float)));
  float *h = malloc(n * W * sizeof(float));
  ASSERT(h != NULL);
  symm_algo_t algos[4] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  ASSERT_CUDA(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  for (int a = 0; a < 4; a++) {
    symm_comm_set_allreduce_algo(c->comm, algos[a]);
    ASSERT_OK(symm_all_reduce(c->comm, in, ar[a], n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream));
  }
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
  ASSERT_OK(symm_all_gather(c->comm, in, ag, n, SYMM_DTYPE_F32, c->stream));
  ASSERT_CUDA(cudaStreamEndCapture(c->stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; rep++) {
    for (size_t i = 0; i < n; i++)
      h[i] = (float)value(c->rank, i, 100 + rep, SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_CUDA(gpu_upload(in, h, n * sizeof(float)));
    ASSERT_CUDA(cudaDeviceSynchronize()); /* the pageable copy's tail, see run_case */
    ASSERT_CUDA(cudaGraphLaunch(exec, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_OK(symm_comm_check_async_error(c->comm));
    for (int a = 0; a < 4; a++) {
      ASSERT_CUDA(cudaMemcpy(h, ar[a], n * sizeof(float), cudaMemcpyDeviceToHost));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += h[i] != (float)reduce_ref(SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W, i, 100 + rep);
      ASSERT_MSG(bad == 0, "graph replay %d, %s: %zu wrong", rep, symm_algo_name(algos[a]), bad);
    }
    ASSERT_CUDA(cudaMemcpy(h, ag, n * W * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n * W; i++)
      bad += h[i] != (float)value((int)(i / n), i % n, 100 + rep, SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_MSG(bad == 0, "graph replay %d, all_gather: %zu wrong", rep, bad);
    /* The ranks must not start the next replay before every rank has
     * rewritten its input: the graph reads it. */
    symm_comm_barrier(c->comm);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(in);
  for (int a = 0; a < 4; a++) cudaFree(ar[a]);
  cudaFree(ag);
  free(h);
  symm_comm_barrier(c->comm);
  return 0;
}

/* Ranks enqueue different collectives: every rank sees SYMM_ERR_MISMATCH,
 * none hangs, and the next matching collective works. */
TEST_IMPL(gpu_coll_mismatch) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 2)) return TEST_SKIP;
  const size_t n = 1000;
  float *a = NULL, *b = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&a, (n + 1) * c->size * sizeof(float)));
  ASSERT_CUDA(cudaMalloc((void **)&b, (n + 1) * c->size * sizeof(float)));
  ASSERT_CUDA(cudaMemset(a, 0, (n + 1) * c->size * sizeof(float)));
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, (size_t)32 << 20));
  symm_algo_t algos[4] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
  for (int k = 0; k < 4; k++) {
    symm_comm_set_allreduce_algo(c->comm, algos[k]);
    /* Count differs on rank 0. */
    ASSERT_OK(symm_all_reduce(c->comm, a, b, c->rank == 0 ? n + 1 : n, SYMM_DTYPE_F32,
                              SYMM_REDUCE_SUM, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
    ASSERT_OK(symm_comm_check_async_error(c->comm)); /* reading cleared it */
    symm_comm_barrier(c->comm);
  }
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
  /* Kind differs on rank 0 (all-gather against all-reduce). */
  if (c->rank == 0)
    ASSERT_OK(symm_all_gather(c->comm, a, b, n, SYMM_DTYPE_F32, c->stream));
  else
    ASSERT_OK(symm_all_reduce(c->comm, a, b, n, SYMM_DTYPE_F32, SYMM_REDUCE_MAX, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  /* Count 0 is collective too: against a count of n it is a mismatch on
   * every rank (not a call that pairs with the peers' next one); on every
   * rank it succeeds. */
  ASSERT_OK(symm_all_reduce(c->comm, c->rank == 0 ? NULL : a, c->rank == 0 ? NULL : b,
                            c->rank == 0 ? 0 : n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  ASSERT_OK(symm_all_reduce(c->comm, NULL, NULL, 0, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream));
  ASSERT_OK(symm_all_gather(c->comm, NULL, NULL, 0, SYMM_DTYPE_F32, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  symm_comm_barrier(c->comm);
  /* A call refused by rank 0's argument checks (no such dtype) still meets
   * the peers: a mismatch everywhere, not a call that pairs with the next. */
  ASSERT_RES(symm_all_reduce(c->comm, a, b, n, c->rank == 0 ? (symm_dtype_t)99 : SYMM_DTYPE_F32,
                            SYMM_REDUCE_SUM, c->stream),
         c->rank == 0 ? SYMM_ERR_INVALID_ARG : SYMM_SUCCESS);
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  /* The communicator still works. */
  run_case(c, K_AR, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, 777, false, 4242);
  run_case(c, K_AG, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, 777, false, 4243);
  cudaFree(a);
  cudaFree(b);
  symm_comm_barrier(c->comm);
  return 0;
}

/* Two-shot all-reduce and all-gather on buffers inside a symmetric tensor:
 * in place and out of place, with the tensor at the same offset on every
 * rank (zero copy: results go straight into the peers' buffers), at
 * different offsets, and with only rank 0's buffer symmetric (staged). */
TEST_IMPL(gpu_coll_zero_copy) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t sizes[] = {4099, ((size_t)1 << 20) + 5};
  int64_t bytes = (int64_t)(((size_t)1 << 20) + 64) * 4 * c->size + 4096;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, &bytes, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_TWO_SHOT);
  c->algo = SYMM_ALGO_TWO_SHOT;
  int salt = 5000;
  for (int layout = 0; layout < 3; layout++) {
    /* 0: same offset everywhere; 1: offset differs by rank; 2: rank 0 only. */
    size_t off = layout == 1 ? (size_t)c->rank * 256 : 0;
    c->recv_buf = layout == 2 && c->rank != 0 ? NULL : (char *)symm_tensor_data(t) + off;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int ip = 0; ip < 2; ip++) {
        run_case(c, K_AR, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
        run_case(c, K_AR, SYMM_DTYPE_BF16, SYMM_REDUCE_MAX, sizes[s], ip, ++salt);
        run_case(c, K_AG, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
      }
  }
  c->recv_buf = NULL;
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
  c->algo = SYMM_ALGO_AUTO;
  symm_comm_barrier(c->comm);
  symm_tensor_free(t);
  return 0;
}

/* Stream-ordered signals: data written into the peer's buffer before a
 * put is there after the matching wait (ping-pong, several rounds on two
 * channels), barriers on the stream and replayed from a CUDA graph, and
 * every pad back to zero afterwards. */
TEST_IMPL(gpu_coll_signals) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t n = 4096;
  int64_t count = (int64_t)n;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, &count, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *peers = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &peers));
  unsigned char *h = malloc(n);
  ASSERT(h != NULL);
  const int W = c->size, R = c->rank;
  const int right = (R + 1) % W, left = (R + W - 1) % W;
  for (int round = 1; round <= 20; round++) {
    /* Everyone writes into the right neighbour, signals it on channel 0,
     * and waits for the left one. */
    ASSERT_CUDA(cudaMemsetAsync(peers[right], (R * 16 + round) & 0xff, n, c->stream));
    ASSERT_OK(symm_signal_put(t, right, round & 1, c->stream));
    ASSERT_OK(symm_signal_wait(t, left, round & 1, c->stream));
    ASSERT_CUDA(cudaMemcpyAsync(h, peers[R], n, cudaMemcpyDeviceToHost, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_OK(symm_comm_check_async_error(c->comm));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)((left * 16 + round) & 0xff);
    ASSERT_MSG(bad == 0, "signal round %d: %zu of %zu bytes from rank %d wrong", round, bad, n,
               left);
    /* The left neighbour writes into us again next round only after our
     * barrier: we have read this round's data. */
    ASSERT_OK(symm_signal_barrier(t, 2, c->stream));
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  ASSERT_CUDA(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < 3; k++) ASSERT_OK(symm_signal_barrier(t, 3 + k, c->stream));
  ASSERT_CUDA(cudaStreamEndCapture(c->stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 10; rep++) ASSERT_CUDA(cudaGraphLaunch(exec, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  symm_comm_barrier(c->comm);
  size_t set = gpu_pad_nonzero_bytes(t, R);
  ASSERT_MSG(set == 0, "signals: %zu bytes of the pad not zero after balanced use", set);
  free(h);
  symm_tensor_free(t);
  return 0;
}

/* ------------------------------------------------------ all-to-all-v */

/* Counts of a call, the same on every rank (from a seed): rank s sends
 * C[s][d * ne + e] rows (elements, host counts) to expert e of rank d. */
typedef struct {
  int W, ne;
  size_t C[32 * 64];
} a2av_counts_t;

static size_t a2av_c(const a2av_counts_t *m, int s, int d, int e) {
  return m->C[((size_t)s * m->W + d) * m->ne + e];
}

static uint32_t a2av_rand(uint32_t *x) {
  *x = *x * 1664525u + 1013904223u;
  return *x >> 8;
}

enum { PAT_RANDOM, PAT_SKEWED, PAT_ZEROS, PAT_SILENT, PAT_EMPTY_EXPERT };

/* Counts up to `most` per chunk: random with zeros; skewed (rank 0 sends
 * `most`, the others a few); all zero; random but the last rank sends
 * nothing; random but local expert 1 of every rank gets nothing. */
static void a2av_fill(a2av_counts_t *m, int W, int ne, int pattern, uint32_t seed, size_t most) {
  m->W = W;
  m->ne = ne;
  for (int s = 0; s < W; s++)
    for (int d = 0; d < W; d++)
      for (int e = 0; e < ne; e++) {
        size_t v = a2av_rand(&seed) % (most + 1);
        if (v % 5 == 0) v = 0;
        if (pattern == PAT_SKEWED) v = s == 0 ? most : v % 3;
        if (pattern == PAT_ZEROS || (pattern == PAT_SILENT && s == W - 1) ||
            (pattern == PAT_EMPTY_EXPERT && e == 1))
          v = 0;
        m->C[((size_t)s * W + d) * ne + e] = v;
      }
}

/* Byte k of row i of rank s's sendbuf in case `salt`. */
static unsigned char a2av_byte(int s, size_t i, size_t k, int salt) {
  return (unsigned char)(s * 97 + i * 31 + k * 7 + (size_t)salt * 13);
}

/* rows x rb bytes of rank s's sendbuf, rows from `first` on, into dst. */
static void a2av_rows(unsigned char *dst, int s, size_t first, size_t rows, size_t rb, int salt) {
  for (size_t i = 0; i < rows; i++)
    for (size_t k = 0; k < rb; k++) dst[i * rb + k] = a2av_byte(s, first + i, k, salt);
}

/* Device copies of n bytes of host memory, and the comparison back. */
static void *a2av_upload(const void *h, size_t n) {
  void *d = NULL;
  ASSERT_CUDA(cudaMalloc(&d, n ? n : 16));
  if (n) ASSERT_CUDA(gpu_upload(d, h, n));
  ASSERT_CUDA(cudaDeviceSynchronize()); /* the pageable copy's tail, see run_case */
  return d;
}
static size_t a2av_diff(const void *d, const unsigned char *want, size_t n, size_t *first) {
  unsigned char *h = malloc(n ? n : 1);
  ASSERT(h != NULL);
  if (n) ASSERT_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  *first = (size_t)-1;
  for (size_t i = 0; i < n; i++)
    if (h[i] != want[i]) {
      if (!bad) *first = i;
      bad++;
    }
  free(h);
  return bad;
}

/* The displacements of host counts c[0..W) (elements): packed, or in
 * reverse order of rank with `gap` elements before each range. */
static size_t a2av_displs(const size_t *c, int W, size_t gap, bool reverse, size_t *displs) {
  size_t at = 0;
  for (int k = 0; k < W; k++) {
    const int p = reverse ? W - 1 - k : k;
    at += gap;
    displs[p] = at;
    at += c[p];
  }
  return at;
}

/* symm_all_to_all_v of m (elements of dt) against a host reference:
 * packed, or with gaps and reversed ranges (gaps of recv untouched); in
 * place: one buffer, which holds the send data first. */
static void a2av_host_case(coll_t *c, const a2av_counts_t *m, symm_dtype_t dt, bool gaps,
                           bool in_place, int salt) {
  const int W = c->size, R = c->rank;
  const size_t es = symm_dtype_size(dt);
  size_t sc[32], rc[32], sd[32], rd[32];
  for (int p = 0; p < W; p++) sc[p] = a2av_c(m, R, p, 0), rc[p] = a2av_c(m, p, R, 0);
  const size_t sn = a2av_displs(sc, W, gaps ? 1 : 0, gaps, sd);
  const size_t rn = a2av_displs(rc, W, gaps ? 2 : 0, gaps, rd);
  const size_t n = (in_place ? (sn > rn ? sn : rn) : sn) * es, rbytes = (in_place ? n : rn * es);
  unsigned char *hs = malloc(n + 1), *want = malloc(rbytes + 1);
  ASSERT(hs && want);
  a2av_rows(hs, R, 0, n / es, es, salt);
  if (in_place) memcpy(want, hs, rbytes);
  else memset(want, 0xa5, rbytes);
  void *dsend = a2av_upload(hs, n), *drecv = dsend;
  if (!in_place) drecv = a2av_upload(want, rbytes); /* all 0xa5 still */
  for (int p = 0; p < W; p++) /* rank p's elements for us sit at its sd for us */
    if (rc[p]) {
      size_t psd[32], pc[32];
      for (int q = 0; q < W; q++) pc[q] = a2av_c(m, p, q, 0);
      a2av_displs(pc, W, gaps ? 1 : 0, gaps, psd);
      a2av_rows(want + rd[p] * es, p, psd[R], rc[p], es, salt);
    }
  ASSERT_OK(symm_all_to_all_v(c->comm, dsend, sc, gaps ? sd : NULL, drecv, rc, gaps ? rd : NULL,
                              dt, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  size_t first;
  const size_t bad = a2av_diff(drecv, want, rbytes, &first);
  ASSERT_MSG(bad == 0, "all_to_all_v %s %s%s (case %d): %zu of %zu bytes wrong, first at %zu",
             symm_dtype_name(dt), gaps ? "with gaps" : "packed", in_place ? ", in place" : "",
             salt, bad, rbytes, first);
  cudaFree(dsend);
  if (!in_place) cudaFree(drecv);
  free(hs);
  free(want);
}

/* Reserves what symm_comm_scratch_bytes says for buffers of `bytes`: an
 * all-to-all-v never grows the scratch itself. */
static void a2av_reserve(coll_t *c, size_t bytes) {
  size_t need = 0;
  ASSERT_OK(symm_comm_scratch_bytes(c->comm, bytes, &need));
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, need));
}

/* Host counts: random, skewed, all zero, a rank that sends nothing, and
 * large; packed and with gaps, in place; 1-, 4- and 8-byte elements. */
TEST_IMPL(gpu_coll_a2av_host) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const int W = c->size;
  const size_t big = (size_t)1 << 18; /* elements a pair, at most */
  a2av_reserve(c, (size_t)W * big * 4 + (size_t)W * 8 * 8);
  a2av_counts_t *m = malloc(sizeof *m);
  ASSERT(m != NULL);
  const symm_dtype_t dts[3] = {SYMM_DTYPE_I32, SYMM_DTYPE_U8, SYMM_DTYPE_I64};
  int salt = 0;
  for (int pat = PAT_RANDOM; pat <= PAT_SILENT; pat++)
    for (int d = 0; d < 3; d++)
      for (int v = 0; v < 3; v++) {
        a2av_fill(m, W, 1, pat, 1000u + (uint32_t)salt, 300);
        a2av_host_case(c, m, dts[d], v == 1, v == 2, ++salt);
      }
  a2av_fill(m, W, 1, PAT_RANDOM, 77u, big); /* up to 1 MiB a pair */
  a2av_host_case(c, m, SYMM_DTYPE_I32, false, false, ++salt);
  a2av_host_case(c, m, SYMM_DTYPE_I32, true, true, ++salt);
  free(m);
  symm_comm_barrier(c->comm);
  return 0;
}

/* ---- device splits ---- */

/* Which dispatch: symm_all_to_all_vdev, symm_all_to_all_vdev_2d. */
enum { A2AV_1D = 1, A2AV_2D = 2 };

/* One device-split call of counts m as rank R sees it: what it sends
 * (in_splits, packed rank-major), what it must receive and where, the
 * out_splits_offsets it must write, and the capacities that fit. */
typedef struct {
  int mode, ne;
  size_t align, rb;            /* rows of rb bytes */
  size_t send_rows, recv_rows; /* exactly what the call needs */
  int64_t in[2 * 32 * 64], out[2 * 32 * 64];
  size_t nin, nout;            /* int64 in in[], out[] */
  unsigned char *send, *want;  /* send_rows, recv_rows rows */
} a2av_call_t;

/* Where rank s's rows for (d, e) start in its packed sendbuf. */
static size_t a2av_send_off(const a2av_counts_t *m, int s, int d, int e) {
  size_t at = 0;
  for (int k = 0; k < d * m->ne + e; k++) at += a2av_c(m, s, k / m->ne, k % m->ne);
  return at;
}

/* Rank R's dispatch (A2AV_1D, or A2AV_2D with align) of m; in
 * place, recv's rows that receive nothing keep the send data. */
static void a2av_dispatch_ref(const a2av_counts_t *m, int R, int mode, size_t align, size_t rb,
                              int salt, bool in_place, a2av_call_t *k) {
  const int W = m->W, ne = m->ne;
  k->mode = mode, k->ne = ne, k->align = align ? align : 1, k->rb = rb;
  k->nin = (size_t)W * ne, k->nout = 2 * (size_t)W * ne;
  k->send_rows = a2av_send_off(m, R, W, 0);
  for (int i = 0; i < W * ne; i++) k->in[i] = (int64_t)a2av_c(m, R, i / ne, i % ne);
  size_t at = 0; /* expert-major blocks (2-D) or source order (1-D: ne 1) */
  for (int e = 0; e < ne; e++) {
    at = (at + k->align - 1) / k->align * k->align;
    for (int s = 0; s < W; s++) {
      const size_t i = (size_t)e * W + s;
      k->out[i] = (int64_t)a2av_c(m, s, R, e);
      k->out[k->nout / 2 + i] = (int64_t)at;
      at += a2av_c(m, s, R, e);
    }
  }
  k->recv_rows = at;
  k->send = malloc(k->send_rows * rb + 1);
  k->want = malloc(k->recv_rows * rb + 1);
  ASSERT(k->send && k->want);
  a2av_rows(k->send, R, 0, k->send_rows, rb, salt);
  memset(k->want, 0xa5, k->recv_rows * rb);
  if (in_place)
    memcpy(k->want, k->send, (k->send_rows < k->recv_rows ? k->send_rows : k->recv_rows) * rb);
  for (int e = 0; e < ne; e++)
    for (int s = 0; s < W; s++) {
      const size_t i = (size_t)e * W + s;
      a2av_rows(k->want + (size_t)k->out[k->nout / 2 + i] * rb, s, a2av_send_off(m, s, R, e),
                (size_t)k->out[i], rb, salt);
    }
}

static void a2av_call_free(a2av_call_t *k) {
  free(k->send);
  free(k->want);
}

/* Device buffers of a call: send (spare rows after it), recv filled with
 * 0xa5 (spare too), in_splits, out_splits_offsets filled with -7. */
typedef struct {
  void *send, *recv;
  int64_t *in, *out;
  size_t send_cap, recv_cap; /* rows */
} a2av_dev_t;

static void a2av_dev_make(const a2av_call_t *k, size_t spare, bool in_place, a2av_dev_t *b) {
  b->send_cap = k->send_rows + spare;
  b->recv_cap = k->recv_rows + spare;
  if (in_place && b->recv_cap < b->send_cap) b->recv_cap = b->send_cap;
  if (in_place) b->send_cap = b->recv_cap;
  const size_t sb = b->send_cap * k->rb, rbytes = b->recv_cap * k->rb;
  unsigned char *h = malloc(sb + rbytes + 1);
  ASSERT(h != NULL);
  memset(h, 0xa5, sb + rbytes);
  memcpy(h, k->send, k->send_rows * k->rb);
  b->send = a2av_upload(h, sb);
  b->recv = in_place ? b->send : a2av_upload(h + sb, rbytes);
  int64_t junk[2 * 32 * 64];
  for (size_t i = 0; i < k->nout; i++) junk[i] = -7;
  b->in = a2av_upload(k->in, k->nin * 8);
  b->out = a2av_upload(junk, k->nout * 8);
  free(h);
}

static void a2av_dev_free(a2av_dev_t *b) {
  cudaFree(b->send);
  if (b->recv != b->send) cudaFree(b->recv);
  cudaFree(b->in);
  cudaFree(b->out);
}

/* recv (its first recv_rows rows; the spare after them untouched unless in
 * place) and out_splits_offsets as k says. */
static void a2av_dev_check(const a2av_call_t *k, const a2av_dev_t *b, const char *what) {
  size_t first;
  size_t bad = a2av_diff(b->recv, k->want, k->recv_rows * k->rb, &first);
  ASSERT_MSG(bad == 0, "%s: %zu of %zu bytes of recv wrong, first at %zu (row %zu)", what, bad,
             k->recv_rows * k->rb, first, first / k->rb);
  bad = a2av_diff(b->out, (const unsigned char *)k->out, k->nout * 8, &first);
  ASSERT_MSG(bad == 0, "%s: out_splits_offsets wrong from byte %zu (entry %zu)", what, first,
             first / 8);
  if (b->recv == b->send) return;
  const size_t spare = (b->recv_cap - k->recv_rows) * k->rb;
  unsigned char *a5 = malloc(spare + 1);
  ASSERT(a5 != NULL);
  memset(a5, 0xa5, spare);
  bad = a2av_diff((char *)b->recv + k->recv_rows * k->rb, a5, spare, &first);
  ASSERT_MSG(bad == 0, "%s: %zu bytes written past the rows received", what, bad);
  free(a5);
}

/* Runs k's dispatch on b. */
static symm_result_t a2av_dev_run(coll_t *c, const a2av_call_t *k, const a2av_dev_t *b,
                                  size_t row_elems, symm_dtype_t dt) {
  if (k->mode == A2AV_1D)
    return symm_all_to_all_vdev(c->comm, b->send, b->send_cap, b->recv, b->recv_cap, row_elems,
                                dt, b->in, b->out, c->stream);
  return symm_all_to_all_vdev_2d(c->comm, b->send, b->send_cap, b->recv, b->recv_cap, row_elems,
                                 dt, b->in, b->out, k->ne, k->align, c->stream);
}

/* Combine of a 2-D dispatch: its recv and out_splits_offsets go back, and
 * every rank gets its dispatch input again, packed rank-major, with its
 * own in_splits as counts. */
static void a2av_combine_check(coll_t *c, const a2av_call_t *k, const a2av_dev_t *b,
                               size_t row_elems, symm_dtype_t dt, const char *what) {
  const size_t n = (size_t)c->size * k->ne;
  a2av_dev_t back = {NULL, NULL, NULL, NULL, b->send_cap, 0};
  ASSERT_CUDA(cudaMalloc(&back.recv, back.send_cap * k->rb + 16));
  ASSERT_CUDA(cudaMemset(back.recv, 0xa5, back.send_cap * k->rb + 16));
  ASSERT_CUDA(cudaMalloc((void **)&back.out, 2 * n * 8));
  ASSERT_OK(symm_all_to_all_vdev_2d_combine(c->comm, b->recv, b->recv_cap, back.recv,
                                            back.send_cap, row_elems, dt, b->out, back.out,
                                            k->ne, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  size_t first, bad = a2av_diff(back.recv, k->send, k->send_rows * k->rb, &first);
  ASSERT_MSG(bad == 0, "%s, combined back: %zu of %zu bytes differ from the input, first at %zu",
             what, bad, k->send_rows * k->rb, first);
  int64_t want[2 * 32 * 64];
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    want[i] = k->in[i];
    want[n + i] = (int64_t)at;
    at += (size_t)k->in[i];
  }
  bad = a2av_diff(back.out, (const unsigned char *)want, 2 * n * 8, &first);
  ASSERT_MSG(bad == 0, "%s, combined back: out_splits_offsets wrong at entry %zu", what,
             first / 8);
  cudaFree(back.recv);
  cudaFree(back.out);
}

/* One dispatch (and its combine, 2-D) of m against the reference. */
static void a2av_dev_case(coll_t *c, const a2av_counts_t *m, int mode, size_t align,
                          size_t row_elems, symm_dtype_t dt, bool in_place, int salt) {
  const size_t rb = row_elems * symm_dtype_size(dt);
  a2av_call_t k;
  a2av_dispatch_ref(m, c->rank, mode, align, rb, salt, in_place, &k);
  a2av_dev_t b;
  a2av_dev_make(&k, in_place ? 0 : 5 + (size_t)c->rank, in_place, &b);
  char what[160];
  snprintf(what, sizeof what, "%s, %d experts, align %zu, rows of %zu %s%s (case %d)",
           mode == A2AV_1D ? "vdev" : "vdev_2d", m->ne, align, row_elems, symm_dtype_name(dt),
           in_place ? ", in place" : "", salt);
  ASSERT_OK(a2av_dev_run(c, &k, &b, row_elems, dt));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  a2av_dev_check(&k, &b, what);
  if (mode == A2AV_2D && !in_place) a2av_combine_check(c, &k, &b, row_elems, dt, what);
  a2av_dev_free(&b);
  a2av_call_free(&k);
}

/* Device splits: 1-D, 2-D with major_align 1 and 16 and an expert that
 * gets no rows, each combined back; skewed and silent ranks; rows of 6
 * bytes (no vectors); in place; and chunks of MiB. */
TEST_IMPL(gpu_coll_a2av_dev) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const int W = c->size;
  a2av_reserve(c, (size_t)W * 2 * 3000 * 512 + 16 * 512);
  a2av_counts_t *m = malloc(sizeof *m);
  ASSERT(m != NULL);
  const symm_dtype_t bf = SYMM_DTYPE_BF16;
  int salt = 100;
  for (int pat = PAT_RANDOM; pat <= PAT_SILENT; pat++) {
    a2av_fill(m, W, 1, pat, 2000u + (uint32_t)pat, 40);
    a2av_dev_case(c, m, A2AV_1D, 1, 64, bf, false, ++salt);
    a2av_dev_case(c, m, A2AV_1D, 1, 3, bf, false, ++salt);
  }
  a2av_dev_case(c, m, A2AV_1D, 1, 64, bf, true, ++salt);
  const size_t aligns[3] = {0, 1, 16};
  for (int pat = PAT_RANDOM; pat <= PAT_EMPTY_EXPERT; pat++)
    for (int a = 0; a < 3; a++) {
      a2av_fill(m, W, 3, pat, 3000u + (uint32_t)(pat * 3 + a), 30);
      a2av_dev_case(c, m, A2AV_2D, aligns[a], 32, bf, false, ++salt);
    }
  a2av_fill(m, W, 4, PAT_EMPTY_EXPERT, 4000u, 30);
  a2av_dev_case(c, m, A2AV_2D, 16, 3, bf, false, ++salt);
  a2av_dev_case(c, m, A2AV_2D, 16, 64, bf, true, ++salt);
  a2av_fill(m, W, 2, PAT_RANDOM, 5000u, 3000); /* chunks up to 1.5 MiB */
  a2av_dev_case(c, m, A2AV_2D, 8, 256, bf, false, ++salt);
  free(m);
  symm_comm_barrier(c->comm);
  return 0;
}

/* Every rank reports `code` for the call just enqueued (with `needle` in
 * its message) and recv was left as it was. */
static void a2av_expect_refused(coll_t *c, symm_result_t code, const char *needle,
                                const a2av_dev_t *b, size_t rb, const char *what) {
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), code);
  ASSERT_MSG(strstr(symm_last_error(), needle), "%s: \"%s\" lacks \"%s\"", what,
             symm_last_error(), needle);
  if (c->rank == 0) printf("# %s: %s\n", what, symm_last_error());
  const size_t n = b->recv_cap * rb;
  unsigned char *a5 = malloc(n + 1);
  ASSERT(a5 != NULL);
  memset(a5, 0xa5, n);
  size_t first, bad = a2av_diff(b->recv, a5, n, &first);
  ASSERT_MSG(bad == 0, "%s: recv written (%zu bytes, first at %zu)", what, bad, first);
  free(a5);
  symm_comm_barrier(c->comm);
}

/* Refused calls: rows past one rank's recv_rows, a negative split, splits
 * past send_rows, host counts that differ from the sender's: every rank
 * reports it through symm_comm_check_async_error, no rank's recv is
 * written, and the next call works. */
TEST_IMPL(gpu_coll_a2av_errors) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 2)) return TEST_SKIP;
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, (size_t)32 << 20));
  const int W = c->size, R = c->rank, last = W - 1;
  a2av_counts_t *m = malloc(sizeof *m);
  ASSERT(m != NULL);
  a2av_fill(m, W, 1, PAT_RANDOM, 6000u, 40);
  for (int s = 0; s < W; s++) m->C[(size_t)s * W + last] = 10; /* the last rank gets rows */
  a2av_call_t k;
  a2av_dispatch_ref(m, R, A2AV_1D, 1, 16, 1, false, &k);
  a2av_dev_t b;
  a2av_dev_make(&k, 0, false, &b);
  const symm_dtype_t f32 = SYMM_DTYPE_F32;
  /* The last rank's recv_rows one short. */
  ASSERT_OK(symm_all_to_all_vdev(c->comm, b.send, b.send_cap, b.recv,
                                 R == last ? b.recv_cap - 1 : b.recv_cap, 4, f32, b.in, b.out,
                                 c->stream));
  a2av_expect_refused(c, SYMM_ERR_INVALID_ARG, "fit recv_rows", &b, 16, "recv_rows short");
  /* A negative split on rank 1. */
  int64_t neg = -3;
  if (R == 1) ASSERT_CUDA(gpu_upload(b.in, &neg, 8));
  ASSERT_OK(symm_all_to_all_vdev(c->comm, b.send, b.send_cap, b.recv, b.recv_cap, 4, f32, b.in,
                                 b.out, c->stream));
  a2av_expect_refused(c, SYMM_ERR_INVALID_ARG, "negative", &b, 16, "negative split");
  ASSERT_CUDA(gpu_upload(b.in, k.in, 8));
  /* Rank 0's splits one row past its send_rows. */
  ASSERT_OK(symm_all_to_all_vdev(c->comm, b.send, R == 0 ? b.send_cap - 1 : b.send_cap, b.recv,
                                 b.recv_cap, 4, f32, b.in, b.out, c->stream));
  a2av_expect_refused(c, SYMM_ERR_INVALID_ARG, "exceed its send_rows", &b, 16,
                      "splits past send_rows");
  /* Host counts: rank 0 expects one element more from the last rank. */
  size_t sc[32], rc[32];
  for (int p = 0; p < W; p++) sc[p] = a2av_c(m, R, p, 0), rc[p] = a2av_c(m, p, R, 0);
  if (R == 0) rc[last]++;
  ASSERT_OK(symm_all_to_all_v(c->comm, b.send, sc, NULL, b.recv, rc, NULL, SYMM_DTYPE_U8,
                              c->stream));
  a2av_expect_refused(c, SYMM_ERR_MISMATCH, "recv_counts says", &b, 16, "host counts differ");
  /* The communicator still works. */
  ASSERT_OK(a2av_dev_run(c, &k, &b, 4, f32));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  a2av_dev_check(&k, &b, "after the refusals");
  a2av_dev_free(&b);
  a2av_call_free(&k);
  free(m);
  symm_comm_barrier(c->comm);
  return 0;
}

/* A captured CUDA graph of a 1-D and a 2-D dispatch, replayed with new
 * split values (and data) written into the device splits between replays,
 * and of host counts, which replay the counts captured. */
TEST_IMPL(gpu_coll_a2av_graph) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const int W = c->size, R = c->rank;
  const size_t most = 50, ne = 2, rb = 64;
  /* Capacities that hold any counts up to `most`. */
  const size_t cap = most * (size_t)W * ne + 16 * ne;
  size_t need = 0;
  ASSERT_OK(symm_comm_scratch_bytes(c->comm, cap * rb, &need));
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, need));
  a2av_counts_t *m = malloc(sizeof *m);
  ASSERT(m != NULL);
  a2av_dev_t b[2];
  for (int j = 0; j < 2; j++) {
    a2av_call_t k0;
    a2av_fill(m, W, j ? (int)ne : 1, PAT_ZEROS, 0, 0);
    a2av_dispatch_ref(m, R, j ? A2AV_2D : A2AV_1D, 16, rb, 0, false, &k0);
    a2av_dev_make(&k0, cap, false, &b[j]);
    a2av_call_free(&k0);
  }
  a2av_fill(m, W, 1, PAT_RANDOM, 7000u, most);
  a2av_call_t hk;
  a2av_dispatch_ref(m, R, A2AV_1D, 1, 4, 9, false, &hk); /* host counts: 4-byte elements */
  hk.nout = 0; /* host counts write no splits */
  size_t sc[32], rc[32];
  for (int p = 0; p < W; p++) sc[p] = a2av_c(m, R, p, 0), rc[p] = a2av_c(m, p, R, 0);
  a2av_dev_t hb;
  a2av_dev_make(&hk, 0, false, &hb);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  ASSERT_CUDA(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  ASSERT_OK(symm_all_to_all_vdev(c->comm, b[0].send, cap, b[0].recv, cap, rb / 2,
                                 SYMM_DTYPE_BF16, b[0].in, b[0].out, c->stream));
  ASSERT_OK(symm_all_to_all_vdev_2d(c->comm, b[1].send, cap, b[1].recv, cap, rb / 2,
                                    SYMM_DTYPE_BF16, b[1].in, b[1].out, (int)ne, 16, c->stream));
  ASSERT_OK(symm_all_to_all_v(c->comm, hb.send, sc, NULL, hb.recv, rc, NULL, SYMM_DTYPE_I32,
                              c->stream));
  ASSERT_CUDA(cudaStreamEndCapture(c->stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 4; rep++) {
    a2av_call_t k[2];
    for (int j = 0; j < 2; j++) {
      a2av_fill(m, W, j ? (int)ne : 1, rep == 2 ? PAT_SKEWED : PAT_RANDOM,
                8000u + (uint32_t)(rep * 2 + j), most);
      a2av_dispatch_ref(m, R, j ? A2AV_2D : A2AV_1D, 16, rb, 10 + rep, false, &k[j]);
      ASSERT_CUDA(gpu_upload(b[j].in, k[j].in, k[j].nin * 8));
      ASSERT_CUDA(gpu_upload(b[j].send, k[j].send, k[j].send_rows * rb));
      ASSERT_CUDA(cudaMemset(b[j].recv, 0xa5, cap * rb));
    }
    ASSERT_CUDA(cudaMemset(hb.recv, 0xa5, hb.recv_cap * 4));
    ASSERT_CUDA(cudaDeviceSynchronize());
    symm_comm_barrier(c->comm); /* every rank's inputs are in place */
    ASSERT_CUDA(cudaGraphLaunch(exec, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_OK(symm_comm_check_async_error(c->comm));
    char what[64];
    for (int j = 0; j < 2; j++) {
      snprintf(what, sizeof what, "graph replay %d, %s", rep, j ? "vdev_2d" : "vdev");
      b[j].recv_cap = cap; /* the spare check below counts from the rows received */
      a2av_dev_check(&k[j], &b[j], what);
      a2av_call_free(&k[j]);
    }
    snprintf(what, sizeof what, "graph replay %d, host counts", rep);
    a2av_dev_check(&hk, &hb, what);
    symm_comm_barrier(c->comm); /* the next replay's inputs after every rank read */
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (int j = 0; j < 2; j++) a2av_dev_free(&b[j]);
  a2av_dev_free(&hb);
  a2av_call_free(&hk);
  free(m);
  symm_comm_barrier(c->comm);
  return 0;
}

/* ------------------------------------------------- copy-engine (ce) */

/* The collectives that move data on the copy engines (SYMM_ALGO_CE):
 * all-gather, broadcast and all-to-all at every size class (one element
 * to several MiB), in place and out of place, bytes to 8-byte elements;
 * all-to-all-v with host counts, packed, with gaps, in place. */
TEST_IMPL(gpu_coll_ce) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_CE));
  c->algo = SYMM_ALGO_CE;
  const size_t sizes[] = {1, 7, 1003, 65537, ((size_t)1 << 20) + 5, ((size_t)3 << 20) + 1};
  const symm_dtype_t dts[] = {SYMM_DTYPE_F32, SYMM_DTYPE_BF16, SYMM_DTYPE_U8, SYMM_DTYPE_I64};
  int salt = 5000;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int d = 0; d < 4; d++)
      for (int ip = 0; ip < 2; ip++) {
        if (sizes[s] > 65537 && d % 2 != ip) continue; /* keep the large cases few */
        run_case(c, K_AG, dts[d], SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
        run_case(c, K_BC, dts[d], SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
        run_case(c, K_A2A, dts[d], SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
      }
  const int W = c->size;
  a2av_reserve(c, (size_t)W * W * 300 * 8 * 2);
  a2av_counts_t *m = malloc(sizeof *m);
  ASSERT(m != NULL);
  for (int pat = PAT_RANDOM; pat <= PAT_SILENT; pat++)
    for (int v = 0; v < 3; v++) {
      a2av_fill(m, W, 1, pat, 7000u + (uint32_t)salt, 300);
      a2av_host_case(c, m, v ? SYMM_DTYPE_I64 : SYMM_DTYPE_U8, v == 1, v == 2, ++salt);
    }
  free(m);
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_AUTO));
  symm_comm_barrier(c->comm);
  return 0;
}

/* The buffers of ce_graph: n x W floats of input, all-gather and
 * all-to-all output, n of broadcast output. */
typedef struct ce_graph_bufs {
  float *in, *ag, *a2a, *bc;
} ce_graph_bufs_t;

/* Copy-engine all-gather, all-to-all and broadcast on b captured in one
 * CUDA graph replay correctly, with new input every replay. */
static void ce_graph_run(coll_t *c, const ce_graph_bufs_t *b, size_t n, const char *what) {
  const int W = c->size, root = W - 1;
  float *h = malloc(n * W * sizeof(float));
  ASSERT(h != NULL);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  ASSERT_CUDA(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  ASSERT_OK(symm_all_gather(c->comm, b->in, b->ag, n, SYMM_DTYPE_F32, c->stream));
  ASSERT_OK(symm_all_to_all(c->comm, b->in, b->a2a, n, SYMM_DTYPE_F32, c->stream));
  ASSERT_OK(symm_broadcast(c->comm, b->in, b->bc, n, SYMM_DTYPE_F32, root, c->stream));
  ASSERT_CUDA(cudaStreamEndCapture(c->stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; rep++) {
    const int salt = 300 + rep;
    for (size_t i = 0; i < n * W; i++)
      h[i] = (float)value(c->rank, i, salt, SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_CUDA(gpu_upload(b->in, h, n * W * sizeof(float)));
    ASSERT_CUDA(cudaDeviceSynchronize()); /* the pageable copy's tail, see run_case */
    symm_comm_barrier(c->comm); /* every rank's input is in place before any reads it */
    ASSERT_CUDA(cudaGraphLaunch(exec, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_OK(symm_comm_check_async_error(c->comm));
    size_t bad = 0;
    ASSERT_CUDA(cudaMemcpy(h, b->ag, n * W * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n * W; i++)
      bad += h[i] != (float)value((int)(i / n), i % n, salt, SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_CUDA(cudaMemcpy(h, b->a2a, n * W * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n * W; i++)
      bad += h[i] != (float)value((int)(i / n), (size_t)c->rank * n + i % n, salt,
                                  SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_CUDA(cudaMemcpy(h, b->bc, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
      bad += h[i] != (float)value(root, i, salt, SYMM_REDUCE_SUM, SYMM_DTYPE_F32, W);
    ASSERT_MSG(bad == 0, "%s graph replay %d: %zu wrong", what, rep, bad);
    symm_comm_barrier(c->comm);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  free(h);
}

/* Copy-engine all-gather, all-to-all and broadcast on ordinary device
 * memory (staged) captured in one CUDA graph replay correctly: the
 * barriers carry no host-side counter. */
TEST_IMPL(gpu_coll_ce_graph) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  const size_t n = 4099;
  const int W = c->size;
  size_t need = 0;
  ASSERT_OK(symm_comm_scratch_bytes(c->comm, n * W * sizeof(float), &need));
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, need));
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_CE));
  ce_graph_bufs_t b;
  ASSERT_CUDA(cudaMalloc((void **)&b.in, n * W * sizeof(float)));
  ASSERT_CUDA(cudaMalloc((void **)&b.ag, n * W * sizeof(float)));
  ASSERT_CUDA(cudaMalloc((void **)&b.a2a, n * W * sizeof(float)));
  ASSERT_CUDA(cudaMalloc((void **)&b.bc, n * sizeof(float)));
  ce_graph_run(c, &b, n, "ce staged");
  cudaFree(b.in);
  cudaFree(b.ag);
  cudaFree(b.a2a);
  cudaFree(b.bc);
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_AUTO));
  symm_comm_barrier(c->comm);
  return 0;
}

/* A rendezvoused tensor of `bytes` (this rank's data). */
static symm_tensor_t *ce_tensor(coll_t *c, size_t bytes) {
  int64_t n = (int64_t)bytes;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  return t;
}

/* The copy engines' direct path: buffers inside a symmetric tensor at the
 * same offset on every rank (recvbuf: all-gather and broadcast read the
 * peers' recvbuf; sendbuf: all-gather and all-to-all read the peers'
 * sendbuf), in place and out of place, up to outputs larger than the
 * default scratch (the direct path stages nothing), and captured in a
 * CUDA graph.  Layouts the direct path does not take (all-to-all into a
 * symmetric recvbuf, broadcast from a symmetric sendbuf) run staged. */
TEST_IMPL(gpu_coll_ce_direct) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 1)) return TEST_SKIP;
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_CE));
  c->algo = SYMM_ALGO_CE;
  const int W = c->size;
  const size_t big = ((size_t)40 << 20) / ((size_t)W * 4) + 4099; /* W x big floats > 40 MiB */
  const size_t sizes[] = {1, 1003, 65537, big};
  symm_tensor_t *ts = ce_tensor(c, big * W * 4 + 4096), *tr = ce_tensor(c, big * W * 4 + 4096);
  int salt = 9100;
  for (int layout = 0; layout < 3; layout++) {
    /* 0: recvbuf symmetric; 1: sendbuf symmetric; 2: both. */
    c->recv_buf = layout != 1 ? symm_tensor_data(tr) : NULL;
    c->send_buf = layout != 0 ? (char *)symm_tensor_data(ts) + 256 : NULL;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int ip = 0; ip < 2; ip++) {
        run_case(c, K_AG, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
        run_case(c, K_BC, s % 2 ? SYMM_DTYPE_BF16 : SYMM_DTYPE_F32, SYMM_REDUCE_SUM, sizes[s],
                 ip, ++salt);
        run_case(c, K_A2A, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, sizes[s], ip, ++salt);
      }
  }
  c->recv_buf = c->send_buf = NULL;
  const size_t n = 4099;
  ce_graph_bufs_t b = {(float *)symm_tensor_data(ts), (float *)symm_tensor_data(tr), NULL,
                       (float *)symm_tensor_data(tr) + n * W + 64};
  ASSERT_CUDA(cudaMalloc((void **)&b.a2a, n * W * sizeof(float)));
  ce_graph_run(c, &b, n, "ce direct");
  cudaFree(b.a2a);
  symm_comm_barrier(c->comm);
  symm_tensor_free(ts);
  symm_tensor_free(tr);
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_AUTO));
  symm_comm_barrier(c->comm);
  return 0;
}

/* Ranks that disagree on the copy engines' direct path (rank 0's recvbuf
 * in a symmetric tensor, the others' in ordinary memory): every rank
 * records SYMM_ERR_MISMATCH naming where the buffers lie, and no rank's
 * tensor outside its own recvbuf is written. */
TEST_IMPL(gpu_coll_ce_direct_mismatch) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 2)) return TEST_SKIP;
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_CE));
  const int W = c->size;
  const size_t n = 1000, bytes = n * W + 4096;
  symm_tensor_t *t = ce_tensor(c, bytes);
  void *plain = NULL, *send = NULL;
  ASSERT_CUDA(cudaMalloc(&plain, n * W));
  ASSERT_CUDA(cudaMalloc(&send, n));
  ASSERT_CUDA(cudaMemset(send, c->rank + 1, n));
  ASSERT_CUDA(cudaMemset(symm_tensor_data(t), 0xAB, bytes));
  ASSERT_CUDA(cudaDeviceSynchronize());
  symm_comm_barrier(c->comm);
  void *recv = c->rank == 0 ? symm_tensor_data(t) : plain;
  ASSERT_OK(symm_all_gather(c->comm, send, recv, n, SYMM_DTYPE_U8, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "symmetric tensor");
  symm_comm_barrier(c->comm);
  unsigned char *h = malloc(bytes);
  ASSERT(h != NULL);
  ASSERT_CUDA(cudaMemcpy(h, symm_tensor_data(t), bytes, cudaMemcpyDeviceToHost));
  size_t touched = 0;
  for (size_t i = c->rank == 0 ? n * W : 0; i < bytes; i++) touched += h[i] != 0xAB;
  ASSERT_MSG(touched == 0, "rank %d: %zu bytes of the tensor outside recvbuf written", c->rank,
             touched);
  run_case(c, K_AG, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, 1000, false, 9201);
  free(h);
  cudaFree(plain);
  cudaFree(send);
  symm_tensor_free(t);
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_AUTO));
  symm_comm_barrier(c->comm);
  return 0;
}

/* Copy-engine calls that differ between ranks: every rank sees
 * SYMM_ERR_MISMATCH, none hangs, the next matching call works; the
 * device-split all-to-all-v is refused naming why. */
TEST_IMPL(gpu_coll_ce_mismatch) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 2)) return TEST_SKIP;
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_CE));
  c->algo = SYMM_ALGO_CE;
  void *buf = NULL;
  ASSERT_CUDA(cudaMalloc(&buf, (size_t)64 * c->size));
  ASSERT_OK(symm_all_gather(c->comm, buf, buf, c->rank == 0 ? 8 : 9, SYMM_DTYPE_U8, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "copy-engine collective");
  int64_t *splits = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&splits, sizeof(int64_t) * 3 * 32));
  ASSERT_CUDA(cudaMemset(splits, 0, sizeof(int64_t) * 3 * 32));
  ASSERT_RES(symm_all_to_all_vdev(c->comm, buf, 8, buf, 8, 1, SYMM_DTYPE_U8, splits, splits + 32,
                                  c->stream),
             SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "device memory");
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  (void)symm_comm_check_async_error(c->comm); /* every rank met the others as refused */
  ASSERT_RES(symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_CE), SYMM_ERR_UNSUPPORTED);
  run_case(c, K_AG, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, 1000, false, 9001);
  cudaFree(splits);
  cudaFree(buf);
  ASSERT_OK(symm_comm_set_copy_algo(c->comm, SYMM_ALGO_AUTO));
  symm_comm_barrier(c->comm);
  return 0;
}

/* The last rank never calls; the others get SYMM_ERR_TIMEOUT from the
 * device within about SYMM_TIMEOUT_MS instead of hanging.  Needs a short
 * timeout (run-gpu-tests.sh: SYMM_TIMEOUT_MS=3000), and leaves the
 * communicator's peers out of step: last in the list, best run alone. */
TEST_IMPL(gpu_coll_rank_never_calls) {
  coll_t c0, *c = &c0;
  if (coll_begin(c, 2)) return TEST_SKIP;
  const int tmo = symm_comm_timeout_ms(c->comm);
  if (tmo > 10000)
    return gpu_skip("needs SYMM_TIMEOUT_MS of 10000 or less, not %d (the last rank sleeps "
                    "2.5 times that)", tmo);
  const size_t n = 4096;
  float *a = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&a, n * sizeof(float)));
  ASSERT_OK(symm_comm_reserve_scratch(c->comm, (size_t)32 << 20));
  int64_t pad_only = 64;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, &pad_only, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  if (c->rank != c->size - 1) {
    /* A signal the last rank never sends: reported, not a hang. */
    ASSERT_OK(symm_signal_wait(t, c->size - 1, 0, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "signal");
    printf("rank %d: signal timeout reported: %s\n", c->rank, symm_last_error());
  }
  if (c->rank != c->size - 1) {
    ASSERT_OK(symm_all_reduce(c->comm, a, a, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream));
    ASSERT_CUDA(cudaStreamSynchronize(c->stream));
    ASSERT_RES(symm_comm_check_async_error(c->comm), SYMM_ERR_TIMEOUT);
    printf("rank %d: timeout reported: %s\n", c->rank, symm_last_error());
  } else {
    usleep((useconds_t)tmo * 2500); /* arrive at the barrier after the others time out twice */
    ASSERT_OK(symm_comm_check_async_error(c->comm));
  }
  symm_comm_barrier(c->comm);
  cudaFree(a);
  symm_tensor_free(t);
  return 0;
}
