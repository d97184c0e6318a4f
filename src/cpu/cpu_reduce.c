/* CPU engine: the arithmetic of reductions.  cpu_reduce combines `nin`
 * input arrays element by element, always in input order (in[0] op in[1] op
 * ...), so that every rank and every algorithm gets the same bits.  Every
 * dtype takes every op: integers add and multiply with two's-complement
 * wrap-around (as unsigned) and average by truncating division of that
 * sum (NCCL's integer avg); floats average by dividing the sum once.
 *
 * Speed comes from two habits.  The dtype and op are switched on once per
 * call, never per element.  Every inner loop runs in fixed steps of VEC
 * elements over restrict pointers: GCC's default -O2 cost model vectorizes
 * only loops whose trip count is a known multiple of the vector width, which
 * a step of VEC is.  The work goes block by block (BLOCK elements) so that
 * the partial result stays in L1 while the third and later inputs are
 * folded in; f16, bf16 and the FP8 types are widened into a float block,
 * reduced in f32 and rounded to nearest-even once at the end (FP8 with
 * saturation: what exceeds the largest finite value becomes it). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <math.h>
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
#define OP_PROD(a, b) ((a) * (b))

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

/* FP8: 1 sign bit, E exponent bits (bias 2^(E-1) - 1), M mantissa bits.
 * E4M3 (PyTorch's float8_e4m3fn) has no Inf: its only NaN is all ones, and
 * it reaches 448; E5M2 has IEEE Inf and NaN and reaches 57344.  Scalar
 * code: the other types carry the speed. */
typedef struct {
  int mbits, bias;
  uint8_t max_finite, nan; /* codes without the sign */
  bool has_inf;
} fp8_format_t;

static const fp8_format_t fp8_e4m3 = {3, 7, 0x7e, 0x7f, false};
static const fp8_format_t fp8_e5m2 = {2, 15, 0x7b, 0x7e, true};

static float fp8_to_f32(uint8_t b, const fp8_format_t *f) {
  const int e = (b & 0x7f) >> f->mbits, m = b & ((1 << f->mbits) - 1);
  float v;
  if ((b & 0x7f) > f->max_finite)
    v = f->has_inf && m == 0 ? INFINITY : NAN;
  else if (e == 0)
    v = ldexpf((float)m, 1 - f->bias - f->mbits);
  else
    v = ldexpf((float)((1 << f->mbits) | m), e - f->bias - f->mbits);
  return b & 0x80 ? -v : v;
}

/* Round to nearest even; beyond the largest finite value (Inf included)
 * saturate to it; NaN stays NaN. */
static uint8_t f32_to_fp8(float x, const fp8_format_t *f) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fabsf(x);
  if (isnan(a)) return (uint8_t)(sign | f->nan);
  if (isinf(a)) return (uint8_t)(sign | f->max_finite);
  int exp;
  (void)frexpf(a, &exp); /* a = frac * 2^exp, frac in [0.5, 1) */
  const int emin = 1 - f->bias; /* the smallest normal's exponent */
  /* The value's spacing: 2^(e - M) for a normal a in [2^e, 2^(e+1)), the
   * subnormals' below; a / spacing rounded is the code's significand. */
  const int e = exp - 1 < emin ? emin : exp - 1;
  const float steps = nearbyintf(ldexpf(a, f->mbits - e));
  unsigned code;
  if (steps < (float)(1 << f->mbits))
    code = (unsigned)steps; /* subnormal (or zero), or the smallest normal by carry */
  else
    code = ((unsigned)(e + f->bias) << f->mbits) + (unsigned)steps - (1u << f->mbits);
  if (code > f->max_finite) code = f->max_finite;
  return (uint8_t)(sign | code);
}

static inline float e4m3_to_f32(uint8_t b) { return fp8_to_f32(b, &fp8_e4m3); }
static inline uint8_t f32_to_e4m3(float x) { return f32_to_fp8(x, &fp8_e4m3); }
static inline float e5m2_to_f32(uint8_t b) { return fp8_to_f32(b, &fp8_e5m2); }
static inline uint8_t f32_to_e5m2(float x) { return f32_to_fp8(x, &fp8_e5m2); }

/* ------------------------------------------ floats and integers, in place */

/* POST(x, n) finishes an element after the last input: itself, or (avg)
 * the sum read as ST divided by the n inputs (signed integers truncate
 * toward zero; n as int64_t, which no 8-bit type could hold). */
#define POST_NONE(T, ST, x, n) (x)
#define POST_AVG(T, ST, x, n) ((T)((ST)(x) / (int64_t)(n)))

#define DEFINE_DIRECT(NAME, T, ST, OP, POST)                                  \
  static void NAME##_pair(T *restrict o, const T *restrict x, const T *restrict y, size_t n) { \
    STEPPED(n, o[i] = OP(x[i], y[i]));                                        \
  }                                                                           \
  static void NAME##_fold(T *restrict o, const T *restrict y, size_t n) {     \
    STEPPED(n, o[i] = OP(o[i], y[i]));                                        \
  }                                                                           \
  static void NAME##_post(T *restrict o, int nin, size_t n) {                 \
    (void)nin;                                                                \
    STEPPED(n, o[i] = POST(T, ST, o[i], nin));                                \
  }                                                                           \
  static void NAME(void *out, const void *const *in, int nin, size_t n) {     \
    T *o = out;                                                               \
    for (size_t b = 0; b < n; b += BLOCK) {                                   \
      size_t len = n - b < BLOCK ? n - b : BLOCK;                             \
      NAME##_pair(o + b, (const T *)in[0] + b, (const T *)in[1] + b, len);    \
      for (int r = 2; r < nin; r++) NAME##_fold(o + b, (const T *)in[r] + b, len); \
      NAME##_post(o + b, nin, len);                                           \
    }                                                                         \
  }

/* The five ops of one type.  U: the type that adds and multiplies (for
 * integers the unsigned one, whose wrap-around is defined; any integer
 * type may alias its unsigned twin), S: the type that compares and
 * divides. */
#define DEFINE_DIRECT_OPS(TN, U, S)                                           \
  DEFINE_DIRECT(reduce_##TN##_sum, U, U, OP_SUM, POST_NONE)                   \
  DEFINE_DIRECT(reduce_##TN##_min, S, S, OP_MIN, POST_NONE)                   \
  DEFINE_DIRECT(reduce_##TN##_max, S, S, OP_MAX, POST_NONE)                   \
  DEFINE_DIRECT(reduce_##TN##_prod, U, U, OP_PROD, POST_NONE)                 \
  DEFINE_DIRECT(reduce_##TN##_avg, U, S, OP_SUM, POST_AVG)

DEFINE_DIRECT_OPS(f32, float, float)
DEFINE_DIRECT_OPS(f64, double, double)
DEFINE_DIRECT_OPS(i8, uint8_t, int8_t)
DEFINE_DIRECT_OPS(i16, uint16_t, int16_t)
DEFINE_DIRECT_OPS(i32, uint32_t, int32_t)
DEFINE_DIRECT_OPS(i64, uint64_t, int64_t)
DEFINE_DIRECT_OPS(u8, uint8_t, uint8_t)
DEFINE_DIRECT_OPS(u16, uint16_t, uint16_t)
DEFINE_DIRECT_OPS(u32, uint32_t, uint32_t)
DEFINE_DIRECT_OPS(u64, uint64_t, uint64_t)

/* ------------------------------- f16, bf16, FP8: reduce in f32 */

#define DEFINE_WIDENED(NAME, ST, TO_F32, FROM_F32, OP, POST)                  \
  static void NAME##_load(float *restrict acc, const ST *restrict x, size_t n) { \
    STEPPED(n, acc[i] = TO_F32(x[i]));                                        \
  }                                                                           \
  static void NAME##_fold(float *restrict acc, const ST *restrict x, size_t n) { \
    STEPPED(n, acc[i] = OP(acc[i], TO_F32(x[i])));                            \
  }                                                                           \
  static void NAME##_store(ST *restrict o, const float *restrict acc, int nin, size_t n) { \
    (void)nin;                                                                \
    STEPPED(n, o[i] = FROM_F32(POST(float, float, acc[i], nin)));             \
  }                                                                           \
  static void NAME(void *out, const void *const *in, int nin, size_t n) {     \
    float acc[BLOCK];                                                         \
    ST *o = out;                                                              \
    for (size_t b = 0; b < n; b += BLOCK) {                                   \
      size_t len = n - b < BLOCK ? n - b : BLOCK;                             \
      NAME##_load(acc, (const ST *)in[0] + b, len);                           \
      for (int r = 1; r < nin; r++) NAME##_fold(acc, (const ST *)in[r] + b, len); \
      NAME##_store(o + b, acc, nin, len);                                     \
    }                                                                         \
  }

#define DEFINE_WIDENED_OPS(TN, ST, TO_F32, FROM_F32)                          \
  DEFINE_WIDENED(reduce_##TN##_sum, ST, TO_F32, FROM_F32, OP_SUM, POST_NONE)  \
  DEFINE_WIDENED(reduce_##TN##_min, ST, TO_F32, FROM_F32, OP_MIN, POST_NONE)  \
  DEFINE_WIDENED(reduce_##TN##_max, ST, TO_F32, FROM_F32, OP_MAX, POST_NONE)  \
  DEFINE_WIDENED(reduce_##TN##_prod, ST, TO_F32, FROM_F32, OP_PROD, POST_NONE) \
  DEFINE_WIDENED(reduce_##TN##_avg, ST, TO_F32, FROM_F32, OP_SUM, POST_AVG)

DEFINE_WIDENED_OPS(bf16, uint16_t, bf16_to_f32, f32_to_bf16)
DEFINE_WIDENED_OPS(f16, uint16_t, f16_to_f32, f32_to_f16)
DEFINE_WIDENED_OPS(e4m3, uint8_t, e4m3_to_f32, f32_to_e4m3)
DEFINE_WIDENED_OPS(e5m2, uint8_t, e5m2_to_f32, f32_to_e5m2)

typedef void (*reduce_fn)(void *out, const void *const *in, int nin, size_t n);

#define OPS_OF(TN) \
  { reduce_##TN##_sum, reduce_##TN##_min, reduce_##TN##_max, reduce_##TN##_prod, reduce_##TN##_avg }

static reduce_fn pick(symm_dtype_t dtype, symm_redop_t op) {
  /* In the order of symm_dtype_t, and of symm_redop_t within a row. */
  static const reduce_fn table[SYMM_DTYPE_COUNT_][SYMM_REDUCE_COUNT_] = {
      OPS_OF(f16), OPS_OF(bf16), OPS_OF(f32), OPS_OF(f64), OPS_OF(i8),   OPS_OF(i16),
      OPS_OF(i32), OPS_OF(i64),  OPS_OF(u8),  OPS_OF(u16), OPS_OF(u32),  OPS_OF(u64),
      OPS_OF(e4m3), OPS_OF(e5m2)};
  return (unsigned)dtype >= SYMM_DTYPE_COUNT_ || (unsigned)op >= SYMM_REDUCE_COUNT_
             ? NULL
             : table[dtype][op];
}

void cpu_reduce(void *out, const void *const *in, int nin, size_t count, symm_dtype_t dtype,
                 symm_redop_t op) {
  if (!count) return;
  if (nin == 1) {
    /* One input: no arithmetic (avg divides by 1); f16, bf16 and FP8 pass
     * through unchanged, NaN payloads included. */
    cpu_memcpy(out, in[0], count * symm_dtype_size(dtype));
    return;
  }
  pick(dtype, op)(out, in, nin, count);
}
