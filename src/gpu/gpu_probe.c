/* What every GPU backend's probe and describe start with (symm_gpu.h): the
 * driver, and the devices it shows, without a context. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>

#include "gpu/gpu.h"

const symm_cu_driver_t *symm_gpu_probe(char *why, size_t why_len, int *count) {
  *count = 0;
  const symm_cu_driver_t *drv = symm_cu_driver_init(why, why_len);
  if (!drv) return NULL;
  ncu_result res = drv->cuDeviceGetCount(count);
  if (res == NCU_SUCCESS && *count > 0) return drv;
  snprintf(why, why_len, "no CUDA device visible (%s)",
           res != NCU_SUCCESS ? symm_cu_error(res) : "device count 0");
  *count = 0;
  return NULL;
}

int symm_gpu_attr(const symm_cu_driver_t *drv, int attr, ncu_device dev) {
  int v = 0;
  return drv->cuDeviceGetAttribute(&v, attr, dev) == NCU_SUCCESS ? v : 0;
}

const symm_cu_driver_t *symm_gpu_describe_driver(FILE *out, int *count) {
  char why[512] = "";
  *count = 0;
  const symm_cu_driver_t *drv = symm_cu_driver_init(why, sizeof why);
  if (!drv) return NULL;
  fprintf(out, "driver: %s, CUDA driver API %d.%d\n", symm_settings()->SYMM_CUDA_LIB,
          drv->driver_version / 1000, drv->driver_version % 1000 / 10);
  ncu_result cu = drv->cuDeviceGetCount(count);
  if (cu != NCU_SUCCESS) {
    fprintf(out, "devices: cuDeviceGetCount failed: %s\n", symm_cu_error(cu));
    *count = 0;
    return NULL;
  }
  fprintf(out, "devices: %d\n", *count);
  return drv;
}
