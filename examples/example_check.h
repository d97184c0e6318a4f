/* The examples' one error check: a symm_ call that fails prints the code
 * and symm_last_error() and ends the program. */
#ifndef EXAMPLE_CHECK_H
#define EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "symmem.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    symm_result_t r_ = (call);                                                 \
    if (r_ != SYMM_SUCCESS) {                                                  \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, symm_strerror(r_),        \
              symm_last_error());                                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#endif /* EXAMPLE_CHECK_H */
