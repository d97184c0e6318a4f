/* A matmul and an all-gather side by side: what the copy engines
 * (SYMM_ALGO_CE) leave to a GEMM that the SM all-gather kernel takes.
 *
 * Every rank runs, on its own GPU (or ranks sharing one, with
 * SYMM_ALLOW_SHARED_DEVICE=1), an f32 tiled matmul of N x N on
 * one stream and a symm_all_gather of B bytes a rank on another, each
 * repeated ITERS times, and prints (rank 0) for the SM kernel (auto) and
 * the copy engines (ce):
 *   algo  gemm_ms  coll_ms  both_ms  overlap
 * gemm_ms and coll_ms alone, both_ms with both streams launched together
 * (the time until both are done), and overlap = (gemm + coll - both) /
 * min(gemm, coll): 1 when the shorter one hides entirely under the longer,
 * 0 when they run one after the other.  Every all-gather's data is checked
 * once per algorithm.
 *   symmem-run -n 2 -- build/bench/bench_ce_overlap [N] [BYTES] [ITERS]
 * (defaults 4096, 64 MiB, 10).  Times are medians over the ranks' maxima
 * of 3 runs.  The matmul is a plain shared-memory tiled kernel of our own
 * (no cuBLAS): it keeps every SM busy, which is what the comparison needs.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_check.h"

#define TILE 32

/* C = A x B, N x N, row-major; one 32 x 32 tile of C per block. */
__global__ void matmul_tiled(const float *__restrict__ a, const float *__restrict__ b,
                             float *__restrict__ c, int n) {
  __shared__ float as[TILE][TILE], bs[TILE][TILE + 1];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    as[threadIdx.y][threadIdx.x] =
        row < n && k0 + threadIdx.x < n ? a[(size_t)row * n + k0 + threadIdx.x] : 0.f;
    bs[threadIdx.y][threadIdx.x] =
        col < n && k0 + threadIdx.y < n ? b[(size_t)(k0 + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; k++) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[(size_t)row * n + col] = acc;
}

typedef struct setup {
  symm_comm_t *comm;
  int rank, world, n, iters;
  size_t bytes;
  cudaStream_t gemm_s, coll_s;
  float *a, *b, *c;
  unsigned char *send, *recv;
} setup_t;

static void gemm(setup_t *s) {
  dim3 grid((s->n + TILE - 1) / TILE, (s->n + TILE - 1) / TILE), block(TILE, TILE);
  for (int i = 0; i < s->iters; i++)
    matmul_tiled<<<grid, block, 0, s->gemm_s>>>(s->a, s->b, s->c, s->n);
  CUDA(cudaGetLastError());
}

static void gather(setup_t *s) {
  for (int i = 0; i < s->iters; i++)
    CHECK(symm_all_gather(s->comm, s->send, s->recv, s->bytes, SYMM_DTYPE_U8, s->coll_s));
}

/* Milliseconds from a common start until what `what` enqueues (1 gemm,
 * 2 all-gather, 3 both) is done, the slowest rank's. */
static double timed(setup_t *s, int what) {
  CUDA(cudaDeviceSynchronize());
  CHECK(symm_comm_barrier(s->comm));
  cudaEvent_t t0, g, c;
  CUDA(cudaEventCreate(&t0));
  CUDA(cudaEventCreate(&g));
  CUDA(cudaEventCreate(&c));
  CUDA(cudaEventRecord(t0, s->gemm_s));
  CUDA(cudaStreamWaitEvent(s->coll_s, t0, 0));
  if (what & 1) gemm(s);
  if (what & 2) gather(s);
  CUDA(cudaEventRecord(g, s->gemm_s));
  CUDA(cudaEventRecord(c, s->coll_s));
  CUDA(cudaEventSynchronize(g));
  CUDA(cudaEventSynchronize(c));
  float mg = 0.f, mc = 0.f;
  CUDA(cudaEventElapsedTime(&mg, t0, g));
  CUDA(cudaEventElapsedTime(&mc, t0, c));
  CHECK(symm_comm_check_async_error(s->comm));
  cudaEventDestroy(t0);
  cudaEventDestroy(g);
  cudaEventDestroy(c);
  /* The slowest rank's time: an all-gather of 8-byte doubles. */
  double mine = mg > mc ? mg : mc, *all = (double *)malloc(sizeof(double) * s->world);
  double *dmine = NULL, *dall = NULL;
  CUDA(cudaMalloc((void **)&dmine, sizeof(double)));
  CUDA(cudaMalloc((void **)&dall, sizeof(double) * s->world));
  CUDA(cudaMemcpy(dmine, &mine, sizeof mine, cudaMemcpyHostToDevice));
  CHECK(symm_all_gather(s->comm, dmine, dall, 1, SYMM_DTYPE_F64, s->coll_s));
  CUDA(cudaStreamSynchronize(s->coll_s));
  CUDA(cudaMemcpy(all, dall, sizeof(double) * s->world, cudaMemcpyDeviceToHost));
  double most = 0;
  for (int r = 0; r < s->world; r++) most = all[r] > most ? all[r] : most;
  cudaFree(dmine);
  cudaFree(dall);
  free(all);
  return most;
}

static double median3(setup_t *s, int what) {
  double t[3];
  for (int i = 0; i < 3; i++) t[i] = timed(s, what);
  if (t[0] > t[1]) { double x = t[0]; t[0] = t[1]; t[1] = x; }
  if (t[1] > t[2]) { double x = t[1]; t[1] = t[2]; t[2] = x; }
  if (t[0] > t[1]) { double x = t[0]; t[0] = t[1]; t[1] = x; }
  return t[1];
}

/* One all-gather checked against what every rank wrote: the number of
 * wrong bytes here. */
static size_t check_gather(setup_t *s) {
  unsigned char *h = (unsigned char *)malloc(s->bytes * s->world);
  for (size_t i = 0; i < s->bytes; i++) h[i] = (unsigned char)(s->rank * 31 + i % 251);
  CUDA(cudaMemcpy(s->send, h, s->bytes, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(s->recv, 0, s->bytes * s->world));
  CUDA(cudaDeviceSynchronize());
  CHECK(symm_comm_barrier(s->comm));
  CHECK(symm_all_gather(s->comm, s->send, s->recv, s->bytes, SYMM_DTYPE_U8, s->coll_s));
  CUDA(cudaStreamSynchronize(s->coll_s));
  CHECK(symm_comm_check_async_error(s->comm));
  CUDA(cudaMemcpy(h, s->recv, s->bytes * s->world, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (int r = 0; r < s->world; r++)
    for (size_t i = 0; i < s->bytes; i++)
      wrong += h[(size_t)r * s->bytes + i] != (unsigned char)(r * 31 + i % 251);
  free(h);
  return wrong;
}

static void setup(setup_t *s, int argc, char **argv) {
  memset(s, 0, sizeof *s);
  s->n = argc > 1 ? atoi(argv[1]) : 4096;
  s->bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (size_t)64 << 20;
  s->iters = argc > 3 ? atoi(argv[3]) : 10;
  if (s->n < TILE || !s->bytes || s->iters < 1) {
    fprintf(stderr, "usage: bench_ce_overlap [N >= %d] [BYTES > 0] [ITERS >= 1]\n", TILE);
    exit(2);
  }
  CHECK(symm_comm_init(NULL, &s->comm));
  s->rank = symm_comm_rank(s->comm);
  s->world = symm_comm_size(s->comm);
  if (s->world < 2 || symm_comm_device(s->comm) < 0) {
    fprintf(stderr, "bench_ce_overlap needs >= 2 ranks on a GPU backend\n");
    exit(1);
  }
  CUDA(cudaSetDevice(symm_comm_device(s->comm)));
  CUDA(cudaStreamCreateWithFlags(&s->gemm_s, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&s->coll_s, cudaStreamNonBlocking));
  const size_t mat = (size_t)s->n * s->n * sizeof(float);
  CUDA(cudaMalloc((void **)&s->a, mat));
  CUDA(cudaMalloc((void **)&s->b, mat));
  CUDA(cudaMalloc((void **)&s->c, mat));
  CUDA(cudaMemset(s->a, 0, mat));
  CUDA(cudaMemset(s->b, 0, mat));
  CUDA(cudaMalloc((void **)&s->send, s->bytes));
  CUDA(cudaMalloc((void **)&s->recv, s->bytes * s->world));
  size_t need = 0;
  CHECK(symm_comm_scratch_bytes(s->comm, s->bytes * s->world, &need));
  CHECK(symm_comm_reserve_scratch(s->comm, need));
}

int main(int argc, char **argv) {
  setup_t s;
  setup(&s, argc, argv);
  int sms = 0;
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, symm_comm_device(s.comm)));
  if (s.rank == 0)
    printf("# bench_ce_overlap: %d ranks, backend %s, %d SMs, matmul f32 %d x %d, all-gather "
           "%zu B a rank, %d of each per run, medians of 3 (ms, slowest rank)\n"
           "# %-5s %10s %10s %10s %8s %7s\n",
           s.world, symm_backend_name(symm_comm_backend(s.comm)), sms, s.n, s.n, s.bytes,
           s.iters, "algo", "gemm_ms", "coll_ms", "both_ms", "overlap", "#wrong");
  const double g = median3(&s, 1);
  int status = 0;
  static const symm_algo_t algos[2] = {SYMM_ALGO_AUTO, SYMM_ALGO_CE};
  for (int k = 0; k < 2; k++) {
    CHECK(symm_comm_set_copy_algo(s.comm, algos[k]));
    const size_t wrong = check_gather(&s);
    const double c = median3(&s, 2), both = median3(&s, 3);
    const double shorter = g < c ? g : c, overlap = shorter > 0 ? (g + c - both) / shorter : 0;
    if (wrong) status = 1;
    if (s.rank == 0)
      printf("  %-5s %10.3f %10.3f %10.3f %8.2f %7zu\n", k ? "ce" : "sm", g, c, both, overlap,
             wrong);
  }
  CHECK(symm_comm_barrier(s.comm));
  symm_comm_destroy(s.comm);
  return status;
}
