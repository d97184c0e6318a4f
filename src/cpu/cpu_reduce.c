/* CPU engine: the arithmetic of reductions.  cpu_reduce combines `nin`
 * input arrays element by element, always in input order (in[0] op in[1] op
 * ...), so that every rank and every algorithm gets the same bits.
 *
 * Speed comes from two habits.  The dtype and op are switched on once per
 * call, never per element.  Every inner loop runs in fixed steps of VEC
 * elements over restrict pointers: GCC's default -O2 cost model vectorizes
 * only loops whose trip count is a known multiple of the vector width, which
 * a step of VEC is.  The work goes block by block (BLOCK elements) so that
 * the partial result stays in L1 while the third and later inputs are
 * folded in; f16 and bf16 are widened into a float block, reduced in f32 and
 * rounded to nearest-even once at the end. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdbool.h>
#include <string.h>

#include "cpu/cpu.h"

#define VEC 32
#define BLOCK 2048 /* a multiple of VEC; the float block is 8 KiB of stack */

/* Runs BODY for i in [0, n): full VEC-element steps, then the tail. */
#define STEPPED(n, BODY)                                                      \
  do {                                                                        \
    size_t s_ = 0;                                                            \
    for (; s_ + VEC <= (n); s_ += VEC)                                        \
      for (size_t i = s_; i < s_ + VEC; i++) BODY;                            \
    for (size_t i = s_; i < (n); i++) BODY;                                   \
  } while (0)

#define OP_SUM(a, b) ((a) + (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))

/* ----------------------------------------------------------- conversions */

static inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* All-ones where cond holds: the conversions pick between candidates with
 * masks rather than branches, so that they vectorize even under the default
 * -ftrapping-math (which forbids the compiler to compute float candidates
 * speculatively on its own). */
static inline uint32_t mask_if(bool cond) { return 0u - (uint32_t)cond; }

static inline uint32_t pick_bits(bool cond, uint32_t yes, uint32_t no) {
  uint32_t m = mask_if(cond);
  return (yes & m) | (no & ~m);
}

static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* Round to nearest even on the 16 dropped bits; NaNs stay NaN (quieted). */
static inline uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_of_f32(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet = (u >> 16) | 0x40u;
  return (uint16_t)pick_bits((u & 0x7fffffffu) > 0x7f800000u, quiet, rounded);
}

/* Normal numbers rebias the exponent, Inf/NaN keep an all-ones exponent,
 * zero and subnormals (m * 2^-24) are made exact by a float subtraction:
 * m * 2^-24 = (1 + m * 2^-10) * 2^-14 - 2^-14. */
static inline float f16_to_f32(uint16_t h) {
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
  uint32_t exp = em & 0x0f800000u;
  uint32_t normal = em + (112u << 23);
  uint32_t special = em + (224u << 23);
  uint32_t sub = bits_of_f32(f32_from_bits(em + (113u << 23)) - 0x1p-14f);
  uint32_t mag = pick_bits(exp == 0x0f800000u, special, pick_bits(exp == 0, sub, normal));
  return f32_from_bits(mag | ((uint32_t)(h & 0x8000u) << 16));
}

/* Round to nearest even.  Normal results: add half an f16 ulp (minus one,
 * plus the kept lowest bit) and truncate; a carry into the exponent gives
 * the next binade or Inf, as it should.  Subnormal results: adding 0.5f
 * makes the FPU itself round at 2^-24, the f16 subnormal step. */
static inline uint16_t f32_to_f16(float f) {
  uint32_t u = bits_of_f32(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t big = pick_bits(a > 0x7f800000u, 0x7e00u, 0x7c00u);
  uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  /* min(): keeps Inf/NaN out of the addition (their result is not used). */
  uint32_t sub = bits_of_f32(f32_from_bits(a < 0x38800000u ? a : 0x38800000u) + 0.5f) - 0x3f000000u;
  uint32_t mag = pick_bits(a >= (143u << 23), big, pick_bits(a < (113u << 23), sub, normal));
  return (uint16_t)(mag | sign);
}

/* ------------------------------------------------- f32, i32 (same shape) */

#define DEFINE_DIRECT(NAME, T, OP)                                            \
  static void NAME##_pair(T *restrict o, const T *restrict x, const T *restrict y, size_t n) { \
    STEPPED(n, o[i] = OP(x[i], y[i]));                                        \
  }                                                                           \
  static void NAME##_fold(T *restrict o, const T *restrict y, size_t n) {     \
    STEPPED(n, o[i] = OP(o[i], y[i]));                                        \
  }                                                                           \
  static void NAME(void *out, const void *const *in, int nin, size_t n) {     \
    T *o = out;                                                               \
    for (size_t b = 0; b < n; b += BLOCK) {                                   \
      size_t len = n - b < BLOCK ? n - b : BLOCK;                             \
      NAME##_pair(o + b, (const T *)in[0] + b, (const T *)in[1] + b, len);    \
      for (int r = 2; r < nin; r++) NAME##_fold(o + b, (const T *)in[r] + b, len); \
    }                                                                         \
  }

DEFINE_DIRECT(reduce_f32_sum, float, OP_SUM)
DEFINE_DIRECT(reduce_f32_min, float, OP_MIN)
DEFINE_DIRECT(reduce_f32_max, float, OP_MAX)
/* Two's-complement wrap-around without signed overflow: add as unsigned
 * (int32_t and uint32_t may alias each other). */
DEFINE_DIRECT(reduce_i32_sum, uint32_t, OP_SUM)
DEFINE_DIRECT(reduce_i32_min, int32_t, OP_MIN)
DEFINE_DIRECT(reduce_i32_max, int32_t, OP_MAX)

/* ------------------------------------------ f16, bf16: reduce in f32 */

#define DEFINE_WIDENED(NAME, TO_F32, FROM_F32, OP)                            \
  static void NAME##_load(float *restrict acc, const uint16_t *restrict x, size_t n) { \
    STEPPED(n, acc[i] = TO_F32(x[i]));                                        \
  }                                                                           \
  static void NAME##_fold(float *restrict acc, const uint16_t *restrict x, size_t n) { \
    STEPPED(n, acc[i] = OP(acc[i], TO_F32(x[i])));                            \
  }                                                                           \
  static void NAME##_store(uint16_t *restrict o, const float *restrict acc, size_t n) { \
    STEPPED(n, o[i] = FROM_F32(acc[i]));                                      \
  }                                                                           \
  static void NAME(void *out, const void *const *in, int nin, size_t n) {     \
    float acc[BLOCK];                                                         \
    uint16_t *o = out;                                                        \
    for (size_t b = 0; b < n; b += BLOCK) {                                   \
      size_t len = n - b < BLOCK ? n - b : BLOCK;                             \
      NAME##_load(acc, (const uint16_t *)in[0] + b, len);                     \
      for (int r = 1; r < nin; r++) NAME##_fold(acc, (const uint16_t *)in[r] + b, len); \
      NAME##_store(o + b, acc, len);                                          \
    }                                                                         \
  }

DEFINE_WIDENED(reduce_bf16_sum, bf16_to_f32, f32_to_bf16, OP_SUM)
DEFINE_WIDENED(reduce_bf16_min, bf16_to_f32, f32_to_bf16, OP_MIN)
DEFINE_WIDENED(reduce_bf16_max, bf16_to_f32, f32_to_bf16, OP_MAX)
DEFINE_WIDENED(reduce_f16_sum, f16_to_f32, f32_to_f16, OP_SUM)
DEFINE_WIDENED(reduce_f16_min, f16_to_f32, f32_to_f16, OP_MIN)
DEFINE_WIDENED(reduce_f16_max, f16_to_f32, f32_to_f16, OP_MAX)

typedef void (*reduce_fn)(void *out, const void *const *in, int nin, size_t n);

static reduce_fn pick(symm_dtype_t dtype, symm_redop_t op) {
  static const reduce_fn table[4][SYMM_REDUCE_COUNT_] = {
      {reduce_f32_sum, reduce_f32_min, reduce_f32_max},
      {reduce_i32_sum, reduce_i32_min, reduce_i32_max},
      {reduce_bf16_sum, reduce_bf16_min, reduce_bf16_max},
      {reduce_f16_sum, reduce_f16_min, reduce_f16_max},
  };
  int row = dtype == SYMM_DTYPE_F32 ? 0 : dtype == SYMM_DTYPE_I32 ? 1
          : dtype == SYMM_DTYPE_BF16 ? 2 : dtype == SYMM_DTYPE_F16 ? 3 : -1;
  return row < 0 || (unsigned)op >= SYMM_REDUCE_COUNT_ ? NULL : table[row][op];
}

void cpu_reduce(void *out, const void *const *in, int nin, size_t count, symm_dtype_t dtype,
                 symm_redop_t op) {
  if (!count) return;
  if (nin == 1) {
    /* One input: no arithmetic, but f16/bf16 still pass through unchanged. */
    memcpy(out, in[0], count * symm_dtype_size(dtype));
    return;
  }
  pick(dtype, op)(out, in, nin, count);
}
