/* Placeholder until the native backend lands (replaced by native_*.c). */
#include <stdio.h>

#include "core/internal.h"

static symm_result_t native_probe(char *why, size_t why_len) {
  if (why && why_len) snprintf(why, why_len, "native backend not built yet");
  return SYMM_ERR_UNSUPPORTED;
}

const symm_backend_ops_t symm_native_ops = {
    .version = 1, .name = "native", .id = SYMM_BACKEND_NATIVE, .probe = native_probe};
