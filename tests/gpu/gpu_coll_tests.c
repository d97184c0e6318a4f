/*
 * GPU tests of the collectives (native backend, or the GPU backend that
 * SYMM_BACKEND names), run under the launcher:
 *   SYMM_BACKEND=native symmem-run -n 2 -- symm-gpu-coll-tests [--quick]
 *   SYMM_TIMEOUT_MS=3000 symmem-run -n 2 -- symm-gpu-coll-tests --timeout
 * Every op x dtype x reduction against a host reference at odd sizes, the
 * three all-reduce algorithms, in place and out of place, CUDA graph capture
 * and replay, mismatched calls (SYMM_ERR_MISMATCH on every rank), and with
 * --timeout a rank that never calls (SYMM_ERR_TIMEOUT, no hang).  Inputs are
 * small integers, exact in every dtype, so results compare exactly whatever
 * the order of reduction.  Each rank prints its failures; the exit status is
 * non-zero if any check failed on this rank.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symmem.h"

typedef struct ctx {
  symm_comm_t *comm;
  int rank, size;
  bool quick;
  symm_algo_t algo; /* the all-reduce algorithm set last (for messages) */
  void *recv_buf;   /* not NULL: run_case's recv (and in place, send) buffer */
  int failed, checks;
  cudaStream_t stream;
} ctx_t;

#define FAIL(c, ...)                                                           \
  do {                                                                         \
    fprintf(stderr, "rank %d: FAIL line %d: ", (c)->rank, __LINE__);           \
    fprintf(stderr, __VA_ARGS__);                                              \
    fputc('\n', stderr);                                                       \
    (c)->failed++;                                                             \
  } while (0)
#define EXPECT(c, call, want)                                                  \
  do {                                                                         \
    symm_result_t r_ = (call);                                                 \
    (c)->checks++;                                                             \
    if (r_ != (want))                                                          \
      FAIL(c, "%s -> %s, expected %s (%s)", #call, symm_strerror(r_),          \
           symm_strerror(want), symm_last_error());                            \
  } while (0)
#define CUDA(c, call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) FAIL(c, "%s: %s", #call, cudaGetErrorString(e_));   \
  } while (0)

/* --------------------------------------------------- host-side values */

/* Element i of rank r's input (salt varies per case): an integer in
 * [-8, 8], exact in f32, bf16, f16 and i32. */
static int value(int r, size_t i, int salt) {
  return (int)((i * 7 + (size_t)r * 13 + (size_t)salt * 5) % 17) - 8;
}

static uint16_t f32_to_f16(float f) { /* exact for small integers */
  if (f == 0) return 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  int e;
  float m = frexpf(fabsf(f), &e); /* |f| = m * 2^e, m in [0.5, 1) */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}
static float f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 31, frac = h & 1023;
  float v = e == 0 ? ldexpf((float)frac, -24) : ldexpf(1.0f + frac / 1024.0f, e - 15);
  return (h & 0x8000) ? -v : v;
}
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void put(symm_dtype_t dt, void *buf, size_t i, int v) {
  switch (dt) {
    case SYMM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case SYMM_DTYPE_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case SYMM_DTYPE_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    default: ((int32_t *)buf)[i] = v; break;
  }
}
static double get(symm_dtype_t dt, const void *buf, size_t i) {
  switch (dt) {
    case SYMM_DTYPE_F32: return ((const float *)buf)[i];
    case SYMM_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case SYMM_DTYPE_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
    default: return ((const int32_t *)buf)[i];
  }
}

/* op over ranks of element i (the caller passes the global index). */
static int reduce_ref(symm_redop_t op, int world, size_t i, int salt) {
  int acc = 0;
  for (int r = 0; r < world; r++) {
    int v = value(r, i, salt);
    acc = r == 0 ? v : op == SYMM_REDUCE_SUM ? acc + v : op == SYMM_REDUCE_MIN ? (v < acc ? v : acc)
                                                                             : (v > acc ? v : acc);
  }
  return acc;
}

/* ------------------------------------------------------------- cases */

typedef enum { K_AR, K_RS, K_AG, K_BC, K_A2A } kind_t;
static const char *const kind_names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                         "broadcast", "all_to_all"};

/* Runs one collective on device buffers made from the host reference and
 * compares the result on the host.  Returns the number of wrong elements. */
static size_t run_case(ctx_t *c, kind_t kind, symm_dtype_t dt, symm_redop_t op, size_t n,
                       bool in_place, int salt) {
  const int W = c->size, R = c->rank, root = W - 1;
  const size_t es = symm_dtype_size(dt);
  size_t send_n = (kind == K_RS || kind == K_A2A) ? n * W : n;
  size_t recv_n = (kind == K_AG || kind == K_A2A) ? n * W : n;
  size_t buf_n = send_n > recv_n ? send_n : recv_n;
  char *h = malloc(buf_n * es), *out = malloc(buf_n * es);
  void *dsend = NULL, *drecv = NULL;
  size_t wrong = 0;
  if (!h || !out) {
    FAIL(c, "malloc");
    goto done;
  }
  /* Input: global index g of this rank's send buffer holds value(R, g). */
  for (size_t i = 0; i < send_n; i++) put(dt, h, i, value(R, i, salt));
  if (c->recv_buf && in_place) dsend = c->recv_buf;
  else CUDA(c, cudaMalloc(&dsend, buf_n * es));
  if (c->recv_buf && !in_place) drecv = c->recv_buf;
  else if (!in_place) CUDA(c, cudaMalloc(&drecv, buf_n * es));
  if (!dsend || (!in_place && !drecv)) goto done;
  if (in_place) drecv = dsend;
  CUDA(c, cudaMemset(drecv, 0x7f, buf_n * es));
  if (kind == K_AG && in_place) {
    /* In-place all-gather: this rank's part already sits at rank * n. */
    CUDA(c, cudaMemcpy((char *)dsend + (size_t)R * n * es, h, n * es, cudaMemcpyHostToDevice));
  } else {
    CUDA(c, cudaMemcpy(dsend, h, send_n * es, cudaMemcpyHostToDevice));
  }
  /* A copy from pageable memory may return before its last piece reached
   * the device, and c->stream (non-blocking) does not wait for it: without
   * this the kernels read a stale tail (seen: the last 5 elements of
   * 1048581, which an earlier session took for a library bug). */
  CUDA(c, cudaDeviceSynchronize());
  const void *sb = kind == K_AG && in_place ? (char *)dsend + (size_t)R * n * es : dsend;
  symm_result_t res = SYMM_ERR_INTERNAL;
  switch (kind) {
    case K_AR: res = symm_all_reduce(c->comm, sb, drecv, n, dt, op, c->stream); break;
    case K_RS: res = symm_reduce_scatter(c->comm, sb, drecv, n, dt, op, c->stream); break;
    case K_AG: res = symm_all_gather(c->comm, sb, drecv, n, dt, c->stream); break;
    case K_BC: res = symm_broadcast(c->comm, sb, drecv, n, dt, root, c->stream); break;
    case K_A2A: res = symm_all_to_all(c->comm, sb, drecv, n, dt, c->stream); break;
  }
  c->checks++;
  if (res != SYMM_SUCCESS) FAIL(c, "%s: %s", kind_names[kind], symm_last_error());
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
  CUDA(c, cudaMemcpy(out, drecv, recv_n * es, cudaMemcpyDeviceToHost));
  size_t first = (size_t)-1;
  for (size_t i = 0; i < recv_n; i++) {
    int want;
    switch (kind) {
      case K_AR: want = reduce_ref(op, W, i, salt); break;
      case K_RS: want = reduce_ref(op, W, (size_t)R * n + i, salt); break;
      case K_AG: want = value((int)(i / n), i % n, salt); break;
      case K_BC: want = value(root, i, salt); break;
      default: want = value((int)(i / n), (size_t)R * n + i % n, salt); break;
    }
    if (get(dt, out, i) != (double)want) {
      if (first == (size_t)-1) first = i;
      wrong++;
    }
  }
  if (wrong)
    FAIL(c, "%s %s %s n=%zu %s (algorithm %s): %zu of %zu wrong (first at %zu: %g)",
         kind_names[kind], symm_dtype_name(dt), symm_redop_name(op), n,
         in_place ? "in place" : "out of place", symm_algo_name(c->algo), wrong, recv_n, first,
         get(dt, out, first));
done:
  if (dsend != c->recv_buf) cudaFree(dsend);
  if (!in_place && drecv != c->recv_buf) cudaFree(drecv);
  free(h);
  free(out);
  return wrong;
}

static const symm_dtype_t reducible[] = {SYMM_DTYPE_F32, SYMM_DTYPE_BF16, SYMM_DTYPE_F16,
                                         SYMM_DTYPE_I32};

/* Every op x dtype x reduction x size, all-reduce under each algorithm. */
static void test_ops(ctx_t *c) {
  /* 65537: an LL grid of many blocks (the packets still fit the LL area). */
  size_t sizes[] = {1, 7, 1003, 65537, ((size_t)1 << 20) + 5, ((size_t)3 << 20) + 1};
  int nsizes = c->quick ? 4 : 6;
  symm_algo_t algos[] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT,
                         SYMM_ALGO_AUTO};
  int salt = 0;
  for (int s = 0; s < nsizes; s++)
    for (int d = 0; d < 4; d++)
      for (int op = 0; op < SYMM_REDUCE_COUNT_; op++)
        for (int ip = 0; ip < 2; ip++) {
          bool big = sizes[s] > 4096;
          if (big && (op != SYMM_REDUCE_SUM || d == 3)) continue; /* keep large cases few */
          for (int a = 0; a < 5; a++) {
            symm_comm_set_allreduce_algo(c->comm, algos[a]);
            c->algo = algos[a];
            run_case(c, K_AR, reducible[d], (symm_redop_t)op, sizes[s], ip, ++salt);
          }
          symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
          c->algo = SYMM_ALGO_AUTO;
          run_case(c, K_RS, reducible[d], (symm_redop_t)op, sizes[s], ip, ++salt);
          if (op == SYMM_REDUCE_SUM) {
            run_case(c, K_AG, reducible[d], op, sizes[s], ip, ++salt);
            run_case(c, K_BC, reducible[d], op, sizes[s], ip, ++salt);
            run_case(c, K_A2A, reducible[d], op, sizes[s], ip, ++salt);
          }
        }
  /* Copies of a dtype that cannot be reduced (bytes). */
  run_case(c, K_AG, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, 5, false, ++salt);
  symm_comm_barrier(c->comm);
}

/* Collectives captured in a CUDA graph replay correctly several times:
 * the kernels carry no host-side sequence number. */
static void test_graph(ctx_t *c) {
  const size_t n = 4099;
  const int W = c->size;
  EXPECT(c, symm_comm_reserve_scratch(c->comm, (size_t)32 << 20), SYMM_SUCCESS);
  float *in = NULL, *ar[4] = {NULL, NULL, NULL, NULL}, *ag = NULL;
  CUDA(c, cudaMalloc((void **)&in, n * sizeof(float)));
  for (int a = 0; a < 4; a++) CUDA(c, cudaMalloc((void **)&ar[a], n * sizeof(float)));
  CUDA(c, cudaMalloc((void **)&ag, n * W * sizeof(float)));
  float *h = malloc(n * W * sizeof(float));
  symm_algo_t algos[4] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  for (int a = 0; a < 4; a++) {
    symm_comm_set_allreduce_algo(c->comm, algos[a]);
    EXPECT(c, symm_all_reduce(c->comm, in, ar[a], n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream),
           SYMM_SUCCESS);
  }
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
  EXPECT(c, symm_all_gather(c->comm, in, ag, n, SYMM_DTYPE_F32, c->stream), SYMM_SUCCESS);
  CUDA(c, cudaStreamEndCapture(c->stream, &graph));
  if (graph) CUDA(c, cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; exec && h && rep < 5; rep++) {
    for (size_t i = 0; i < n; i++) h[i] = (float)value(c->rank, i, 100 + rep);
    CUDA(c, cudaMemcpy(in, h, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA(c, cudaDeviceSynchronize()); /* the pageable copy's tail, see run_case */
    CUDA(c, cudaGraphLaunch(exec, c->stream));
    CUDA(c, cudaStreamSynchronize(c->stream));
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
    for (int a = 0; a < 4; a++) {
      CUDA(c, cudaMemcpy(h, ar[a], n * sizeof(float), cudaMemcpyDeviceToHost));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += h[i] != (float)reduce_ref(SYMM_REDUCE_SUM, W, i, 100 + rep);
      if (bad) FAIL(c, "graph replay %d, %s: %zu wrong", rep, symm_algo_name(algos[a]), bad);
    }
    CUDA(c, cudaMemcpy(h, ag, n * W * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n * W; i++) bad += h[i] != (float)value((int)(i / n), i % n, 100 + rep);
    if (bad) FAIL(c, "graph replay %d, all_gather: %zu wrong", rep, bad);
    /* The ranks must not start the next replay before every rank has
     * rewritten its input: the graph reads it. */
    symm_comm_barrier(c->comm);
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaFree(in);
  for (int a = 0; a < 4; a++) cudaFree(ar[a]);
  cudaFree(ag);
  free(h);
  symm_comm_barrier(c->comm);
}

/* Ranks enqueue different collectives: every rank sees SYMM_ERR_MISMATCH,
 * none hangs, and the next matching collective works. */
static void test_mismatch(ctx_t *c) {
  const size_t n = 1000;
  float *a = NULL, *b = NULL;
  CUDA(c, cudaMalloc((void **)&a, (n + 1) * c->size * sizeof(float)));
  CUDA(c, cudaMalloc((void **)&b, (n + 1) * c->size * sizeof(float)));
  CUDA(c, cudaMemset(a, 0, (n + 1) * c->size * sizeof(float)));
  EXPECT(c, symm_comm_reserve_scratch(c->comm, (size_t)32 << 20), SYMM_SUCCESS);
  symm_algo_t algos[4] = {SYMM_ALGO_LL, SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
  for (int k = 0; k < 4; k++) {
    symm_comm_set_allreduce_algo(c->comm, algos[k]);
    /* Count differs on rank 0. */
    EXPECT(c, symm_all_reduce(c->comm, a, b, c->rank == 0 ? n + 1 : n, SYMM_DTYPE_F32,
                              SYMM_REDUCE_SUM, c->stream), SYMM_SUCCESS);
    CUDA(c, cudaStreamSynchronize(c->stream));
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS); /* reading cleared it */
    symm_comm_barrier(c->comm);
  }
  symm_comm_set_allreduce_algo(c->comm, SYMM_ALGO_AUTO);
  /* Kind differs on rank 0 (all-gather against all-reduce). */
  if (c->rank == 0)
    EXPECT(c, symm_all_gather(c->comm, a, b, n, SYMM_DTYPE_F32, c->stream), SYMM_SUCCESS);
  else
    EXPECT(c, symm_all_reduce(c->comm, a, b, n, SYMM_DTYPE_F32, SYMM_REDUCE_MAX, c->stream),
           SYMM_SUCCESS);
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  /* Count 0 is collective too: against a count of n it is a mismatch on
   * every rank (not a call that pairs with the peers' next one); on every
   * rank it succeeds. */
  EXPECT(c, symm_all_reduce(c->comm, c->rank == 0 ? NULL : a, c->rank == 0 ? NULL : b,
                            c->rank == 0 ? 0 : n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream),
         SYMM_SUCCESS);
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  EXPECT(c, symm_all_reduce(c->comm, NULL, NULL, 0, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream),
         SYMM_SUCCESS);
  EXPECT(c, symm_all_gather(c->comm, NULL, NULL, 0, SYMM_DTYPE_F32, c->stream), SYMM_SUCCESS);
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
  symm_comm_barrier(c->comm);
  /* A call refused by rank 0's argument checks (no such dtype) still meets
   * the peers: a mismatch everywhere, not a call that pairs with the next. */
  EXPECT(c, symm_all_reduce(c->comm, a, b, n, c->rank == 0 ? (symm_dtype_t)99 : SYMM_DTYPE_F32,
                            SYMM_REDUCE_SUM, c->stream),
         c->rank == 0 ? SYMM_ERR_INVALID_ARG : SYMM_SUCCESS);
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_MISMATCH);
  symm_comm_barrier(c->comm);
  /* The communicator still works. */
  if (run_case(c, K_AR, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, 777, false, 4242) == 0)
    run_case(c, K_AG, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, 777, false, 4243);
  cudaFree(a);
  cudaFree(b);
  symm_comm_barrier(c->comm);
}

/* Two-shot all-reduce and all-gather on buffers inside a symmetric tensor:
 * in place and out of place, with the tensor at the same offset on every
 * rank (zero copy: results go straight into the peers' buffers), at
 * different offsets, and with only rank 0's buffer symmetric (staged). */
static void test_zero_copy(ctx_t *c) {
  const size_t sizes[] = {4099, ((size_t)1 << 20) + 5};
  int64_t bytes = (int64_t)(((size_t)1 << 20) + 64) * 4 * c->size + 4096;
  symm_tensor_t *t = NULL;
  EXPECT(c, symm_tensor_alloc(c->comm, &bytes, 1, SYMM_DTYPE_U8, &t), SYMM_SUCCESS);
  if (!t) return;
  EXPECT(c, symm_tensor_rendezvous(t), SYMM_SUCCESS);
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
}

/* Stream-ordered signals: data written into the peer's buffer before a
 * put is there after the matching wait (ping-pong, several rounds on two
 * channels), barriers on the stream and replayed from a CUDA graph, and
 * every pad back to zero afterwards. */
static void test_signals(ctx_t *c) {
  const size_t n = 4096;
  int64_t count = (int64_t)n;
  symm_tensor_t *t = NULL;
  EXPECT(c, symm_tensor_alloc(c->comm, &count, 1, SYMM_DTYPE_U8, &t), SYMM_SUCCESS);
  if (!t) return;
  EXPECT(c, symm_tensor_rendezvous(t), SYMM_SUCCESS);
  void *const *peers = NULL;
  EXPECT(c, symm_tensor_peer_ptrs(t, &peers), SYMM_SUCCESS);
  unsigned char *h = malloc(n);
  const int W = c->size, R = c->rank;
  const int right = (R + 1) % W, left = (R + W - 1) % W;
  for (int round = 1; peers && h && round <= 20; round++) {
    /* Everyone writes into the right neighbour, signals it on channel 0,
     * and waits for the left one. */
    CUDA(c, cudaMemsetAsync(peers[right], (R * 16 + round) & 0xff, n, c->stream));
    EXPECT(c, symm_signal_put(t, right, round & 1, c->stream), SYMM_SUCCESS);
    EXPECT(c, symm_signal_wait(t, left, round & 1, c->stream), SYMM_SUCCESS);
    CUDA(c, cudaMemcpyAsync(h, peers[R], n, cudaMemcpyDeviceToHost, c->stream));
    CUDA(c, cudaStreamSynchronize(c->stream));
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)((left * 16 + round) & 0xff);
    if (bad) FAIL(c, "signal round %d: %zu of %zu bytes from rank %d wrong", round, bad, n, left);
    /* The left neighbour writes into us again next round only after our
     * barrier: we have read this round's data. */
    EXPECT(c, symm_signal_barrier(t, 2, c->stream), SYMM_SUCCESS);
  }
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < 3; k++) EXPECT(c, symm_signal_barrier(t, 3 + k, c->stream), SYMM_SUCCESS);
  CUDA(c, cudaStreamEndCapture(c->stream, &graph));
  if (graph) CUDA(c, cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; exec && rep < 10; rep++) CUDA(c, cudaGraphLaunch(exec, c->stream));
  CUDA(c, cudaStreamSynchronize(c->stream));
  EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  symm_comm_barrier(c->comm);
  void *pad = NULL;
  EXPECT(c, symm_tensor_signal_pad(t, R, &pad), SYMM_SUCCESS);
  size_t pad_bytes = symm_signal_pad_bytes();
  unsigned char *hp = malloc(pad_bytes);
  if (pad && hp) {
    CUDA(c, cudaMemcpy(hp, pad, pad_bytes, cudaMemcpyDeviceToHost));
    size_t set = 0;
    for (size_t i = 0; i < pad_bytes; i++) set += hp[i] != 0;
    if (set) FAIL(c, "signals: %zu bytes of the pad not zero after balanced use", set);
  }
  free(hp);
  free(h);
  symm_tensor_free(t);
}

/* --timeout: the last rank never calls; the others get SYMM_ERR_TIMEOUT
 * from the device within about SYMM_TIMEOUT_MS instead of hanging. */
static void test_timeout(ctx_t *c) {
  const size_t n = 4096;
  float *a = NULL;
  CUDA(c, cudaMalloc((void **)&a, n * sizeof(float)));
  EXPECT(c, symm_comm_reserve_scratch(c->comm, (size_t)32 << 20), SYMM_SUCCESS);
  int tmo = symm_comm_timeout_ms(c->comm);
  int64_t pad_only = 64;
  symm_tensor_t *t = NULL;
  EXPECT(c, symm_tensor_alloc(c->comm, &pad_only, 1, SYMM_DTYPE_U8, &t), SYMM_SUCCESS);
  if (t) EXPECT(c, symm_tensor_rendezvous(t), SYMM_SUCCESS);
  if (t && c->rank != c->size - 1) {
    /* A signal the last rank never sends: reported, not a hang. */
    EXPECT(c, symm_signal_wait(t, c->size - 1, 0, c->stream), SYMM_SUCCESS);
    CUDA(c, cudaStreamSynchronize(c->stream));
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_TIMEOUT);
    if (!strstr(symm_last_error(), "signal"))
      FAIL(c, "signal timeout message: %s", symm_last_error());
    printf("rank %d: signal timeout reported: %s\n", c->rank, symm_last_error());
  }
  if (c->rank != c->size - 1) {
    EXPECT(c, symm_all_reduce(c->comm, a, a, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream),
           SYMM_SUCCESS);
    CUDA(c, cudaStreamSynchronize(c->stream));
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_ERR_TIMEOUT);
    printf("rank %d: timeout reported: %s\n", c->rank, symm_last_error());
  } else {
    usleep((useconds_t)tmo * 2500); /* arrive at the barrier after the others time out twice */
    EXPECT(c, symm_comm_check_async_error(c->comm), SYMM_SUCCESS);
  }
  symm_comm_barrier(c->comm);
  cudaFree(a);
  if (t) symm_tensor_free(t);
}

int main(int argc, char **argv) {
  ctx_t c = {0};
  bool timeout_only = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) c.quick = true;
    else if (strcmp(argv[i], "--timeout") == 0) timeout_only = true;
    else {
      fprintf(stderr, "usage: %s [--quick | --timeout]\n", argv[0]);
      return 2;
    }
  }
  symm_config_t cfg = SYMM_CONFIG_INIT;
  /* The native backend unless SYMM_BACKEND names another GPU backend: the
   * same collectives then run on cuda, nccl or nvshmem memory. */
  const char *backend = getenv("SYMM_BACKEND");
  if (!backend || !*backend) cfg.backend = SYMM_BACKEND_NATIVE;
  if (symm_comm_init(&cfg, &c.comm) != SYMM_SUCCESS) {
    fprintf(stderr, "symm_comm_init: %s\n", symm_last_error());
    return 1;
  }
  c.rank = symm_comm_rank(c.comm);
  c.size = symm_comm_size(c.comm);
  cudaSetDevice(symm_comm_device(c.comm));
  cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking);
  if (timeout_only) {
    test_timeout(&c);
  } else {
    struct { const char *name; void (*fn)(ctx_t *); } tests[] = {
        {"ops", test_ops}, {"graph", test_graph}, {"mismatch", test_mismatch},
        {"zero_copy", test_zero_copy},
        {"signals", test_signals}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
      int before = c.failed;
      tests[i].fn(&c);
      printf("rank %d: %-10s %s\n", c.rank, tests[i].name, c.failed == before ? "ok" : "FAIL");
      fflush(stdout);
    }
  }
  printf("rank %d: %d checks, %d failed\n", c.rank, c.checks, c.failed);
  cudaStreamDestroy(c.stream);
  symm_comm_destroy(c.comm);
  return c.failed ? 1 : 0;
}
