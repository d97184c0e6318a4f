/*
 * GPU tests of the native backend (list-gpu.h).  A rank program: the
 * launcher starts one process per rank and each runs the tests in list
 * order on one communicator (runner.c's rank mode, gpu_harness.h):
 *   SYMM_BACKEND=native symmem-run -n 2 -- symm-gpu-tests [NAME...]
 * (4 ranks on 2 GPUs with SYMM_ALLOW_SHARED_DEVICE=1).  Every test is
 * collective: the ranks make the same calls in the same order.  A failed
 * check aborts its rank, and symmem-run then stops the others.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/native/native_ext.h"
#include "backends/builtin.h"
#include "symm_test_access.h"
#include "gpu_harness.h"
#include "gpu_kernels.h"
#include "symm_gpu.h"
#include "symmem.h"

static void barrier(gpu_rank_t *c) { ASSERT_OK(symm_comm_barrier(c->comm)); }

static size_t gpu_free_bytes(void) {
  size_t free_b = 0, total = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

/* Number of elements of src[0..n) that differ from GPU_PATTERN(tag, i). */
static unsigned long long pattern_mismatches(const float *src, size_t n, int tag) {
  unsigned long long *bad = NULL, h = ~0ull;
  ASSERT_CUDA(cudaMalloc((void **)&bad, sizeof *bad));
  ASSERT_CUDA(cudaMemset(bad, 0, sizeof *bad));
  ASSERT_CUDA(gpu_count_pattern_mismatch(src, n, tag, bad));
  ASSERT_CUDA(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
  cudaFree(bad);
  return h;
}

static symm_tensor_t *alloc_f32(gpu_rank_t *c, size_t n) {
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, sizes, 1, SYMM_DTYPE_F32, &t));
  return t;
}

/* An allocation of n floats, rendezvoused. */
static symm_tensor_t *alloc_f32_rendezvous(gpu_rank_t *c, size_t n) {
  symm_tensor_t *t = alloc_f32(c, n);
  ASSERT_OK(symm_tensor_rendezvous(t));
  return t;
}

/* Init refuses several ranks per GPU unless SYMM_ALLOW_SHARED_DEVICE:
 * run-gpu-tests.sh runs this test alone with more ranks than GPUs. */
TEST_IMPL(gpu_shared_device_refused) {
  char why[512];
  if (!gpu_usable(why, sizeof why)) return gpu_skip("%s", why);
  if (gpu_rank_made())
    return gpu_skip("an earlier test made this rank's communicator: run this test alone");
  const char *allow = getenv("SYMM_ALLOW_SHARED_DEVICE");
  if (allow && *allow && strcmp(allow, "0") != 0)
    return gpu_skip("SYMM_ALLOW_SHARED_DEVICE=%s lets ranks share a GPU", allow);
  int ndev = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&ndev));
  const char *local = getenv("SYMM_LOCAL_SIZE");
  int nlocal = local ? atoi(local) : 1;
  if (nlocal <= ndev)
    return gpu_skip("%d rank(s) on this host and %d GPU(s): no rank shares a GPU", nlocal, ndev);
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.backend = SYMM_BACKEND_NATIVE;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_ALLOW_SHARED_DEVICE");
  ASSERT(comm == NULL);
  return 0;
}

/* The communicator uses the expected GPU, and memory lives on it. */
TEST_IMPL(gpu_device_choice) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  int ndev = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&ndev));
  ASSERT_GT(ndev, 0);
  if (!getenv("SYMM_DEVICE"))
    ASSERT_MSG(c->device == symm_comm_local_rank(c->comm) % ndev,
               "device %d, expected local rank %d mod %d GPUs", c->device,
               symm_comm_local_rank(c->comm), ndev);
  ASSERT_MSG(symm_comm_backend(c->comm) == SYMM_BACKEND_NATIVE, "backend %s",
             symm_backend_name(symm_comm_backend(c->comm)));
  symm_tensor_t *t = alloc_f32(c, 1024);
  struct cudaPointerAttributes a;
  ASSERT_CUDA(cudaPointerGetAttributes(&a, symm_tensor_data(t)));
  ASSERT_MSG(a.type == cudaMemoryTypeDevice && a.device == c->device,
             "memory type %d on device %d, expected device memory on %d", (int)a.type, a.device,
             c->device);
  /* The signal pad is zeroed at allocation. */
  size_t nonzero = gpu_pad_nonzero_bytes(t, c->rank);
  ASSERT_MSG(nonzero == 0, "%zu non-zero bytes in a fresh signal pad", nonzero);
  symm_tensor_free(t);
  barrier(c);
  return 0;
}

/* A kernel writes into the right neighbour's buffer through the peer
 * pointer; after a barrier the neighbour finds its left neighbour's data. */
TEST_IMPL(gpu_neighbor_kernel) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = ((size_t)1 << 20) + 3; /* not a multiple of anything */
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_MSG(ptrs[c->rank] == symm_tensor_data(t), "own entry of peer_ptrs is not the data");
  ASSERT_CUDA(gpu_write_pattern(ptrs[right], n, c->rank));
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  unsigned long long bad = pattern_mismatches(symm_tensor_data(t), n, left);
  ASSERT_MSG(bad == 0, "%llu of %zu elements written by rank %d are wrong", bad, n, left);
  barrier(c);
  symm_tensor_free(t);
  return 0;
}

/* Every rank reads every peer through a device array of peer pointers. */
TEST_IMPL(gpu_device_peer_array) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = 65536;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  void *const *ptrs = NULL;
  void *dptrs = NULL;
  float *out = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_CUDA(gpu_fill(symm_tensor_data(t), n, (float)(c->rank + 1)));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_OK(symm_gpu_device_copy(c->comm, ptrs, sizeof(void *) * (size_t)c->size, &dptrs));
  barrier(c);
  ASSERT_CUDA(cudaMalloc((void **)&out, n * sizeof *out));
  ASSERT_CUDA(gpu_sum_peers((float *const *)dptrs, c->size, n, out));
  float *h = malloc(n * sizeof *h);
  ASSERT(h != NULL);
  ASSERT_CUDA(cudaMemcpy(h, out, n * sizeof *h, cudaMemcpyDeviceToHost));
  float want = (float)(c->size * (c->size + 1) / 2);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != want;
  ASSERT_MSG(bad == 0, "%zu sums over the peers differ from %g", bad, (double)want);
  free(h);
  cudaFree(out);
  symm_gpu_device_free(c->comm, dptrs);
  barrier(c);
  symm_tensor_free(t);
  return 0;
}

/* Stream-ordered 32-bit writes on real memory: each rank fills its right
 * neighbour's buffer through its mapping (cuMemsetD32Async) and then
 * raises a flag in that neighbour's pad (cuStreamWriteValue32), both on
 * one stream; each rank then finds its buffer filled and its flag up.
 * The device array of pad pointers equals symm_tensor_signal_pad's. */
TEST_IMPL(gpu_write_value32) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  void *const *ptrs = NULL, *const *pads_dev = NULL;
  const int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  const size_t flag_word = symm_signal_pad_bytes() / 4 - 1;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_OK(symm_tensor_signal_pad_ptrs_device(t, &pads_dev));
  void **pads = calloc((size_t)c->size, sizeof *pads);
  ASSERT(pads != NULL);
  ASSERT_CUDA(cudaMemcpy(pads, pads_dev, sizeof *pads * (size_t)c->size, cudaMemcpyDeviceToHost));
  for (int r = 0; r < c->size; r++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, r, &pad));
    ASSERT_MSG(pads[r] == pad, "pad %d: %p in the device array, %p", r, pads[r], pad);
  }
  free(pads);
  void *right_pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, right, &right_pad));
  ASSERT_OK(symm_memset32(c->comm, ptrs[right], 0x3f800000u + (uint32_t)c->rank, n, c->stream));
  ASSERT_OK(symm_write_value32(c->comm, (uint32_t *)right_pad + flag_word, 1, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  barrier(c);
  uint32_t *h = malloc(n * 4), flag = 0;
  ASSERT(h != NULL);
  ASSERT_CUDA(cudaMemcpy(h, ptrs[c->rank], n * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != 0x3f800000u + (uint32_t)left;
  ASSERT_MSG(bad == 0, "%zu words of the fill from rank %d are wrong", bad, left);
  free(h);
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(t, c->rank, &pad));
  ASSERT_CUDA(cudaMemcpy(&flag, (uint32_t *)pad + flag_word, 4, cudaMemcpyDeviceToHost));
  ASSERT_MSG(flag == 1, "the flag from rank %d is %u", left, flag);
  ASSERT_OK(symm_write_value32(c->comm, (uint32_t *)pad + flag_word, 0, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  barrier(c);
  symm_tensor_free(t);
  return 0;
}

/* cudaMemcpy to and from remote views, host<->peer and peer->local. */
TEST_IMPL(gpu_remote_view_memcpy) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = 300000;
  const size_t bytes = n * sizeof(float);
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  int left2 = (c->rank + 2 * c->size - 2) % c->size;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  float *h = malloc(bytes);
  ASSERT(h != NULL);
  symm_view_t rv, lv;
  ASSERT_OK(symm_tensor_remote_view(t, right, &rv));
  ASSERT_OK(symm_tensor_remote_view(t, left, &lv));
  ASSERT_MSG(rv.rank == right && rv.ndim == 1 && rv.sizes[0] == (int64_t)n,
             "remote view: rank %d ndim %d size %lld", rv.rank, rv.ndim, (long long)rv.sizes[0]);
  for (size_t i = 0; i < n; i++) h[i] = GPU_PATTERN(c->rank, i);
  ASSERT_CUDA(gpu_upload(rv.data, h, bytes));
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  /* Our buffer holds the left neighbour's pattern; reading the left
   * neighbour's buffer through the view gives its left neighbour's. */
  unsigned long long bad = pattern_mismatches(symm_tensor_data(t), n, left);
  ASSERT_MSG(bad == 0, "%llu elements copied in by rank %d are wrong", bad, left);
  memset(h, 0, bytes);
  ASSERT_CUDA(cudaMemcpy(h, lv.data, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += h[i] != GPU_PATTERN(left2, i);
  ASSERT_MSG(wrong == 0, "%zu elements read from rank %d's view are wrong", wrong, left);
  float *scratch = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&scratch, bytes));
  ASSERT_CUDA(cudaMemcpy(scratch, lv.data, bytes, cudaMemcpyDeviceToDevice));
  bad = pattern_mismatches(scratch, n, left2);
  ASSERT_MSG(bad == 0, "%llu elements of the device-to-device copy are wrong", bad);
  cudaFree(scratch);
  barrier(c);
  free(h);
  symm_tensor_free(t);
  return 0;
}

/* One-sided puts on the copy engine: from device and from host memory
 * into the right neighbour, a get back from the left, put_signal rounds
 * whose data is there when the signal is (checked by a kernel on the
 * receiver's stream after the wait), and a batch; captured in a CUDA
 * graph too. */
TEST_IMPL(gpu_put_get) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 2, &c)) return TEST_SKIP;
  const size_t n = 262147; /* odd: the copy's tail */
  const size_t bytes = n * sizeof(float);
  const int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  float *h = malloc(bytes), *src = NULL;
  ASSERT(h != NULL);
  ASSERT_CUDA(cudaMalloc((void **)&src, bytes));
  for (size_t i = 0; i < n; i++) h[i] = GPU_PATTERN(c->rank, i);
  ASSERT_CUDA(gpu_upload(src, h, bytes));
  /* Device source, whole tensor; then a host source over the first 1001. */
  ASSERT_OK(symm_put(t, right, 0, src, bytes, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  barrier(c);
  ASSERT_MSG(pattern_mismatches(symm_tensor_data(t), n, left) == 0, "put from device");
  ASSERT_OK(symm_get(t, left, 0, h, bytes, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += h[i] != GPU_PATTERN((left + c->size - 1) % c->size, i);
  ASSERT_MSG(wrong == 0, "%zu elements of the get are wrong", wrong);
  barrier(c);
  /* put_signal rounds to the right: the receiver waits on its stream and a
   * kernel checks the data right after; an ack lets the next round write. */
  for (int k = 0; k < 20; k++) {
    const size_t len = (size_t)(k * 7919) % n + 1;
    ASSERT_OK(symm_put_signal(t, right, 0, src, len * sizeof(float), 0, c->stream));
    ASSERT_OK(symm_signal_wait(t, left, 0, c->stream));
    ASSERT_MSG(pattern_mismatches(symm_tensor_data(t), len, left) == 0,
               "round %d: data not there at the signal", k);
    ASSERT_OK(symm_signal_put(t, left, 1, c->stream));
    ASSERT_OK(symm_signal_wait(t, right, 1, c->stream));
  }
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  barrier(c);
  /* A batch to every peer, captured in a graph and replayed twice. */
  symm_put_desc_t puts[64];
  ASSERT(c->size <= 64);
  const size_t per = n / (size_t)c->size;
  for (int p = 0; p < c->size; p++)
    puts[p] = (symm_put_desc_t){p, (size_t)c->rank * per * sizeof(float), src,
                                per * sizeof(float)};
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_OK(symm_put_batch(t, puts, (size_t)c->size, c->stream));
  ASSERT_CUDA(cudaStreamEndCapture(c->stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 2; rep++) ASSERT_CUDA(cudaGraphLaunch(exec, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  barrier(c);
  ASSERT_CUDA(cudaMemcpy(h, symm_tensor_data(t), bytes, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int p = 0; p < c->size; p++)
    for (size_t i = 0; i < per; i++) wrong += h[(size_t)p * per + i] != GPU_PATTERN(p, i);
  ASSERT_MSG(wrong == 0, "%zu elements of the batch are wrong", wrong);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  barrier(c);
  cudaFree(src);
  free(h);
  symm_tensor_free(t);
  return 0;
}

/* The contiguous view holds every rank's data back to back; a kernel reads
 * all of it.  4 MiB of data is a multiple of the 2 MiB granularity, so the
 * header promises strides[0] == numel; 1000 floats is not. */
static void contiguous_case(gpu_rank_t *c, size_t n, bool expect_dense) {
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  ASSERT_CUDA(gpu_fill(symm_tensor_data(t), n, (float)(c->rank + 1)));
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  symm_view_t v;
  ASSERT_OK(symm_tensor_contiguous_view(t, &v));
  ASSERT_MSG(v.ndim == 2 && v.sizes[0] == c->size && v.sizes[1] == (int64_t)n && v.rank == -1,
             "contiguous view: ndim %d sizes [%lld, %lld] rank %d", v.ndim,
             (long long)v.sizes[0], (long long)v.sizes[1], v.rank);
  ASSERT_MSG(v.strides[0] >= (int64_t)n && v.strides[1] == 1, "strides [%lld, %lld] for %zu",
             (long long)v.strides[0], (long long)v.strides[1], n);
  if (expect_dense)
    ASSERT_MSG(v.strides[0] == (int64_t)n,
               "strides[0] %lld != numel %zu: the data does not start at a granularity "
               "boundary (the core's data_offset should equal the native granularity)",
               (long long)v.strides[0], n);
  unsigned long long *bad = NULL, h = ~0ull;
  ASSERT_CUDA(cudaMalloc((void **)&bad, sizeof *bad));
  ASSERT_CUDA(cudaMemset(bad, 0, sizeof *bad));
  ASSERT_CUDA(gpu_check_contiguous(v.data, c->size, v.strides[0], n, bad));
  ASSERT_CUDA(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
  ASSERT_MSG(h == 0, "%llu elements of the contiguous view are wrong", h);
  cudaFree(bad);
  symm_tensor_t *found = NULL;
  int rank = 0;
  float *last = (float *)v.data + (size_t)(c->size - 1) * (size_t)v.strides[0] + n - 1;
  ASSERT_OK(symm_tensor_lookup(last, &found, &rank, NULL));
  ASSERT_MSG(found == t && rank == -1, "lookup in the contiguous view: %p rank %d",
             (void *)found, rank);
  barrier(c);
  symm_tensor_free(t);
}

TEST_IMPL(gpu_contiguous_view) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  contiguous_case(c, (size_t)1 << 20, true);
  contiguous_case(c, 1000, false);
  return 0;
}

/* Different sizes or dtypes across ranks: SYMM_ERR_MISMATCH everywhere,
 * and the communicator still works afterwards. */
TEST_IMPL(gpu_mismatch) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 2, &c)) return TEST_SKIP;
  symm_tensor_t *t = alloc_f32(c, c->rank == 0 ? 1000 : 1001);
  ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);

  int64_t sizes[1] = {4096};
  t = NULL;
  ASSERT_OK(symm_tensor_alloc(c->comm, sizes, 1,
                              c->rank == 0 ? SYMM_DTYPE_F32 : SYMM_DTYPE_I32, &t));
  ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);

  t = alloc_f32_rendezvous(c, 4096);
  symm_tensor_free(t);
  barrier(c);
  return 0;
}

/* symm_validate accepts our memory and the backend's validate names what
 * is wrong with other memory. */
TEST_IMPL(gpu_validate) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = 1 << 18, bytes = n * sizeof(float);
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  void *const *ptrs = NULL;
  void *dev = NULL;
  char host[4096];
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_OK(symm_validate(c->comm, symm_tensor_data(t), bytes));
  ASSERT_OK(symm_validate(c->comm, ptrs[(c->rank + 1) % c->size], bytes));
  ASSERT_MSG(symm_validate(c->comm, symm_tensor_data(t), bytes + ((size_t)64 << 20)) !=
                 SYMM_SUCCESS,
             "validate accepted a range past the allocation");
  size_t too_many = bytes + ((size_t)64 << 20);
  ASSERT_RES(symm_native_ops.validate(c->comm, symm_tensor_data(t), too_many), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "smaller");
  ASSERT_CUDA(cudaMalloc(&dev, 1 << 20));
  ASSERT_RES(symm_validate(c->comm, dev, 1024), SYMM_ERR_NOT_FOUND);
  ASSERT_RES(symm_native_ops.validate(c->comm, dev, 1024), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "not VMM");
  cudaFree(dev);
  ASSERT_RES(symm_native_ops.validate(c->comm, host, sizeof host), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "not CUDA memory");
  barrier(c);
  symm_tensor_free(t);
  return 0;
}

/* Rank 0 frees (and trims) its buffer while the others still map it: their
 * mappings stay valid, the data intact, until they free theirs. */
TEST_IMPL(gpu_free_while_mapped) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  const size_t n = (size_t)1 << 20;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n);
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  if (c->rank == 0) {
    ASSERT_CUDA(gpu_write_pattern(symm_tensor_data(t), n, 7));
    ASSERT_CUDA(cudaDeviceSynchronize());
  }
  barrier(c);
  if (c->rank == 0) {
    symm_tensor_free(t);
    t = NULL;
    ASSERT_OK(symm_comm_pool_trim(c->comm, NULL));
  }
  barrier(c);
  if (c->rank != 0) {
    unsigned long long bad = pattern_mismatches(ptrs[0], n, 7);
    ASSERT_MSG(bad == 0, "%llu elements of rank 0's freed buffer changed under our mapping", bad);
  }
  barrier(c);
  symm_tensor_free(t);
  ASSERT_OK(symm_comm_pool_trim(c->comm, NULL));
  barrier(c);
  return 0;
}

/* Signal pads are slots of the communicator's pad heap: each tensor's pad
 * is its own, zeroed, in front of its data in the same range, reached by
 * the peers, and untouched by another tensor's reuse. */
TEST_IMPL(gpu_signal_pads) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  enum { NT = 3 };
  const size_t n = (size_t)1 << 18, pad_bytes = symm_signal_pad_bytes();
  const size_t words = pad_bytes / sizeof(uint32_t);
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  symm_tensor_t *t[NT] = {NULL};
  uint32_t *h = malloc(pad_bytes);
  ASSERT(h != NULL);
  for (int i = 0; i < NT; i++) t[i] = alloc_f32_rendezvous(c, n);
  for (int i = 0; i < NT; i++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t[i], c->rank, &pad));
    char *data = symm_tensor_data(t[i]);
    ASSERT_MSG((char *)pad + pad_bytes <= data &&
                   (size_t)(data - (char *)pad) <= symm_tensor_mem(t[i])->data_offset,
               "tensor %d: pad %p not in front of its data %p", i, pad, (void *)data);
    /* With one heap chunk, distinct slots are distinct offsets in it. */
    native_heap_info_t hi;
    ASSERT_OK(native_heap_info(c->comm, &hi));
    if (hi.chunks == 1)
      for (int j = 0; j < i; j++)
        ASSERT_MSG(symm_tensor_mem(t[j])->pad_offset != symm_tensor_mem(t[i])->pad_offset,
                   "tensors %d and %d: pads in the same slot (offset %zu)", j, i,
                   symm_tensor_mem(t[i])->pad_offset);
    ASSERT_CUDA(cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost));
    size_t nonzero = 0;
    for (size_t w = 0; w < words; w++) nonzero += h[w] != 0;
    ASSERT_MSG(nonzero == 0, "tensor %d: %zu non-zero words in a fresh pad", i, nonzero);
    ASSERT_CUDA(gpu_fill(symm_tensor_data(t[i]), n, (float)(c->rank + 1)));
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  /* Each rank signals its right neighbour's pads (copy engine, peer VA). */
  for (int i = 0; i < NT; i++) {
    void *rpad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t[i], right, &rpad));
    for (size_t w = 0; w < words; w++)
      h[w] = (uint32_t)(c->rank + 1) << 24 | (uint32_t)(i << 16) | (uint32_t)w;
    ASSERT_CUDA(gpu_upload(rpad, h, pad_bytes));
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  float *d = malloc(n * sizeof *d);
  ASSERT(d != NULL);
  for (int i = 0; i < NT; i++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t[i], c->rank, &pad));
    ASSERT_CUDA(cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t w = 0; w < words; w++)
      wrong += h[w] != ((uint32_t)(left + 1) << 24 | (uint32_t)(i << 16) | (uint32_t)w);
    ASSERT_MSG(wrong == 0, "tensor %d: %zu pad words differ from rank %d's signal", i, wrong,
               left);
    ASSERT_CUDA(cudaMemcpy(d, symm_tensor_data(t[i]), n * sizeof *d, cudaMemcpyDeviceToHost));
    wrong = 0;
    for (size_t e = 0; e < n; e++) wrong += d[e] != (float)(c->rank + 1);
    ASSERT_MSG(wrong == 0, "tensor %d: %zu data elements changed by pad signals", i, wrong);
  }
  free(d);
  barrier(c);
  /* Tensor 1 through the pool: its pad is zeroed, its neighbours' are not. */
  symm_tensor_free(t[1]);
  t[1] = alloc_f32_rendezvous(c, n);
  for (int i = 0; i < NT; i++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t[i], c->rank, &pad));
    ASSERT_CUDA(cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost));
    uint32_t want0 = i == 1 ? 0 : ((uint32_t)(left + 1) << 24 | (uint32_t)(i << 16));
    ASSERT_MSG(h[0] == want0 && h[words - 1] == (i == 1 ? 0 : want0 + (uint32_t)(words - 1)),
               "tensor %d after reusing tensor 1: pad words %#x .. %#x", i, h[0], h[words - 1]);
  }
  native_heap_info_t hi;
  ASSERT_OK(native_heap_info(c->comm, &hi));
  ASSERT_MSG(hi.chunks >= 1 && hi.slots_used >= NT && hi.peer_chunks >= c->size - 1,
             "pad heap: %ld chunks, %ld slots used, %ld peer chunks", hi.chunks, hi.slots_used,
             hi.peer_chunks);
  barrier(c);
  for (int i = 0; i < NT; i++) symm_tensor_free(t[i]);
  free(h);
  barrier(c);
  return 0;
}

/* Runs the ring of gpu_barrier_ring and returns its error word and peer
 * (herr) and the count of stale or missing elements. */
static unsigned long long run_ring(const gpu_ring_t *ring, uint32_t *err,
                                   unsigned long long *bad, uint32_t herr[2]) {
  unsigned long long hbad = ~0ull;
  ASSERT_CUDA(cudaMemset(err, 0, 2 * sizeof(uint32_t)));
  ASSERT_CUDA(cudaMemset(bad, 0, sizeof *bad));
  ASSERT_CUDA(gpu_barrier_ring(ring, err, bad));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemcpy(herr, err, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost));
  return hbad;
}

/* The device-side barriers of symmem_device.cuh in a kernel of ours: rounds
 * of ring writes between barriers see every neighbour's write and nothing
 * stale, with symm_dev_barrier_block (in a 512-thread block and in a 2-D
 * block of 2 threads) and with symm_dev_barrier; then a barrier that only
 * rank 0 enters reports SYMM_DEV_ERR_TIMEOUT naming a peer, instead of
 * hanging. */
TEST_IMPL(gpu_device_barriers) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 2, &c)) return TEST_SKIP;
  if (c->size > GPU_MAX_RANKS)
    return gpu_skip("the test kernel takes %d ranks at most, this job has %d", GPU_MAX_RANKS,
                    c->size);
  const size_t n = 4096;
  symm_tensor_t *t = alloc_f32_rendezvous(c, n), *lone = alloc_f32_rendezvous(c, 1);
  void *const *peers = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &peers));
  gpu_ring_t ring;
  memset(&ring, 0, sizeof ring);
  ring.rank = c->rank;
  ring.world = c->size;
  ring.left = (c->rank + c->size - 1) % c->size;
  ring.n = n;
  ring.rounds = 20;
  ring.timeout_ns = 20ull * 1000 * 1000 * 1000;
  for (int r = 0; r < c->size; r++) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, r, &pad));
    ring.pads[r] = pad;
  }
  ring.right_data = peers[(c->rank + 1) % c->size];
  ring.my_data = peers[c->rank];
  uint32_t *err = NULL;
  unsigned long long *bad = NULL;
  ASSERT_CUDA(cudaMalloc((void **)&err, 2 * sizeof(uint32_t)));
  ASSERT_CUDA(cudaMalloc((void **)&bad, sizeof *bad));
  static const char *const mode_names[3] = {"symm_dev_barrier_block", "symm_dev_barrier",
                                            "symm_dev_barrier_block (2-D block of 2 threads)"};
  for (int mode = 0; mode < 3; mode++) {
    barrier(c);
    ring.mode = mode;
    uint32_t herr[2] = {1, 1};
    unsigned long long hbad = run_ring(&ring, err, bad, herr);
    ASSERT_MSG(herr[0] == 0 && hbad == 0,
               "%s ring: error %u (peer %u), %llu stale or missing elements", mode_names[mode],
               herr[0], herr[1], hbad);
  }
  barrier(c);
  /* Rank 0 alone, on the other tensor's pads, with a short timeout. */
  if (c->rank == 0) {
    for (int r = 0; r < c->size; r++) {
      void *pad = NULL;
      ASSERT_OK(symm_tensor_signal_pad(lone, r, &pad));
      ring.pads[r] = pad;
    }
    ring.mode = 0;
    ring.rounds = 1;
    ring.timeout_ns = 200ull * 1000 * 1000;
    uint32_t herr[2] = {0, 0};
    run_ring(&ring, err, bad, herr);
    ASSERT_MSG(herr[0] == (uint32_t)SYMM_ERR_TIMEOUT && herr[1] != 0 && (int)herr[1] < c->size,
               "a barrier no peer enters: error %u, peer %u (want %d and a peer)", herr[0],
               herr[1], (int)SYMM_ERR_TIMEOUT); /* symmem_device.cuh: the codes equal symm_result_t's */
  }
  barrier(c);
  cudaFree(err);
  cudaFree(bad);
  symm_tensor_free(t);
  symm_tensor_free(lone); /* its pads hold unconsumed signals: the pool zeroes them */
  return 0;
}

/* Many alloc -> rendezvous -> free cycles of varying sizes; after trimming
 * the pool, open fds and free GPU memory are back where they started.  The
 * pad heap (a granule per rank, its published fd, and the peers' imported
 * chunks) is per-communicator state that stays until symm_comm_destroy: a
 * warm-up allocation makes it before the baseline, and the heap is checked
 * not to grow and to have every slot back after the trim.  Slots in use
 * at the baseline are the library's own tensors' (the collective scratch,
 * made by an earlier test's collective on this communicator): the same
 * number after. */
static void alloc_cycles(gpu_rank_t *c, int cycles) {
  const size_t slack = (size_t)4 << 20;
  symm_tensor_free(alloc_f32_rendezvous(c, 1));
  ASSERT_OK(symm_comm_pool_trim(c->comm, NULL));
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  int fds0 = test_count_fds();
  size_t free0 = gpu_free_bytes();
  native_heap_info_t heap0 = {0}, heap1 = {0};
  ASSERT_OK(native_heap_info(c->comm, &heap0));
  ASSERT_MSG(heap0.chunks >= 1 && heap0.slots_used <= 1 && heap0.peer_chunks >= c->size - 1,
             "pad heap before the cycles: %ld chunks, %ld slots used, %ld peer chunks",
             heap0.chunks, heap0.slots_used, heap0.peer_chunks);
  barrier(c);
  for (int i = 0; i < cycles; i++) {
    size_t n = 1 + (size_t)((i * 7919) % 4096) * 1024; /* 4 B .. 16 MiB */
    symm_tensor_free(alloc_f32_rendezvous(c, n));
  }
  size_t free_pooled = gpu_free_bytes();
  int64_t limit = (int64_t)symm_settings()->SYMM_POOL_BYTES;
  /* A peer on this GPU (shared device) pools its own memory here too. */
  int per_gpu = c->size;
  size_t pooled = free0 > free_pooled ? free0 - free_pooled : 0;
  ASSERT_MSG(pooled <= (size_t)limit * (size_t)per_gpu + slack,
             "pool holds %zu bytes of GPU memory, limit %lld", pooled, (long long)limit);
  size_t released = 0;
  ASSERT_OK(symm_comm_pool_trim(c->comm, &released));
  ASSERT_CUDA(cudaDeviceSynchronize());
  barrier(c);
  int fds1 = test_count_fds();
  size_t free1 = gpu_free_bytes();
  ASSERT_OK(native_heap_info(c->comm, &heap1));
  ASSERT_MSG(heap1.chunks == heap0.chunks && heap1.slots_used == heap0.slots_used &&
                 heap1.peer_chunks == heap0.peer_chunks,
             "pad heap: %ld chunks / %ld peer chunks / %ld slots used before the cycles, "
             "%ld / %ld / %ld after",
             heap0.chunks, heap0.peer_chunks, heap0.slots_used, heap1.chunks,
             heap1.peer_chunks, heap1.slots_used);
  ASSERT_MSG(fds1 == fds0, "open fds: %d before %d cycles, %d after", fds0, cycles, fds1);
  ASSERT_MSG(free1 + slack >= free0, "free GPU memory: %zu before, %zu after (%zu lost)", free0,
             free1, free0 > free1 ? free0 - free1 : 0);
  if (c->rank == 0)
    printf("# cycles: %d, pool released %zu bytes, fds %d -> %d, free GPU memory %zu -> %zu, "
           "pad heap %ld chunk(s) of %zu bytes + %ld imported\n",
           cycles, released, fds0, fds1, free0, free1, heap1.chunks, heap1.chunk_bytes,
           heap1.peer_chunks);
  barrier(c);
}

TEST_IMPL(gpu_alloc_cycles) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  alloc_cycles(c, 50);
  return 0;
}

TEST_IMPL(gpu_alloc_cycles_long) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_NATIVE, 1, &c)) return TEST_SKIP;
  alloc_cycles(c, 1000);
  return 0;
}

/* The user's own memory registered: cudaMalloc memory (cuda) or a VMM
 * allocation (native, nccl as a window, nvshmem through
 * nvshmemx_buffer_register_symmetric: a whole mapping of
 * NVSHMEM_CUMEM_GRANULARITY bytes where that is set, else 2 MiB), then
 * rendezvous, an in-place all-reduce on it and a signal barrier through
 * its pad, and the memory intact after the free.  Runs under every GPU
 * backend (run-gpu-tests.sh runs it under each one available). */
static void *register_user_mem(gpu_rank_t *c, size_t bytes, ncu_mem_handle *h, ncu_deviceptr *va) {
  const symm_backend_t b = symm_comm_backend(c->comm);
  if (b == SYMM_BACKEND_CUDA) {
    void *d = NULL;
    ASSERT_CUDA(cudaMalloc(&d, bytes));
    return d;
  }
  symm_gpu_t *gpu = symm_gpu_of(c->comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = NCU_ALLOC_PINNED;
  prop.requested_handle_types = NCU_HANDLE_POSIX_FD;
  prop.location.type = NCU_LOCATION_DEVICE;
  prop.location.id = symm_comm_device(c->comm);
  ncu_access_desc acc;
  memset(&acc, 0, sizeof acc);
  acc.location = prop.location;
  acc.flags = NCU_ACCESS_READWRITE;
  ncu_context saved;
  ASSERT_OK(symm_gpu_enter(gpu, &saved));
  ASSERT_EQ(drv->cuMemCreate(h, bytes, &prop, 0), NCU_SUCCESS);
  ASSERT_EQ(drv->cuMemAddressReserve(va, bytes, 0, 0, 0), NCU_SUCCESS);
  ASSERT_EQ(drv->cuMemMap(*va, bytes, 0, *h, 0), NCU_SUCCESS);
  ASSERT_EQ(drv->cuMemSetAccess(*va, bytes, &acc, 1), NCU_SUCCESS);
  symm_gpu_leave(gpu, saved);
  return (void *)(uintptr_t)*va;
}

static void register_user_free(gpu_rank_t *c, void *p, size_t bytes, ncu_mem_handle h,
                               ncu_deviceptr va) {
  if (symm_comm_backend(c->comm) == SYMM_BACKEND_CUDA) {
    ASSERT_CUDA(cudaFree(p));
    return;
  }
  symm_gpu_t *gpu = symm_gpu_of(c->comm);
  const symm_cu_driver_t *drv = symm_gpu_driver(gpu);
  ncu_context saved;
  ASSERT_OK(symm_gpu_enter(gpu, &saved));
  drv->cuMemUnmap(va, bytes);
  drv->cuMemAddressFree(va, bytes);
  drv->cuMemRelease(h);
  symm_gpu_leave(gpu, saved);
}

TEST_IMPL(gpu_register_user) {
  gpu_rank_t *c;
  if (gpu_rank_get(SYMM_BACKEND_AUTO, 2, &c)) return TEST_SKIP;
  const symm_backend_t b = symm_comm_backend(c->comm);
  const char *g = getenv("NVSHMEM_CUMEM_GRANULARITY");
  const size_t bytes = b == SYMM_BACKEND_NVSHMEM && g && *g ? (size_t)strtoull(g, NULL, 0)
                                                            : (size_t)2 << 20;
  const size_t n = bytes / sizeof(float);
  ncu_mem_handle h = 0;
  ncu_deviceptr va = 0;
  float *mine = register_user_mem(c, bytes, &h, &va);
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = mine;
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  const char *off = getenv("SYMM_NVSHMEM_REGISTER");
  const bool refused_off = off && strcmp(off, "off") == 0, refused_size = !(g && *g);
  if (b == SYMM_BACKEND_NVSHMEM && (refused_off || refused_size)) {
    /* Off: refused.  A 2 MiB mapping under NVSHMEM's default granularity
     * (512 MiB), which NVSHMEM 3.4.5 faulted the context on: refused on
     * every rank before NVSHMEM sees it. */
    ASSERT_RES(symm_tensor_register(c->comm, &m, sizes, 1, SYMM_DTYPE_F32, &t),
               refused_off ? SYMM_ERR_UNSUPPORTED : SYMM_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(symm_last_error(), refused_off ? "SYMM_NVSHMEM_REGISTER=off"
                                                       : "NVSHMEM_CUMEM_GRANULARITY, unset");
    register_user_free(c, mine, bytes, h, va);
    barrier(c);
    return 0;
  }
  ASSERT_OK(symm_tensor_register(c->comm, &m, sizes, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *hbuf = malloc(bytes);
  ASSERT(hbuf != NULL);
  for (size_t i = 0; i < n; i++) hbuf[i] = (float)(c->rank + 1);
  ASSERT_CUDA(gpu_upload(mine, hbuf, bytes));
  barrier(c);
  ASSERT_OK(symm_all_reduce(c->comm, mine, mine, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, c->stream));
  ASSERT_OK(symm_signal_barrier(t, 0, c->stream));
  ASSERT_CUDA(cudaStreamSynchronize(c->stream));
  ASSERT_OK(symm_comm_check_async_error(c->comm));
  ASSERT_EQ(gpu_pad_nonzero_bytes(t, c->rank), 0);
  barrier(c);
  ASSERT_OK(symm_tensor_free(t));
  ASSERT_CUDA(cudaMemcpy(hbuf, mine, bytes, cudaMemcpyDeviceToHost));
  const float want = (float)(c->size * (c->size + 1) / 2);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += hbuf[i] != want;
  ASSERT_MSG(wrong == 0, "%zu elements of the all-reduce on registered memory are wrong", wrong);
  free(hbuf);
  register_user_free(c, mine, bytes, h, va);
  barrier(c);
  return 0;
}
