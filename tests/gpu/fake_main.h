/* What the test programs over the fake GPU libraries share (fake_main.c):
 * the checks of a rank's body, which return 1 from it with the rank and
 * the detailed error, and the program's main. */
#ifndef SYMM_FAKE_MAIN_H
#define SYMM_FAKE_MAIN_H

#include <stddef.h>
#include <stdio.h>

#include "symmem.h"

#define RCHECK(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "rank %d: FAIL %s:%d: %s: ", rank, __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n");                                                          \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define ROK(call)                                                                     \
  do {                                                                                \
    symm_result_t r_ = (call);                                                        \
    RCHECK(r_ == SYMM_SUCCESS, "%s (%s)", symm_strerror(r_), symm_last_error());      \
  } while (0)
#define RRES(call, want)                                                              \
  do {                                                                                \
    symm_result_t r_ = (call);                                                        \
    RCHECK(r_ == (want), "got %s, want %s (%s)", symm_strerror(r_), symm_strerror(want), \
           symm_last_error());                                                        \
  } while (0)

typedef struct fake_test {
  const char *name;
  int (*fn)(void);
} fake_test_t;

/* `PROGRAM NAME` runs test NAME of tests[n], `PROGRAM --list` lists them.
 * In a build without embedded kernels it first points SYMM_COLL_KERNELS at
 * a kernel file of its own, which the fake driver loads like any image. */
int fake_tests_main(int argc, char **argv, const fake_test_t *tests, size_t n);

#endif
