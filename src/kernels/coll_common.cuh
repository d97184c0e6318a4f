/* What the collectives share on the data side: block partitions, copies,
 * dtypes and reduction operators, the deterministic reduction over peers
 * and the pushes into peers' staging.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_COMMON_CUH
#define SYMM_COLL_COMMON_CUH

/* ------------------------------------------------------------ partition */

/* Block blockIdx.x's part [lo, hi) of n elements, in pieces that are
 * multiples of `unit` elements (the 16-byte vector). */
static __device__ __forceinline__ void coll_block_range(uint64_t n, uint64_t unit, uint64_t *lo,
                                                        uint64_t *hi) {
  uint64_t per = (n + gridDim.x - 1) / gridDim.x;
  per = (per + unit - 1) / unit * unit;
  uint64_t l = (uint64_t)blockIdx.x * per;
  *lo = l < n ? l : n;
  *hi = l + per < n ? l + per : n;
}

static __device__ __forceinline__ char *coll_stage(const params_t &a, int rank, uint32_t parity) {
  return (char *)(uintptr_t)(a.peer_data[rank] + SYMM_COLL_STAGE_OFF + parity * a.stage_half);
}

/* dst[0, bytes) = src[0, bytes); 16-byte vectors when vec (both 16-byte
 * aligned), bytes otherwise.  All threads of the block share the work; each
 * thread keeps COLL_UNROLL loads in flight, which is what it takes to fill
 * NVLink with the few dozen blocks a collective runs. */
#ifndef SYMM_COLL_UNROLL /* a tuning knob (bench/tune-native.sh, SYMM_KERNEL_FLAGS) */
#define SYMM_COLL_UNROLL 4
#endif
enum { COLL_UNROLL = SYMM_COLL_UNROLL };
/* The same shared by threads t of nt (a warp's lanes, say). */
static __device__ __forceinline__ void coll_copy_by(char *dst, const char *src, uint64_t bytes,
                                                    bool vec, uint32_t t, uint32_t nt) {
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = bytes / 16, bd = nt;
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    uint64_t i = t;
    for (; i + (COLL_UNROLL - 1) * bd < nv; i += COLL_UNROLL * bd) {
      uint4 x[COLL_UNROLL];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) x[u] = s[i + u * bd];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) d[i + u * bd] = x[u];
    }
    for (; i < nv; i += bd) d[i] = s[i];
    done = nv * 16;
  }
  for (uint64_t i = done + t; i < bytes; i += nt) dst[i] = src[i];
}
static __device__ __forceinline__ void coll_copy(char *dst, const char *src, uint64_t bytes,
                                                 bool vec) {
  coll_copy_by(dst, src, bytes, vec, threadIdx.x, blockDim.x);
}

/* ----------------------------------------------------- dtypes and ops */

/* Every dtype's accumulator and conversions.  f16, bf16 and FP8 reduce in
 * f32 and round to nearest-even once (FP8 saturating to the largest finite
 * value, as the __nv_fp8 constructors do); integers narrower than 32 bits
 * accumulate in 32, and sums and products wrap (as unsigned), which the
 * final narrowing keeps.  avg(acc, W): the sum divided by the ranks;
 * integers divide the wrapped sum, truncating, as the CPU engine does. */
template <typename T> struct dt;
#define COLL_DT_FLOAT(T, ACC, LOAD, STORE)                                    \
  template <> struct dt<T> {                                                  \
    typedef ACC acc_t;                                                        \
    static __device__ __forceinline__ acc_t load(T x) { return LOAD; }        \
    static __device__ __forceinline__ T store(acc_t x) { return STORE; }      \
    static __device__ __forceinline__ T avg(acc_t x, int w) { return store(x / (acc_t)w); } \
  };
COLL_DT_FLOAT(float, float, x, x)
COLL_DT_FLOAT(double, double, x, x)
COLL_DT_FLOAT(__nv_bfloat16, float, __bfloat162float(x), __float2bfloat16_rn(x))
COLL_DT_FLOAT(__half, float, __half2float(x), __float2half_rn(x))
COLL_DT_FLOAT(__nv_fp8_e4m3, float, (float)x, __nv_fp8_e4m3(x))
COLL_DT_FLOAT(__nv_fp8_e5m2, float, (float)x, __nv_fp8_e5m2(x))
#define COLL_DT_INT(T, ACC)                                                   \
  template <> struct dt<T> {                                                  \
    typedef ACC acc_t;                                                        \
    static __device__ __forceinline__ acc_t load(T x) { return (acc_t)x; }    \
    static __device__ __forceinline__ T store(acc_t x) { return (T)x; }       \
    static __device__ __forceinline__ T avg(acc_t x, int w) {                 \
      return (T)((T)x / (long long)w);                                        \
    }                                                                         \
  };
COLL_DT_INT(int8_t, int32_t)
COLL_DT_INT(int16_t, int32_t)
COLL_DT_INT(int32_t, int32_t)
COLL_DT_INT(int64_t, int64_t)
COLL_DT_INT(uint8_t, uint32_t)
COLL_DT_INT(uint16_t, uint32_t)
COLL_DT_INT(uint32_t, uint32_t)
COLL_DT_INT(uint64_t, uint64_t)

/* Integer sums and products as unsigned: wrap-around without signed
 * overflow. */
template <typename A> struct coll_wrap { typedef A u; };
template <> struct coll_wrap<int32_t> { typedef uint32_t u; };
template <> struct coll_wrap<int64_t> { typedef uint64_t u; };

struct op_sum {
  enum { is_avg = 0 };
  template <typename A> static __device__ __forceinline__ A apply(A x, A y) {
    typedef typename coll_wrap<A>::u U;
    return (A)((U)x + (U)y);
  }
};
struct op_avg : op_sum {
  enum { is_avg = 1 };
};
struct op_prod {
  enum { is_avg = 0 };
  template <typename A> static __device__ __forceinline__ A apply(A x, A y) {
    typedef typename coll_wrap<A>::u U;
    return (A)((U)x * (U)y);
  }
};
struct op_min {
  enum { is_avg = 0 };
  static __device__ __forceinline__ float apply(float x, float y) { return fminf(x, y); }
  static __device__ __forceinline__ double apply(double x, double y) { return fmin(x, y); }
  template <typename A> static __device__ __forceinline__ A apply(A x, A y) {
    return y < x ? y : x;
  }
};
struct op_max {
  enum { is_avg = 0 };
  static __device__ __forceinline__ float apply(float x, float y) { return fmaxf(x, y); }
  static __device__ __forceinline__ double apply(double x, double y) { return fmax(x, y); }
  template <typename A> static __device__ __forceinline__ A apply(A x, A y) {
    return y > x ? y : x;
  }
};

/* The final value of an element from its accumulator over w ranks. */
template <typename T, typename Op>
static __device__ __forceinline__ T coll_finish(typename dt<T>::acc_t acc, int w) {
  return Op::is_avg ? dt<T>::avg(acc, w) : dt<T>::store(acc);
}

/* One 16-byte vector of T. */
template <typename T> union vec16 {
  uint4 u;
  T v[16 / sizeof(T)];
};

/* Rank a deterministic combination starts at for work item x (a warp's
 * vector, packet group or lines): any function of x alone keeps every rank
 * combining in the same order; 32-bit, since a 64-bit modulo by a run-time
 * value is a long software sequence. */
static __device__ __forceinline__ int coll_start_rank(uint64_t x, int world) {
  return (int)((uint32_t)x % (uint32_t)world);
}

/* Rank combined at step k when the combination starts at rank s. */
static __device__ __forceinline__ int coll_rank_at(int s, int k, int world) {
  return s + k < world ? s + k : s + k - world;
}

/*
 * out[i] = op over ranks r of src(r)[i] for i in [lo, hi), where src(r) is
 * `own` for r == a.rank and the T array at src_base + r * src_stride (this
 * rank's staging, where the peers pushed their data) otherwise.  With
 * push_off != 0 the result also goes to every peer, from the same
 * registers: element i to its scratch at push_off + i * sizeof(T), or with
 * push_off == COLL_PUSH_RECV to its recv (a.peer_recv).
 * `start(i)` picks the rank the combination starts at; ranks are combined
 * in the order start, start + 1, ... (mod world).  lo is a multiple of the
 * vector when vec.
 */
#define COLL_PUSH_RECV (~(uint64_t)0)
static __device__ __forceinline__ uint64_t coll_push_base(const params_t &a, int p,
                                                          uint64_t push_off) {
  return push_off == COLL_PUSH_RECV ? a.peer_recv[p] : a.peer_data[p] + push_off;
}

template <typename T, typename Op, bool Det>
static __device__ void coll_reduce(const params_t &a, T *out, const T *own, uint64_t src_base,
                                   uint64_t src_stride, uint64_t push_off, uint64_t lo,
                                   uint64_t hi, bool vec) {
  typedef typename dt<T>::acc_t acc_t;
  const int W = a.world;
  const int V = 16 / sizeof(T);
  const uint64_t bd = blockDim.x;
  uint64_t i0 = lo;
  if (vec) {
    const uint64_t v_lo = lo / V, v_hi = hi / V;
    for (uint64_t v0 = v_lo + threadIdx.x; v0 < v_hi; v0 += COLL_UNROLL * bd) {
      acc_t acc[COLL_UNROLL][16 / sizeof(T)];
      int s[COLL_UNROLL];
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++)
        /* Deterministic: the start depends on the warp's position only. */
        s[u] = Det ? coll_start_rank((v0 + u * bd) >> 5, W) : (a.rank + 1) % W;
      for (int k = 0; k < W; k++) {
        vec16<T> x[COLL_UNROLL];
#pragma unroll
        for (int u = 0; u < COLL_UNROLL; u++) { /* every load first: they overlap */
          const uint64_t vi = v0 + u * bd;
          const int r = coll_rank_at(s[u], k, W);
          const uint4 *src = r == a.rank ? (const uint4 *)own
                                         : (const uint4 *)(uintptr_t)(src_base + r * src_stride);
          x[u].u = vi < v_hi ? src[vi] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < COLL_UNROLL; u++)
#pragma unroll
          for (int j = 0; j < V; j++)
            acc[u][j] = k == 0 ? dt<T>::load(x[u].v[j])
                               : Op::apply(acc[u][j], dt<T>::load(x[u].v[j]));
      }
#pragma unroll
      for (int u = 0; u < COLL_UNROLL; u++) {
        const uint64_t vi = v0 + u * bd;
        if (vi >= v_hi) break;
        vec16<T> y;
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = coll_finish<T, Op>(acc[u][j], W);
        ((uint4 *)out)[vi] = y.u;
        if (push_off)
          for (int k = 1; k < W; k++)
            ((uint4 *)(uintptr_t)coll_push_base(a, coll_rank_at(a.rank, k, W), push_off))[vi] = y.u;
      }
    }
    i0 = v_hi * V > lo ? v_hi * V : lo;
  }
  for (uint64_t i = i0 + threadIdx.x; i < hi; i += bd) {
    int s = Det ? coll_start_rank(i / V >> 5, W) : (a.rank + 1) % W;
    acc_t acc = 0;
    for (int k = 0; k < W; k++) {
      int r = coll_rank_at(s, k, W);
      T x = r == a.rank ? own[i] : ((const T *)(uintptr_t)(src_base + r * src_stride))[i];
      acc = k == 0 ? dt<T>::load(x) : Op::apply(acc, dt<T>::load(x));
    }
    const T y = coll_finish<T, Op>(acc, W);
    out[i] = y;
    if (push_off)
      for (int k = 1; k < W; k++)
        ((T *)(uintptr_t)coll_push_base(a, coll_rank_at(a.rank, k, W), push_off))[i] = y;
  }
}

/* Writes elements [l, h) of src into every peer's scratch at dst_off +
 * l * es: remote stores, so no read has to cross NVLink and back. */
static __device__ __forceinline__ void coll_push(const params_t &a, const char *src,
                                                 uint64_t dst_off, uint64_t l, uint64_t h,
                                                 uint64_t es, bool vec) {
  for (int k = 1; k < a.world; k++) {
    const int p = coll_rank_at(a.rank, k, a.world);
    coll_copy((char *)(uintptr_t)(a.peer_data[p] + dst_off) + l * es, src + l * es, (h - l) * es,
              vec);
  }
}

/* Scatter push: elements [lo, hi) of every peer q's segment of send
 * (segment q is [q * seg, (q + 1) * seg), cut at n) go to region `rank` of
 * q's scratch at dst_off, where element q * seg + i lands at
 * dst_off + (rank * seg + i) * sizeof(T). */
template <typename T>
static __device__ __forceinline__ void coll_push_segments(const params_t &a, const T *send,
                                                          uint64_t dst_off, uint64_t seg,
                                                          uint64_t n, uint64_t lo, uint64_t hi,
                                                          bool vec) {
  for (int k = 1; k < a.world; k++) {
    const int q = coll_rank_at(a.rank, k, a.world);
    const uint64_t l = q * seg + lo, h = q * seg + hi < n ? q * seg + hi : n;
    if (l < h)
      coll_copy((char *)(uintptr_t)(a.peer_data[q] + dst_off) + (a.rank * seg + lo) * sizeof(T),
                (const char *)(send + l), (h - l) * sizeof(T), vec);
  }
}

/* Byte offset of this epoch's staging half in every rank's scratch data. */
static __device__ __forceinline__ uint64_t coll_stage_off(const params_t &a, const coll_ctx &c) {
  return SYMM_COLL_STAGE_OFF + c.parity * a.stage_half;
}

#endif /* SYMM_COLL_COMMON_CUH */
