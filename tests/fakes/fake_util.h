/* What the tests over the fake CUDA driver share: its hooks, a data
 * pattern, and the main() that runs one listed test by name.  Their checks
 * are the harness's ASSERT_* (harness.h). */
#ifndef SYMM_FAKE_UTIL_H
#define SYMM_FAKE_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "symmem.h"

/* An exported hook of the copy of the fake driver the library loaded;
 * NULL when it is not loaded.  (The library stays loaded: the driver
 * table holds it for the process lifetime.) */
static inline void *fake_sym(const char *name) {
  void *lib = dlopen(getenv("SYMM_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  void *fn = lib ? dlsym(lib, name) : NULL;
  if (lib) dlclose(lib);
  return fn;
}

/* The fake's counters (every member -1 when the fake is not loaded). */
static inline fakecuda_stats_t fake_stats(void) {
  fakecuda_stats_t s;
  memset(&s, 0xff, sizeof s);
  void (*fn)(fakecuda_stats_t *) = NULL;
  *(void **)&fn = fake_sym("fakecuda_stats");
  if (fn) fn(&s);
  return s;
}

/* What rank `writer` puts at element i. */
static inline uint64_t pattern(int writer, size_t i) {
  return ((uint64_t)(writer + 1) << 40) ^ (uint64_t)i * 2654435761u;
}

/* `backend` is unavailable with `needle` in its reason, and forcing it
 * (SYMM_BACKEND) fails init with SYMM_ERR_BACKEND_UNAVAILABLE and the same
 * reason (fake_main.c).  0, or the test fails. */
int fake_probe_refused(symm_backend_t backend, const char *needle);

typedef struct fake_test {
  const char *name;
  int (*fn)(void);
} fake_test_t;

/* `PROGRAM NAME` runs test NAME of tests[0..n), `PROGRAM --list` lists
 * them (fake_main.c).  In a build without embedded kernels it first points
 * SYMM_COLL_KERNELS at a kernel file of its own, which the fake driver
 * loads like any image. */
int fake_tests_main(int argc, char **argv, const fake_test_t *tests, size_t n);

#endif /* SYMM_FAKE_UTIL_H */
