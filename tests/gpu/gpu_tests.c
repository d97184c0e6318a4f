/*
 * GPU tests of the native backend.  Run under the launcher, one process per
 * rank:  SYMM_BACKEND=native symmem-run -n 2 -- symm-gpu-tests [--quick]
 * (4 ranks on 2 GPUs with SYMM_ALLOW_SHARED_DEVICE=1).  Every test is
 * collective: each rank runs the same tests in the same order, and a failed
 * check is recorded without skipping the collective calls after it, so one
 * failure does not leave the other ranks waiting.  Rank 0 prints the summary
 * "N passed, N failed" (a test fails if it failed on any rank).
 *
 *   --quick                    fewer alloc/free cycles (for compute-sanitizer)
 *   --expect-shared-refusal    only check that init refuses ranks sharing a
 *                              GPU without SYMM_ALLOW_SHARED_DEVICE
 */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/native/native_ext.h"
#include "backends/builtin.h"
#include "core/internal.h"
#include "gpu_kernels.h"
#include "symm_gpu.h"
#include "symmem.h"

typedef struct gpu_ctx {
  symm_comm_t *comm;
  int rank, size, device;
  bool quick;
  int failed;  /* failed checks so far on this rank */
} gpu_ctx_t;

#define FAIL_(c, ...)                                                            \
  do {                                                                          \
    fprintf(stderr, "rank %d: FAIL %s:%d: ", (c)->rank, __FILE__, __LINE__);    \
    fprintf(stderr, __VA_ARGS__);                                               \
    fputc('\n', stderr);                                                        \
    (c)->failed++;                                                              \
  } while (0)
#define CHECK(c, cond, ...)                                                     \
  do {                                                                          \
    if (!(cond)) FAIL_(c, __VA_ARGS__);                                         \
  } while (0)
/* A symm_ call expected to return `want`; evaluates to whether it did. */
#define CHECK_RES(c, call, want)                                                \
  check_res_((c), (call), (want), #call, __LINE__)
#define CHECK_OK(c, call) CHECK_RES(c, call, SYMM_SUCCESS)
#define CUDA_OK(c, call) check_cuda_((c), (int)(call), #call, __LINE__)

static bool check_res_(gpu_ctx_t *c, symm_result_t got, symm_result_t want, const char *what,
                       int line) {
  if (got == want) return true;
  fprintf(stderr, "rank %d: FAIL line %d: %s -> %s, expected %s (%s)\n", c->rank, line, what,
          symm_strerror(got), symm_strerror(want), symm_last_error());
  c->failed++;
  return false;
}

static bool check_cuda_(gpu_ctx_t *c, int err, const char *what, int line) {
  if (err == cudaSuccess) return true;
  fprintf(stderr, "rank %d: FAIL line %d: %s -> %s\n", c->rank, line, what,
          cudaGetErrorString((cudaError_t)err));
  c->failed++;
  return false;
}

static void barrier(gpu_ctx_t *c) { CHECK_OK(c, symm_comm_barrier(c->comm)); }

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own fd */
}

static size_t gpu_free_bytes(void) {
  size_t free_b = 0, total = 0;
  cudaMemGetInfo(&free_b, &total);
  return free_b;
}

/* Number of elements of src[0..n) that differ from GPU_PATTERN(tag, i). */
static unsigned long long pattern_mismatches(gpu_ctx_t *c, const float *src, size_t n, int tag) {
  unsigned long long *bad = NULL, h = ~0ull;
  if (!CUDA_OK(c, cudaMalloc((void **)&bad, sizeof *bad))) return h;
  CUDA_OK(c, cudaMemset(bad, 0, sizeof *bad));
  CUDA_OK(c, gpu_count_pattern_mismatch(src, n, tag, bad));
  CUDA_OK(c, cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
  cudaFree(bad);
  return h;
}

static symm_tensor_t *alloc_f32(gpu_ctx_t *c, size_t n) {
  int64_t sizes[1] = {(int64_t)n};
  symm_tensor_t *t = NULL;
  CHECK_OK(c, symm_tensor_alloc(c->comm, sizes, 1, SYMM_DTYPE_F32, &t));
  return t;
}

/* ------------------------------------------------------------------ tests */

/* The communicator uses the expected GPU, and memory lives on it. */
static void test_device_choice(gpu_ctx_t *c) {
  int ndev = 0;
  CUDA_OK(c, cudaGetDeviceCount(&ndev));
  int want = ndev > 0 ? symm_comm_local_rank(c->comm) % ndev : -1;
  if (!getenv("SYMM_DEVICE"))
    CHECK(c, c->device == want, "device %d, expected local rank %d mod %d GPUs", c->device,
          symm_comm_local_rank(c->comm), ndev);
  CHECK(c, symm_comm_backend(c->comm) == SYMM_BACKEND_NATIVE, "backend %s",
        symm_backend_name(symm_comm_backend(c->comm)));
  symm_tensor_t *t = alloc_f32(c, 1024);
  if (t) {
    struct cudaPointerAttributes a;
    if (CUDA_OK(c, cudaPointerGetAttributes(&a, symm_tensor_data(t))))
      CHECK(c, a.type == cudaMemoryTypeDevice && a.device == c->device,
            "memory type %d on device %d, expected device memory on %d", (int)a.type, a.device,
            c->device);
    /* The signal pad is zeroed at allocation. */
    void *pad = NULL;
    if (CHECK_OK(c, symm_tensor_signal_pad(t, c->rank, &pad))) {
      size_t n = symm_signal_pad_bytes();
      unsigned char *h = malloc(n);
      if (h && CUDA_OK(c, cudaMemcpy(h, pad, n, cudaMemcpyDeviceToHost))) {
        size_t nonzero = 0;
        for (size_t i = 0; i < n; i++) nonzero += h[i] != 0;
        CHECK(c, nonzero == 0, "%zu non-zero bytes in a fresh signal pad", nonzero);
      }
      free(h);
    }
  }
  symm_tensor_free(t);
  barrier(c);
}

/* A kernel writes into the right neighbour's buffer through the peer
 * pointer; after a barrier the neighbour finds its left neighbour's data. */
static void test_neighbor_kernel(gpu_ctx_t *c) {
  const size_t n = ((size_t)1 << 20) + 3; /* not a multiple of anything */
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  symm_tensor_t *t = alloc_f32(c, n);
  void *const *ptrs = NULL;
  if (t && CHECK_OK(c, symm_tensor_rendezvous(t)) && CHECK_OK(c, symm_tensor_peer_ptrs(t, &ptrs))) {
    CHECK(c, ptrs[c->rank] == symm_tensor_data(t), "own entry of peer_ptrs is not the data");
    CUDA_OK(c, gpu_write_pattern(ptrs[right], n, c->rank));
    CUDA_OK(c, cudaDeviceSynchronize());
  }
  barrier(c);
  if (ptrs) {
    unsigned long long bad = pattern_mismatches(c, symm_tensor_data(t), n, left);
    CHECK(c, bad == 0, "%llu of %zu elements written by rank %d are wrong", bad, n, left);
  }
  barrier(c);
  symm_tensor_free(t);
}

/* Every rank reads every peer through a device array of peer pointers. */
static void test_device_peer_array(gpu_ctx_t *c) {
  const size_t n = 65536;
  symm_tensor_t *t = alloc_f32(c, n);
  void *const *ptrs = NULL;
  void *dptrs = NULL;
  float *out = NULL;
  if (t && CHECK_OK(c, symm_tensor_rendezvous(t)) && CHECK_OK(c, symm_tensor_peer_ptrs(t, &ptrs))) {
    CUDA_OK(c, gpu_fill(symm_tensor_data(t), n, (float)(c->rank + 1)));
    CUDA_OK(c, cudaDeviceSynchronize());
    CHECK_OK(c, symm_gpu_device_copy(c->comm, ptrs, sizeof(void *) * (size_t)c->size, &dptrs));
  }
  barrier(c);
  if (dptrs && CUDA_OK(c, cudaMalloc((void **)&out, n * sizeof *out))) {
    CUDA_OK(c, gpu_sum_peers((float *const *)dptrs, c->size, n, out));
    float *h = malloc(n * sizeof *h);
    if (h && CUDA_OK(c, cudaMemcpy(h, out, n * sizeof *h, cudaMemcpyDeviceToHost))) {
      float want = (float)(c->size * (c->size + 1) / 2);
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += h[i] != want;
      CHECK(c, bad == 0, "%zu sums over the peers differ from %g", bad, (double)want);
    }
    free(h);
    cudaFree(out);
  }
  symm_gpu_device_free(c->comm, dptrs);
  barrier(c);
  symm_tensor_free(t);
}

/* Stream-ordered 32-bit writes on real memory: each rank fills its right
 * neighbour's buffer through its mapping (cuMemsetD32Async) and then
 * raises a flag in that neighbour's pad (cuStreamWriteValue32), both on
 * one stream; each rank then finds its buffer filled and its flag up.
 * The device array of pad pointers equals symm_tensor_signal_pad's. */
static void test_write_value32(gpu_ctx_t *c) {
  const size_t n = 1 << 16;
  symm_tensor_t *t = alloc_f32(c, n);
  void *const *ptrs = NULL, *const *pads_dev = NULL;
  cudaStream_t s = NULL;
  const int right = (c->rank + 1) % c->size;
  const size_t flag_word = symm_signal_pad_bytes() / 4 - 1;
  if (t && CHECK_OK(c, symm_tensor_rendezvous(t)) && CHECK_OK(c, symm_tensor_peer_ptrs(t, &ptrs)) &&
      CHECK_OK(c, symm_tensor_signal_pad_ptrs_device(t, &pads_dev)) &&
      CUDA_OK(c, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) {
    void **pads = calloc((size_t)c->size, sizeof *pads);
    if (pads && CUDA_OK(c, cudaMemcpy(pads, pads_dev, sizeof *pads * (size_t)c->size,
                                      cudaMemcpyDeviceToHost)))
      for (int r = 0; r < c->size; r++) {
        void *pad = NULL;
        CHECK_OK(c, symm_tensor_signal_pad(t, r, &pad));
        CHECK(c, pads[r] == pad, "pad %d: %p in the device array, %p", r, pads[r], pad);
      }
    free(pads);
    void *right_pad = NULL;
    CHECK_OK(c, symm_tensor_signal_pad(t, right, &right_pad));
    CHECK_OK(c, symm_memset32(c->comm, ptrs[right], 0x3f800000u + (uint32_t)c->rank, n, s));
    CHECK_OK(c, symm_write_value32(c->comm, (uint32_t *)right_pad + flag_word, 1, s));
    CUDA_OK(c, cudaStreamSynchronize(s));
  }
  barrier(c);
  if (ptrs) {
    const int left = (c->rank + c->size - 1) % c->size;
    uint32_t *h = malloc(n * 4), flag = 0;
    void *pad = NULL;
    if (h && CUDA_OK(c, cudaMemcpy(h, ptrs[c->rank], n * 4, cudaMemcpyDeviceToHost))) {
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += h[i] != 0x3f800000u + (uint32_t)left;
      CHECK(c, bad == 0, "%zu words of the fill from rank %d are wrong", bad, left);
    }
    free(h);
    if (CHECK_OK(c, symm_tensor_signal_pad(t, c->rank, &pad)) &&
        CUDA_OK(c, cudaMemcpy(&flag, (uint32_t *)pad + flag_word, 4, cudaMemcpyDeviceToHost)))
      CHECK(c, flag == 1, "the flag from rank %d is %u", left, flag);
    CHECK_OK(c, symm_write_value32(c->comm, (uint32_t *)pad + flag_word, 0, s));
    CUDA_OK(c, cudaStreamSynchronize(s));
  }
  if (s) cudaStreamDestroy(s);
  barrier(c);
  symm_tensor_free(t);
}

/* cudaMemcpy to and from remote views, host<->peer and peer->local. */
static void test_remote_view_memcpy(gpu_ctx_t *c) {
  const size_t n = 300000;
  const size_t bytes = n * sizeof(float);
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  int left2 = (c->rank + 2 * c->size - 2) % c->size;
  symm_tensor_t *t = alloc_f32(c, n);
  float *h = malloc(bytes);
  symm_view_t rv, lv;
  bool ok = t && h && CHECK_OK(c, symm_tensor_rendezvous(t)) &&
            CHECK_OK(c, symm_tensor_remote_view(t, right, &rv)) &&
            CHECK_OK(c, symm_tensor_remote_view(t, left, &lv));
  if (ok) {
    CHECK(c, rv.rank == right && rv.ndim == 1 && rv.sizes[0] == (int64_t)n,
          "remote view: rank %d ndim %d size %lld", rv.rank, rv.ndim, (long long)rv.sizes[0]);
    for (size_t i = 0; i < n; i++) h[i] = GPU_PATTERN(c->rank, i);
    CUDA_OK(c, cudaMemcpy(rv.data, h, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(c, cudaDeviceSynchronize());
  }
  barrier(c);
  if (ok) {
    /* Our buffer holds the left neighbour's pattern; reading the left
     * neighbour's buffer through the view gives its left neighbour's. */
    unsigned long long bad = pattern_mismatches(c, symm_tensor_data(t), n, left);
    CHECK(c, bad == 0, "%llu elements copied in by rank %d are wrong", bad, left);
    memset(h, 0, bytes);
    if (CUDA_OK(c, cudaMemcpy(h, lv.data, bytes, cudaMemcpyDeviceToHost))) {
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += h[i] != GPU_PATTERN(left2, i);
      CHECK(c, wrong == 0, "%zu elements read from rank %d's view are wrong", wrong, left);
    }
    float *scratch = NULL;
    if (CUDA_OK(c, cudaMalloc((void **)&scratch, bytes))) {
      CUDA_OK(c, cudaMemcpy(scratch, lv.data, bytes, cudaMemcpyDeviceToDevice));
      bad = pattern_mismatches(c, scratch, n, left2);
      CHECK(c, bad == 0, "%llu elements of the device-to-device copy are wrong", bad);
      cudaFree(scratch);
    }
  }
  barrier(c);
  free(h);
  symm_tensor_free(t);
}

/* The contiguous view holds every rank's data back to back; a kernel reads
 * all of it.  4 MiB of data is a multiple of the 2 MiB granularity, so the
 * header promises strides[0] == numel; 1000 floats is not. */
static void contiguous_case(gpu_ctx_t *c, size_t n, bool expect_dense) {
  symm_tensor_t *t = alloc_f32(c, n);
  bool ok = t && CHECK_OK(c, symm_tensor_rendezvous(t));
  if (ok) {
    CUDA_OK(c, gpu_fill(symm_tensor_data(t), n, (float)(c->rank + 1)));
    CUDA_OK(c, cudaDeviceSynchronize());
  }
  barrier(c);
  symm_view_t v;
  if (ok && CHECK_OK(c, symm_tensor_contiguous_view(t, &v))) {
    CHECK(c, v.ndim == 2 && v.sizes[0] == c->size && v.sizes[1] == (int64_t)n && v.rank == -1,
          "contiguous view: ndim %d sizes [%lld, %lld] rank %d", v.ndim, (long long)v.sizes[0],
          (long long)v.sizes[1], v.rank);
    CHECK(c, v.strides[0] >= (int64_t)n && v.strides[1] == 1, "strides [%lld, %lld] for %zu",
          (long long)v.strides[0], (long long)v.strides[1], n);
    if (expect_dense)
      CHECK(c, v.strides[0] == (int64_t)n,
            "strides[0] %lld != numel %zu: the data does not start at a granularity boundary "
            "(the core's data_offset should equal the native granularity)",
            (long long)v.strides[0], n);
    unsigned long long *bad = NULL, h = ~0ull;
    if (CUDA_OK(c, cudaMalloc((void **)&bad, sizeof *bad))) {
      CUDA_OK(c, cudaMemset(bad, 0, sizeof *bad));
      CUDA_OK(c, gpu_check_contiguous(v.data, c->size, v.strides[0], n, bad));
      CUDA_OK(c, cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
      CHECK(c, h == 0, "%llu elements of the contiguous view are wrong", h);
      cudaFree(bad);
    }
    symm_tensor_t *found = NULL;
    int rank = 0;
    float *last = (float *)v.data + (size_t)(c->size - 1) * (size_t)v.strides[0] + n - 1;
    if (CHECK_OK(c, symm_tensor_lookup(last, &found, &rank, NULL)))
      CHECK(c, found == t && rank == -1, "lookup in the contiguous view: %p rank %d",
            (void *)found, rank);
  }
  barrier(c);
  symm_tensor_free(t);
}

static void test_contiguous_view(gpu_ctx_t *c) {
  contiguous_case(c, (size_t)1 << 20, true);
  contiguous_case(c, 1000, false);
}

/* Different sizes or dtypes across ranks: SYMM_ERR_MISMATCH everywhere,
 * and the communicator still works afterwards. */
static void test_mismatch(gpu_ctx_t *c) {
  symm_tensor_t *t = alloc_f32(c, c->rank == 0 ? 1000 : 1001);
  if (t) CHECK_RES(c, symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);

  int64_t sizes[1] = {4096};
  t = NULL;
  CHECK_OK(c, symm_tensor_alloc(c->comm, sizes, 1, c->rank == 0 ? SYMM_DTYPE_F32 : SYMM_DTYPE_I32,
                                &t));
  if (t) CHECK_RES(c, symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  symm_tensor_free(t);

  t = alloc_f32(c, 4096);
  if (t) CHECK_OK(c, symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  barrier(c);
}

/* symm_validate accepts our memory and the backend's validate names what
 * is wrong with other memory. */
static void test_validate(gpu_ctx_t *c) {
  const size_t n = 1 << 18, bytes = n * sizeof(float);
  symm_tensor_t *t = alloc_f32(c, n);
  void *const *ptrs = NULL;
  void *dev = NULL;
  char host[4096];
  if (t && CHECK_OK(c, symm_tensor_rendezvous(t)) && CHECK_OK(c, symm_tensor_peer_ptrs(t, &ptrs))) {
    CHECK_OK(c, symm_validate(c->comm, symm_tensor_data(t), bytes));
    CHECK_OK(c, symm_validate(c->comm, ptrs[(c->rank + 1) % c->size], bytes));
    CHECK(c, symm_validate(c->comm, symm_tensor_data(t), bytes + ((size_t)64 << 20)) !=
                 SYMM_SUCCESS, "validate accepted a range past the allocation");
    size_t too_many = bytes + ((size_t)64 << 20);
    if (CHECK_RES(c, symm_native_ops.validate(c->comm, symm_tensor_data(t), too_many),
                  SYMM_ERR_MISMATCH))
      CHECK(c, strstr(symm_last_error(), "smaller") != NULL, "message: %s", symm_last_error());
    if (CUDA_OK(c, cudaMalloc(&dev, 1 << 20))) {
      CHECK_RES(c, symm_validate(c->comm, dev, 1024), SYMM_ERR_NOT_FOUND);
      if (CHECK_RES(c, symm_native_ops.validate(c->comm, dev, 1024), SYMM_ERR_INVALID_ARG))
        CHECK(c, strstr(symm_last_error(), "not VMM") != NULL, "message: %s", symm_last_error());
      cudaFree(dev);
    }
    if (CHECK_RES(c, symm_native_ops.validate(c->comm, host, sizeof host), SYMM_ERR_INVALID_ARG))
      CHECK(c, strstr(symm_last_error(), "not CUDA memory") != NULL, "message: %s",
            symm_last_error());
  }
  barrier(c);
  symm_tensor_free(t);
}

/* Rank 0 frees (and trims) its buffer while the others still map it: their
 * mappings stay valid, the data intact, until they free theirs. */
static void test_free_while_mapped(gpu_ctx_t *c) {
  const size_t n = (size_t)1 << 20;
  symm_tensor_t *t = alloc_f32(c, n);
  void *const *ptrs = NULL;
  bool ok = t && CHECK_OK(c, symm_tensor_rendezvous(t)) &&
            CHECK_OK(c, symm_tensor_peer_ptrs(t, &ptrs));
  if (ok && c->rank == 0) {
    CUDA_OK(c, gpu_write_pattern(symm_tensor_data(t), n, 7));
    CUDA_OK(c, cudaDeviceSynchronize());
  }
  barrier(c);
  if (c->rank == 0) {
    symm_tensor_free(t);
    t = NULL;
    CHECK_OK(c, symm_comm_pool_trim(c->comm, NULL));
  }
  barrier(c);
  if (ok && c->rank != 0) {
    unsigned long long bad = pattern_mismatches(c, ptrs[0], n, 7);
    CHECK(c, bad == 0, "%llu elements of rank 0's freed buffer changed under our mapping", bad);
  }
  barrier(c);
  symm_tensor_free(t);
  CHECK_OK(c, symm_comm_pool_trim(c->comm, NULL));
  barrier(c);
}

/* Signal pads are slots of the communicator's pad heap: each tensor's pad
 * is its own, zeroed, in front of its data in the same range, reached by
 * the peers, and untouched by another tensor's reuse. */
static void test_signal_pads(gpu_ctx_t *c) {
  enum { NT = 3 };
  const size_t n = (size_t)1 << 18, pad_bytes = symm_signal_pad_bytes();
  const size_t words = pad_bytes / sizeof(uint32_t);
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  symm_tensor_t *t[NT] = {NULL};
  uint32_t *h = malloc(pad_bytes);
  bool ok = h != NULL;
  for (int i = 0; i < NT && ok; i++)
    ok = (t[i] = alloc_f32(c, n)) != NULL && CHECK_OK(c, symm_tensor_rendezvous(t[i]));
  for (int i = 0; i < NT && ok; i++) {
    void *pad = NULL;
    ok = CHECK_OK(c, symm_tensor_signal_pad(t[i], c->rank, &pad));
    char *data = symm_tensor_data(t[i]);
    CHECK(c, ok && (char *)pad + pad_bytes <= data && (size_t)(data - (char *)pad) <= t[i]->mem.data_offset,
          "tensor %d: pad %p not in front of its data %p", i, pad, (void *)data);
    /* With one heap chunk, distinct slots are distinct offsets in it. */
    native_heap_info_t hi;
    if (ok && CHECK_OK(c, native_heap_info(c->comm, &hi)) && hi.chunks == 1)
      for (int j = 0; j < i; j++)
        CHECK(c, t[j]->mem.pad_offset != t[i]->mem.pad_offset,
              "tensors %d and %d: pads in the same slot (offset %zu)", j, i, t[i]->mem.pad_offset);
    if (ok && CUDA_OK(c, cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost))) {
      size_t nonzero = 0;
      for (size_t w = 0; w < words; w++) nonzero += h[w] != 0;
      CHECK(c, nonzero == 0, "tensor %d: %zu non-zero words in a fresh pad", i, nonzero);
    }
    if (ok) CUDA_OK(c, gpu_fill(symm_tensor_data(t[i]), n, (float)(c->rank + 1)));
  }
  if (ok) CUDA_OK(c, cudaDeviceSynchronize());
  barrier(c);
  /* Each rank signals its right neighbour's pads (copy engine, peer VA). */
  for (int i = 0; i < NT && ok; i++) {
    void *rpad = NULL;
    if (!CHECK_OK(c, symm_tensor_signal_pad(t[i], right, &rpad))) break;
    for (size_t w = 0; w < words; w++) h[w] = (uint32_t)(c->rank + 1) << 24 | (uint32_t)(i << 16) | (uint32_t)w;
    CUDA_OK(c, cudaMemcpy(rpad, h, pad_bytes, cudaMemcpyHostToDevice));
  }
  if (ok) CUDA_OK(c, cudaDeviceSynchronize());
  barrier(c);
  for (int i = 0; i < NT && ok; i++) {
    void *pad = NULL;
    if (!CHECK_OK(c, symm_tensor_signal_pad(t[i], c->rank, &pad))) break;
    if (CUDA_OK(c, cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost))) {
      size_t wrong = 0;
      for (size_t w = 0; w < words; w++)
        wrong += h[w] != ((uint32_t)(left + 1) << 24 | (uint32_t)(i << 16) | (uint32_t)w);
      CHECK(c, wrong == 0, "tensor %d: %zu pad words differ from rank %d's signal", i, wrong, left);
    }
    float *d = malloc(n * sizeof *d);
    if (d && CUDA_OK(c, cudaMemcpy(d, symm_tensor_data(t[i]), n * sizeof *d, cudaMemcpyDeviceToHost))) {
      size_t wrong = 0;
      for (size_t e = 0; e < n; e++) wrong += d[e] != (float)(c->rank + 1);
      CHECK(c, wrong == 0, "tensor %d: %zu data elements changed by pad signals", i, wrong);
    }
    free(d);
  }
  barrier(c);
  /* Tensor 1 through the pool: its pad is zeroed, its neighbours' are not. */
  if (ok) {
    symm_tensor_free(t[1]);
    t[1] = alloc_f32(c, n);
    ok = t[1] && CHECK_OK(c, symm_tensor_rendezvous(t[1]));
  }
  for (int i = 0; i < NT && ok; i++) {
    void *pad = NULL;
    if (!CHECK_OK(c, symm_tensor_signal_pad(t[i], c->rank, &pad))) break;
    if (CUDA_OK(c, cudaMemcpy(h, pad, pad_bytes, cudaMemcpyDeviceToHost))) {
      uint32_t want0 = i == 1 ? 0 : ((uint32_t)(left + 1) << 24 | (uint32_t)(i << 16));
      CHECK(c, h[0] == want0 && h[words - 1] == (i == 1 ? 0 : want0 + (uint32_t)(words - 1)),
            "tensor %d after reusing tensor 1: pad words %#x .. %#x", i, h[0], h[words - 1]);
    }
  }
  native_heap_info_t hi;
  if (CHECK_OK(c, native_heap_info(c->comm, &hi)))
    CHECK(c, hi.chunks >= 1 && hi.slots_used >= NT && hi.peer_chunks >= c->size - 1,
          "pad heap: %ld chunks, %ld slots used, %ld peer chunks", hi.chunks, hi.slots_used,
          hi.peer_chunks);
  barrier(c);
  for (int i = 0; i < NT; i++) symm_tensor_free(t[i]);
  free(h);
  barrier(c);
}

/* The device-side barriers of symmem_device.cuh in a kernel of ours: rounds
 * of ring writes between barriers see every neighbour's write and nothing
 * stale, with symm_dev_barrier_block (in a 512-thread block and in a 2-D
 * block of 2 threads) and with symm_dev_barrier; then a
 * barrier that only rank 0 enters reports SYMM_DEV_ERR_TIMEOUT naming a
 * peer, instead of hanging. */
static void test_device_barriers(gpu_ctx_t *c) {
  const size_t n = 4096;
  if (c->size < 2 || c->size > GPU_MAX_RANKS) return;
  symm_tensor_t *t = alloc_f32(c, n), *lone = alloc_f32(c, 1);
  bool ok = t && lone && CHECK_OK(c, symm_tensor_rendezvous(t)) &&
            CHECK_OK(c, symm_tensor_rendezvous(lone));
  void *const *peers = NULL;
  ok = ok && CHECK_OK(c, symm_tensor_peer_ptrs(t, &peers));
  gpu_ring_t ring;
  memset(&ring, 0, sizeof ring);
  ring.rank = c->rank;
  ring.world = c->size;
  ring.left = (c->rank + c->size - 1) % c->size;
  ring.n = n;
  ring.rounds = 20;
  ring.timeout_ns = 20ull * 1000 * 1000 * 1000;
  for (int r = 0; r < c->size && ok; r++) {
    void *pad = NULL;
    ok = CHECK_OK(c, symm_tensor_signal_pad(t, r, &pad));
    ring.pads[r] = pad;
  }
  if (ok) {
    ring.right_data = peers[(c->rank + 1) % c->size];
    ring.my_data = peers[c->rank];
  }
  uint32_t *err = NULL;
  unsigned long long *bad = NULL;
  ok = ok && CUDA_OK(c, cudaMalloc((void **)&err, 2 * sizeof(uint32_t))) &&
       CUDA_OK(c, cudaMalloc((void **)&bad, sizeof *bad));
  /* Every rank makes the same host barriers whatever failed locally (a
   * rank that skipped one would leave the others waiting). */
  static const char *const mode_names[3] = {"symm_dev_barrier_block",
                                            "symm_dev_barrier",
                                            "symm_dev_barrier_block (2-D block of 2 threads)"};
  for (int mode = 0; mode < 3; mode++) {
    barrier(c);
    if (!ok) continue;
    ring.mode = mode;
    uint32_t herr[2] = {1, 1};
    unsigned long long hbad = 1;
    ok = CUDA_OK(c, cudaMemset(err, 0, 2 * sizeof(uint32_t))) &&
         CUDA_OK(c, cudaMemset(bad, 0, sizeof *bad)) &&
         CUDA_OK(c, gpu_barrier_ring(&ring, err, bad)) && CUDA_OK(c, cudaDeviceSynchronize()) &&
         CUDA_OK(c, cudaMemcpy(herr, err, sizeof herr, cudaMemcpyDeviceToHost)) &&
         CUDA_OK(c, cudaMemcpy(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost));
    CHECK(c, ok && herr[0] == 0 && hbad == 0,
          "%s ring: error %u (peer %u), %llu stale or missing elements", mode_names[mode],
          herr[0], herr[1], hbad);
  }
  barrier(c);
  /* Rank 0 alone, on the other tensor's pads, with a short timeout. */
  if (ok && c->rank == 0) {
    for (int r = 0; r < c->size && ok; r++) {
      void *pad = NULL;
      ok = CHECK_OK(c, symm_tensor_signal_pad(lone, r, &pad));
      ring.pads[r] = pad;
    }
    ring.mode = 0;
    ring.rounds = 1;
    ring.timeout_ns = 200ull * 1000 * 1000;
    uint32_t herr[2] = {0, 0};
    ok = ok && CUDA_OK(c, cudaMemset(err, 0, 2 * sizeof(uint32_t))) &&
         CUDA_OK(c, cudaMemset(bad, 0, sizeof *bad)) &&
         CUDA_OK(c, gpu_barrier_ring(&ring, err, bad)) && CUDA_OK(c, cudaDeviceSynchronize()) &&
         CUDA_OK(c, cudaMemcpy(herr, err, sizeof herr, cudaMemcpyDeviceToHost));
    CHECK(c, ok && herr[0] == (uint32_t)SYMM_ERR_TIMEOUT && herr[1] != 0 && (int)herr[1] < c->size,
          "a barrier no peer enters: error %u, peer %u (want %d and a peer)", herr[0], herr[1],
          (int)SYMM_ERR_TIMEOUT); /* symmem_device.cuh: the codes equal symm_result_t's */
  }
  barrier(c);
  cudaFree(err);
  cudaFree(bad);
  if (t) symm_tensor_free(t);
  if (lone) symm_tensor_free(lone); /* its pads hold unconsumed signals: the pool zeroes them */
}

/* Many alloc -> rendezvous -> free cycles of varying sizes; after trimming
 * the pool, open fds and free GPU memory are back where they started.  The
 * pad heap (a granule per rank, its published fd, and the peers' imported
 * chunks) is per-communicator state that stays until symm_comm_destroy: a
 * warm-up allocation makes it before the baseline, and the heap is checked
 * not to grow and to have every slot back after the trim. */
static void test_alloc_cycles(gpu_ctx_t *c) {
  const int cycles = c->quick ? 50 : 1000;
  const size_t slack = (size_t)4 << 20;
  symm_tensor_t *w = alloc_f32(c, 1);
  if (w) CHECK_OK(c, symm_tensor_rendezvous(w));
  symm_tensor_free(w);
  CHECK_OK(c, symm_comm_pool_trim(c->comm, NULL));
  CUDA_OK(c, cudaDeviceSynchronize());
  barrier(c);
  int fds0 = count_fds();
  size_t free0 = gpu_free_bytes();
  native_heap_info_t heap0 = {0}, heap1 = {0};
  CHECK_OK(c, native_heap_info(c->comm, &heap0));
  CHECK(c, heap0.chunks >= 1 && heap0.slots_used == 0 && heap0.peer_chunks >= c->size - 1,
        "pad heap before the cycles: %ld chunks, %ld slots used, %ld peer chunks", heap0.chunks,
        heap0.slots_used, heap0.peer_chunks);
  barrier(c);
  int failed0 = c->failed;
  for (int i = 0; i < cycles && c->failed == failed0; i++) {
    size_t n = 1 + (size_t)((i * 7919) % 4096) * 1024; /* 4 B .. 16 MiB */
    symm_tensor_t *t = alloc_f32(c, n);
    if (!t) break;
    CHECK_OK(c, symm_tensor_rendezvous(t));
    symm_tensor_free(t);
  }
  size_t free_pooled = gpu_free_bytes();
  int64_t limit = (int64_t)symm_settings()->SYMM_POOL_BYTES;
  /* A peer on this GPU (shared device) pools its own memory here too. */
  int per_gpu = c->size;
  size_t pooled = free0 > free_pooled ? free0 - free_pooled : 0;
  CHECK(c, pooled <= (size_t)limit * (size_t)per_gpu + slack,
        "pool holds %zu bytes of GPU memory, limit %lld", pooled, (long long)limit);
  size_t released = 0;
  CHECK_OK(c, symm_comm_pool_trim(c->comm, &released));
  CUDA_OK(c, cudaDeviceSynchronize());
  barrier(c);
  int fds1 = count_fds();
  size_t free1 = gpu_free_bytes();
  CHECK_OK(c, native_heap_info(c->comm, &heap1));
  CHECK(c, heap1.chunks == heap0.chunks && heap1.slots_used == 0 &&
               heap1.peer_chunks == heap0.peer_chunks,
        "pad heap: %ld chunks / %ld peer chunks before the cycles, %ld / %ld after, %ld slots "
        "still used", heap0.chunks, heap0.peer_chunks, heap1.chunks, heap1.peer_chunks,
        heap1.slots_used);
  CHECK(c, fds1 == fds0, "open fds: %d before %d cycles, %d after", fds0, cycles, fds1);
  CHECK(c, free1 + slack >= free0, "free GPU memory: %zu before, %zu after (%zu lost)", free0,
        free1, free0 > free1 ? free0 - free1 : 0);
  if (c->rank == 0)
    printf("# cycles: %d, pool released %zu bytes, fds %d -> %d, free GPU memory %zu -> %zu, "
           "pad heap %ld chunk(s) of %zu bytes + %ld imported\n",
           cycles, released, fds0, fds1, free0, free1, heap1.chunks, heap1.chunk_bytes,
           heap1.peer_chunks);
  barrier(c);
}

/* ------------------------------------------------------------------ main */

typedef struct gpu_test {
  const char *name;
  void (*fn)(gpu_ctx_t *c);
} gpu_test_t;

static const gpu_test_t gpu_tests[] = {
    {"device_choice", test_device_choice},
    {"neighbor_kernel", test_neighbor_kernel},
    {"device_peer_array", test_device_peer_array},
    {"write_value32", test_write_value32},
    {"remote_view_memcpy", test_remote_view_memcpy},
    {"contiguous_view", test_contiguous_view},
    {"mismatch", test_mismatch},
    {"validate", test_validate},
    {"free_while_mapped", test_free_while_mapped},
    {"signal_pads", test_signal_pads},
    {"device_barriers", test_device_barriers},
    {"alloc_cycles", test_alloc_cycles},
};
#define GPU_NTESTS ((int)(sizeof gpu_tests / sizeof gpu_tests[0]))

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Init must refuse several ranks per GPU unless SYMM_ALLOW_SHARED_DEVICE. */
static int run_shared_refusal(void) {
  gpu_ctx_t c = {0};
  c.rank = getenv("SYMM_RANK") ? atoi(getenv("SYMM_RANK")) : 0;
  unsetenv("SYMM_ALLOW_SHARED_DEVICE");
  symm_comm_t *comm = NULL;
  if (CHECK_RES(&c, symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG))
    CHECK(&c, strstr(symm_last_error(), "SYMM_ALLOW_SHARED_DEVICE") != NULL,
          "refusal does not say how to allow sharing: %s", symm_last_error());
  symm_comm_destroy(comm);
  printf("rank %d: shared_device_refusal: %s\n%d passed, %d failed\n", c.rank,
         c.failed ? "FAIL" : "ok", c.failed ? 0 : 1, c.failed ? 1 : 0);
  return c.failed ? 1 : 0;
}

/* A test fails if it failed on any rank: counted through the store. */
static int report(gpu_ctx_t *c, const int *failed_by_test) {
  symm_store_t *store = symm_comm_store(c->comm);
  for (int i = 0; i < GPU_NTESTS; i++) {
    char key[64];
    snprintf(key, sizeof key, "gputest/%s", gpu_tests[i].name);
    CHECK_OK(c, symm_store_add(store, key, failed_by_test[i] ? 1 : 0, NULL));
  }
  barrier(c);
  if (c->rank != 0) {
    /* Stay until rank 0 has printed: symmem-run stops the job as soon as a
     * rank exits with a failure. */
    barrier(c);
    return 0;
  }
  int passed = 0, failed = 0;
  for (int i = 0; i < GPU_NTESTS; i++) {
    char key[64];
    int64_t ranks_failed = -1;
    snprintf(key, sizeof key, "gputest/%s", gpu_tests[i].name);
    symm_store_add(store, key, 0, &ranks_failed);
    printf("%-20s %s", gpu_tests[i].name, ranks_failed == 0 ? "ok" : "FAIL");
    if (ranks_failed)
      printf(" (on %lld rank%s)", (long long)ranks_failed, ranks_failed == 1 ? "" : "s");
    printf("\n");
    if (ranks_failed == 0)
      passed++;
    else
      failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  fflush(stdout);
  barrier(c);
  return failed;
}

int main(int argc, char **argv) {
  gpu_ctx_t c = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) c.quick = true;
    else if (strcmp(argv[i], "--expect-shared-refusal") == 0) return run_shared_refusal();
    else {
      fprintf(stderr, "usage: %s [--quick | --expect-shared-refusal]\n", argv[0]);
      return 2;
    }
  }
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.backend = SYMM_BACKEND_NATIVE;
  if (symm_comm_init(&cfg, &c.comm) != SYMM_SUCCESS) {
    fprintf(stderr, "symm_comm_init: %s\n0 passed, 1 failed\n", symm_last_error());
    return 1;
  }
  c.rank = symm_comm_rank(c.comm);
  c.size = symm_comm_size(c.comm);
  c.device = symm_comm_device(c.comm);
  /* Applications should select the communicator's GPU for their own CUDA
   * runtime calls; init already left its primary context current. */
  cudaSetDevice(c.device);
  if (c.rank == 0)
    printf("# symm-gpu-tests: %d ranks, backend native%s\n", c.size, c.quick ? ", quick" : "");

  int failed_by_test[GPU_NTESTS];
  for (int i = 0; i < GPU_NTESTS; i++) {
    int before = c.failed;
    double t0 = now_ms();
    gpu_tests[i].fn(&c);
    failed_by_test[i] = c.failed - before;
    if (failed_by_test[i])
      fprintf(stderr, "rank %d: %s FAILED (%d checks, %.0f ms)\n", c.rank, gpu_tests[i].name,
              failed_by_test[i], now_ms() - t0);
  }
  int global = report(&c, failed_by_test);
  symm_comm_destroy(c.comm);
  return (c.failed || global) ? 1 : 0;
}
