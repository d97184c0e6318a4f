/* A float's bits and back (memcpy: no aliasing through pointers), for the
 * half-precision conversions of the tests and of the fake libraries
 * (which link no harness, hence static functions). */
#ifndef SYMM_TEST_FLOAT_BITS_H
#define SYMM_TEST_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>

static inline float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

#endif
