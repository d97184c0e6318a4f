/* A user kernel on symmetric GPU memory: a pipelined ring copy.
 *
 * Every rank allocates the same symmetric tensor.  In one kernel, block b of
 * rank r writes chunk b of its data straight into its right neighbour's
 * tensor (a peer pointer) and signals that neighbour on channel b
 * (symm_dev_put_signal_block: a system-scope release of the whole block's
 * writes).  Block b of the neighbour waits for that signal (the matching
 * acquire, symm_dev_wait_signal_block), reads the chunk, and answers on
 * channel blocks + b that it is done with it; the writer waits for that
 * answer before the kernel ends, so the next launch may overwrite the chunk.
 * Blocks work independently: chunk b is read as soon as it has arrived.  The
 * signals are self-resetting and every put is consumed within the kernel,
 * so it can be launched again (or replayed in a CUDA graph) with no
 * counters.  A rank whose neighbour never signals gets SYMM_DEV_ERR_TIMEOUT
 * in the error record instead of a hang.
 *
 *   symmem-run -n 2 build/examples/ring_signals      (one GPU per rank)
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "symmem.h"
#include "symmem_device.cuh"

#define CHECK(call)                                                                      \
  do {                                                                                   \
    symm_result_t r_ = (call);                                                           \
    if (r_ != SYMM_SUCCESS) {                                                            \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, symm_strerror(r_), symm_last_error()); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
#define CUDA(call)                                                                       \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));                 \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* What rank `writer` puts at element i in round `round`. */
static __device__ float value(int writer, int round, size_t i) {
  return (float)(writer * 100000 + round * 1000 + (int)(i % 1000));
}

struct ring {
  float *right_data;  /* the right neighbour's tensor, as mapped here */
  const float *mine;  /* this rank's tensor */
  uint32_t *right_pad, *left_pad, *my_pad;
  int rank, left, right, world, round;
  unsigned blocks;    /* channels b (chunk b is ready) and blocks + b (done with it) */
  size_t chunk;       /* elements per block */
  uint64_t timeout_ns;
};

__global__ void ring_copy(ring a, symm_dev_error_t *err, unsigned long long *wrong) {
  const size_t lo = (size_t)blockIdx.x * a.chunk;
  const unsigned ready = blockIdx.x, done = a.blocks + blockIdx.x, w = (unsigned)a.world;
  for (size_t i = lo + threadIdx.x; i < lo + a.chunk; i += blockDim.x)
    a.right_data[i] = value(a.rank, a.round, i);
  /* My chunk b has reached the right neighbour. */
  if (symm_dev_put_signal_block(a.right_pad, symm_dev_signal_slot(ready, a.rank, w), 1u,
                                (unsigned)a.right, a.timeout_ns, err) != SYMM_DEV_SUCCESS)
    return;
  /* The left neighbour's chunk b has reached me: check it, then say so. */
  if (symm_dev_wait_signal_block(a.my_pad, symm_dev_signal_slot(ready, a.left, w),
                                 (unsigned)a.left, a.timeout_ns, err, NULL) != SYMM_DEV_SUCCESS)
    return;
  unsigned long long bad = 0;
  for (size_t i = lo + threadIdx.x; i < lo + a.chunk; i += blockDim.x)
    bad += a.mine[i] != value(a.left, a.round, i);
  if (bad) atomicAdd(wrong, bad);
  if (symm_dev_put_signal_block(a.left_pad, symm_dev_signal_slot(done, a.rank, w), 1u,
                                (unsigned)a.left, a.timeout_ns, err) != SYMM_DEV_SUCCESS)
    return;
  /* The right neighbour is done with what I wrote: the next launch may
   * overwrite it. */
  symm_dev_wait_signal_block(a.my_pad, symm_dev_signal_slot(done, a.right, w),
                             (unsigned)a.right, a.timeout_ns, err, NULL);
}

int main(void) {
  symm_comm_t *comm;
  CHECK(symm_comm_init(NULL, &comm));
  const int rank = symm_comm_rank(comm), world = symm_comm_size(comm);
  if (symm_comm_device(comm) < 0 || world < 2) {
    if (rank == 0) fprintf(stderr, "ring_signals needs 2 or more ranks on a GPU backend\n");
    symm_comm_destroy(comm);
    return 1;
  }
  CUDA(cudaSetDevice(symm_comm_device(comm)));

  /* Two signal channels per block (ready, done), at most 64 blocks. */
  unsigned blocks =
      symm_dev_signal_channels((unsigned)symm_comm_signal_pad_bytes(comm), (unsigned)world) / 2;
  if (blocks > 64) blocks = 64;
  const size_t chunk = 16384;
  const int64_t n = (int64_t)(blocks * chunk);
  symm_tensor_t *t;
  CHECK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  CHECK(symm_tensor_rendezvous(t));

  ring a;
  a.rank = rank;
  a.world = world;
  a.left = (rank + world - 1) % world;
  a.right = (rank + 1) % world;
  a.blocks = blocks;
  a.chunk = chunk;
  a.timeout_ns = 10ull * 1000 * 1000 * 1000;
  void *const *peers;
  void *pad;
  CHECK(symm_tensor_peer_ptrs(t, &peers));
  a.right_data = (float *)peers[a.right];
  a.mine = (const float *)symm_tensor_data(t);
  CHECK(symm_tensor_signal_pad(t, a.right, &pad));
  a.right_pad = (uint32_t *)pad;
  CHECK(symm_tensor_signal_pad(t, a.left, &pad));
  a.left_pad = (uint32_t *)pad;
  CHECK(symm_tensor_signal_pad(t, rank, &pad));
  a.my_pad = (uint32_t *)pad;

  symm_dev_error_t *err;
  unsigned long long *wrong;
  CUDA(cudaMalloc((void **)&err, sizeof *err));
  CUDA(cudaMalloc((void **)&wrong, sizeof *wrong));
  CUDA(cudaMemset(err, 0, sizeof *err));
  CUDA(cudaMemset(wrong, 0, sizeof *wrong));
  /* The same kernel three times: the pads reset themselves. */
  for (int round = 0; round < 3; round++) {
    a.round = round;
    ring_copy<<<blocks, 256>>>(a, err, wrong);
  }
  CUDA(cudaGetLastError());
  CUDA(cudaDeviceSynchronize());
  symm_dev_error_t herr;
  unsigned long long hwrong;
  CUDA(cudaMemcpy(&herr, err, sizeof herr, cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(&hwrong, wrong, sizeof hwrong, cudaMemcpyDeviceToHost));
  printf("rank %d: %u blocks x %zu floats from rank %d, 3 rounds: %llu wrong, device error %u%s\n",
         rank, blocks, chunk, a.left, hwrong, herr.code,
         herr.code || hwrong ? "  FAIL" : "  OK");

  CHECK(symm_comm_barrier(comm));
  cudaFree(err);
  cudaFree(wrong);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return herr.code || hwrong ? 1 : 0;
}
