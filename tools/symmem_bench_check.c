/* symmem-bench's check: deterministic inputs per rank, the reference of
 * every collective computed here, and the comparison in the dtype. */
#include <math.h>
#include <string.h>

#include "symmem_bench.h"

static float bits_to_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint32_t f32_to_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN */
  x += 0x7fffu + ((x >> 16) & 1u);  /* round to nearest even */
  return (uint16_t)(x >> 16);
}

/* IEEE binary16, round to nearest even, subnormals included. */
static uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h, rest, half;
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    unsigned shift = (unsigned)(14 - e);
    h = man >> shift;
    rest = man & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    h = ((uint32_t)e << 10) | (man >> 13);
    rest = man & 0x1fffu;
    half = 0x1000u;
  }
  if (rest > half || (rest == half && (h & 1u))) h++; /* a carry rounds into the exponent */
  return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp) return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
  float v = ldexpf((float)man, -24);
  return sign ? -v : v;
}

/* FP8 by table: every code's value, and a value's code the nearest one
 * (ties to the even code), saturating beyond the largest finite.  Only
 * the small integers of input_value and their sums pass through here. */
typedef struct {
  int mbits, bias, max_finite;
} fp8_t;
static const fp8_t fp8_e4m3 = {3, 7, 0x7e}, fp8_e5m2 = {2, 15, 0x7b};

static double fp8_mag(const fp8_t *f, int code) {
  int e = code >> f->mbits, m = code & ((1 << f->mbits) - 1);
  return e ? ldexp((1 << f->mbits) + m, e - f->bias - f->mbits) : ldexp(m, 1 - f->bias - f->mbits);
}

static uint8_t fp8_from(const fp8_t *f, float v) {
  double a = fabs((double)v);
  int lo = 0, hi = f->max_finite; /* the codes' magnitudes grow with the code */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (fp8_mag(f, mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  int code = lo;
  if (code < f->max_finite) {
    double below = a - fp8_mag(f, code), above = fp8_mag(f, code + 1) - a;
    if (above < below || (above == below && (code & 1))) code++;
  }
  return (uint8_t)((signbit(v) ? 0x80 : 0) | code);
}

static float fp8_to(const fp8_t *f, uint8_t b) {
  double v = (b & 0x7f) > f->max_finite ? NAN : fp8_mag(f, b & 0x7f);
  return (float)(b & 0x80 ? -v : v);
}

static void elem_store(void *buf, symm_dtype_t dt, size_t i, double v) {
  int64_t x = isfinite(v) ? (int64_t)v : 0; /* integers wrap to their width below */
  switch (dt) {
  case SYMM_DTYPE_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
  case SYMM_DTYPE_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  case SYMM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
  case SYMM_DTYPE_F64: ((double *)buf)[i] = v; break;
  case SYMM_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)x; break;
  case SYMM_DTYPE_I16: ((int16_t *)buf)[i] = (int16_t)x; break;
  case SYMM_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)x; break;
  case SYMM_DTYPE_I64: ((int64_t *)buf)[i] = x; break;
  case SYMM_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)x; break;
  case SYMM_DTYPE_U16: ((uint16_t *)buf)[i] = (uint16_t)x; break;
  case SYMM_DTYPE_U32: ((uint32_t *)buf)[i] = (uint32_t)x; break;
  case SYMM_DTYPE_U64: ((uint64_t *)buf)[i] = (uint64_t)x; break;
  case SYMM_DTYPE_F8E4M3: ((uint8_t *)buf)[i] = fp8_from(&fp8_e4m3, (float)v); break;
  case SYMM_DTYPE_F8E5M2: ((uint8_t *)buf)[i] = fp8_from(&fp8_e5m2, (float)v); break;
  default: break;
  }
}

static double elem_load(const void *buf, symm_dtype_t dt, size_t i) {
  switch (dt) {
  case SYMM_DTYPE_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
  case SYMM_DTYPE_BF16: return bits_to_f32((uint32_t)((const uint16_t *)buf)[i] << 16);
  case SYMM_DTYPE_F32: return ((const float *)buf)[i];
  case SYMM_DTYPE_F64: return ((const double *)buf)[i];
  case SYMM_DTYPE_I8: return ((const int8_t *)buf)[i];
  case SYMM_DTYPE_I16: return ((const int16_t *)buf)[i];
  case SYMM_DTYPE_I32: return ((const int32_t *)buf)[i];
  case SYMM_DTYPE_I64: return (double)((const int64_t *)buf)[i];
  case SYMM_DTYPE_U8: return ((const uint8_t *)buf)[i];
  case SYMM_DTYPE_U16: return ((const uint16_t *)buf)[i];
  case SYMM_DTYPE_U32: return ((const uint32_t *)buf)[i];
  case SYMM_DTYPE_U64: return (double)((const uint64_t *)buf)[i];
  case SYMM_DTYPE_F8E4M3: return fp8_to(&fp8_e4m3, ((const uint8_t *)buf)[i]);
  case SYMM_DTYPE_F8E5M2: return fp8_to(&fp8_e5m2, ((const uint8_t *)buf)[i]);
  default: return NAN;
  }
}

static bool dtype_unsigned(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_U8 || dt == SYMM_DTYPE_U16 || dt == SYMM_DTYPE_U32 ||
         dt == SYMM_DTYPE_U64;
}

static bool dtype_integer(symm_dtype_t dt) {
  return dtype_unsigned(dt) || dt == SYMM_DTYPE_I8 || dt == SYMM_DTYPE_I16 ||
         dt == SYMM_DTYPE_I32 || dt == SYMM_DTYPE_I64;
}

/* Input of rank r at index i.  Small integers, so that every dtype holds
 * them and every reduction order gives the same exact result: reductions
 * use [-8, 8] ([0, 8] unsigned; sums of up to 32 ranks stay exact even in
 * bf16, and integers wrap alike), products ±1 with one rank's 2 (the
 * product stays ±1 or ±2 at any size); data movement uses 97 values, so a
 * value in the wrong place rarely matches. */
static double input_value(const bench_t *b, int r, size_t i) {
  const bool u = dtype_unsigned(b->opt.dtype);
  if (coll_reduces(b->opt.coll) && b->opt.op == SYMM_REDUCE_PROD) {
    if ((size_t)r == i % (size_t)b->size) return 2.0;
    return u || ((i + (size_t)r) % 3) ? 1.0 : -1.0;
  }
  if (coll_reduces(b->opt.coll)) {
    double v = (double)(((i % 17) * 7 + (size_t)r * 13) % 17);
    return u ? v / 2 - (double)((int)v % 2) / 2 : v - 8.0;
  }
  double v = (double)(((i % 97) * 131 + (size_t)r * 31 + 7) % 97);
  return u ? v : v - 48.0;
}

/* The reduction of index i over the ranks, as the library computes it:
 * the sum is exact (small integers), integers then wrap to their width,
 * and avg divides that sum by the ranks (integers truncating). */
static double reduce_over_ranks(const bench_t *b, size_t i) {
  symm_dtype_t dt = b->opt.dtype;
  double acc = input_value(b, 0, i);
  for (int r = 1; r < b->size; r++) {
    double v = input_value(b, r, i);
    switch (b->opt.op) {
    case SYMM_REDUCE_MIN: acc = v < acc ? v : acc; break;
    case SYMM_REDUCE_MAX: acc = v > acc ? v : acc; break;
    case SYMM_REDUCE_PROD: acc *= v; break;
    default: acc += v; break;
    }
  }
  if (b->opt.op != SYMM_REDUCE_AVG) return acc;
  if (!dtype_integer(dt)) return acc / b->size;
  unsigned char wrapped[8];
  elem_store(wrapped, dt, 0, acc);
  return trunc(elem_load(wrapped, dt, 0) / b->size);
}

/* What this rank's receive buffer must hold at index k. */
static double expected_value(const bench_t *b, const layout_t *l, size_t k) {
  size_t per = l->count;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE: return reduce_over_ranks(b, k);
  case BENCH_REDUCE_SCATTER: return reduce_over_ranks(b, (size_t)b->rank * per + k);
  case BENCH_ALL_GATHER: return input_value(b, (int)(k / per), k % per);
  case BENCH_BROADCAST: return input_value(b, b->opt.root, k);
  case BENCH_ALL_TO_ALL:
    return input_value(b, (int)(k / per), (size_t)b->rank * per + k % per);
  case BENCH_ALL_TO_ALL_V: {
    /* Every rank sends the same split: rank q's range for this rank starts
     * where this rank's own range for itself does. */
    size_t mine = l->recv_counts[0];
    return input_value(b, (int)(k / mine), l->send_displs[b->rank] + k % mine);
  }
  default: return NAN;
  }
}

/* Fills the buffers with known data, runs one call (`call`, the timed
 * calls' way), and counts the received values that differ from the
 * reference.  Barriers keep a rank from rewriting its buffers while peers
 * may still read them. */
int64_t check_once(bench_t *b, const layout_t *l, void (*call)(bench_t *, const layout_t *)) {
  symm_dtype_t dt = b->opt.dtype;
  size_t es = b->esize;
  bench_sync(b);
  BENCH_CHECK(symm_comm_barrier(b->comm));
  mem_poison(b, l->recv, l->recv_elems * es);
  if (b->opt.coll != BENCH_BROADCAST || b->rank == b->opt.root) {
    for (size_t i = 0; i < l->send_elems; i++)
      elem_store(b->host_data, dt, i, input_value(b, b->rank, i));
    mem_put(b, l->send, b->host_data, l->send_elems * es);
  }
  BENCH_CHECK(symm_comm_barrier(b->comm));
  call(b, l);
  bench_sync(b);
  mem_get(b, b->host_result, l->recv, l->recv_elems * es);
  if (b->world_rank == 0)
    for (size_t i = 0; i < l->recv_elems && i < (size_t)b->opt.inject; i++)
      elem_store(b->host_result, dt, i, elem_load(b->host_result, dt, i) + 1);
  int64_t wrong = 0;
  unsigned char want[8];
  for (size_t k = 0; k < l->recv_elems; k++) {
    /* The reference goes through the dtype too, so the comparison is exact. */
    elem_store(want, dt, 0, expected_value(b, l, k));
    wrong += !(elem_load(b->host_result, dt, k) == elem_load(want, dt, 0));
  }
  return wrong;
}
