/* A float's bits and back, for the half-precision conversions of the
 * tests and of the fake libraries (which link no harness, hence static
 * functions).  Through a union (C11 reads the stored bytes as the other
 * member), not the library's memcpy: the tests' reference arithmetic
 * keeps no code in common with what it checks. */
#ifndef SYMM_TEST_FLOAT_BITS_H
#define SYMM_TEST_FLOAT_BITS_H

#include <stdint.h>

typedef union {
  float f;
  uint32_t u;
} f32_bits_t;

static inline float f32_of_bits(uint32_t u) { return (f32_bits_t){.u = u}.f; }
static inline uint32_t bits_of(float f) { return (f32_bits_t){.f = f}.u; }

#endif
