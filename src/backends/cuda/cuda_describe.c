/*
 * What symmem-info prints for the cuda backend: the driver, and per device
 * whether CUDA IPC is possible (unified addressing) and whether one export
 * works for real, then how allocations are rounded.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>

#include "backends/cuda/cuda.h"

/* One IPC export tried in the device's primary context. */
static void cuda_describe_export(FILE *out, const symm_cu_driver_t *drv, int i, ncu_device dev) {
  ncu_context ctx = NULL, saved = NULL;
  if (drv->cuDevicePrimaryCtxRetain(&ctx, dev) != NCU_SUCCESS) {
    fprintf(out, "device %d ipc export: unknown (no context)\n", i);
    return;
  }
  drv->cuCtxGetCurrent(&saved);
  drv->cuCtxSetCurrent(ctx);
  char why[384] = "";
  bool works = cuda_ipc_export_works(drv, why, sizeof why);
  fprintf(out, "device %d ipc export: %s%s\n", i, works ? "works" : "fails: ", works ? "" : why);
  drv->cuCtxSetCurrent(saved);
  drv->cuDevicePrimaryCtxRelease(dev);
}

void cuda_describe(FILE *out) {
  int n = 0;
  const symm_cu_driver_t *drv = symm_gpu_describe_driver(out, &n);
  if (!drv) return;
  for (int i = 0; i < n; i++) {
    ncu_device dev;
    char name[128] = "?", bus[32] = "?";
    int ua = 0;
    if (drv->cuDeviceGet(&dev, i) != NCU_SUCCESS) {
      fprintf(out, "device %d: cuDeviceGet failed\n", i);
      continue;
    }
    drv->cuDeviceGetName(name, (int)sizeof name, dev);
    drv->cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
    drv->cuDeviceGetAttribute(&ua, NCU_DEV_ATTR_UNIFIED_ADDRESSING, dev);
    fprintf(out, "device %d: %s, PCI %s, cuda ipc %s\n", i, name, bus,
            ua ? "supported" : "unsupported (no unified addressing)");
    if (ua) cuda_describe_export(out, drv, i, dev);
  }
  fprintf(out, "memory: cuMemAlloc, pad and data in one allocation rounded to %zu KiB; "
          "handles: CUDA IPC in the exchange blob (no fd passing)\n", CUDA_IPC_ROUND >> 10);
}
