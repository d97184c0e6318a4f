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

static void elem_store(void *buf, symm_dtype_t dt, size_t i, double v) {
  switch (dt) {
  case SYMM_DTYPE_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
  case SYMM_DTYPE_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  case SYMM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
  case SYMM_DTYPE_F64: ((double *)buf)[i] = v; break;
  case SYMM_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case SYMM_DTYPE_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case SYMM_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case SYMM_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case SYMM_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case SYMM_DTYPE_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
  case SYMM_DTYPE_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case SYMM_DTYPE_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
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
  default: return NAN;
  }
}

static bool dtype_unsigned(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_U8 || dt == SYMM_DTYPE_U16 || dt == SYMM_DTYPE_U32 ||
         dt == SYMM_DTYPE_U64;
}

/* Input of rank r at index i.  Small integers, so that every dtype holds
 * them and every reduction order gives the same exact result: reductions
 * use [-8, 8] (sums of up to 32 ranks stay exact even in bf16); data
 * movement uses 97 values, so a value in the wrong place rarely matches. */
static double input_value(const bench_t *b, int r, size_t i) {
  if (coll_reduces(b->opt.coll)) return (double)(((i % 17) * 7 + (size_t)r * 13) % 17) - 8.0;
  double v = (double)(((i % 97) * 131 + (size_t)r * 31 + 7) % 97);
  return dtype_unsigned(b->opt.dtype) ? v : v - 48.0;
}

static double reduce_over_ranks(const bench_t *b, size_t i) {
  double acc = input_value(b, 0, i);
  for (int r = 1; r < b->size; r++) {
    double v = input_value(b, r, i);
    switch (b->opt.op) {
    case SYMM_REDUCE_MIN: acc = v < acc ? v : acc; break;
    case SYMM_REDUCE_MAX: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  return acc;
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
  if (b->rank == 0)
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
