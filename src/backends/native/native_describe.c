/*
 * What symmem-info prints for the native backend: the driver, every device
 * (name, PCI bus id, memory, support flags, granularity), the peer-access
 * matrix and per-pair link attributes.  Multicast itself is never touched
 * here: only the device attribute is read (symmem-info reports the guard).
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/native/native.h"

#define NATIVE_DESCRIBE_MAX_DEVICES 64

static const char *native_yes(int v) { return v > 0 ? "yes" : "no"; }

static void native_print_bytes(FILE *out, size_t bytes) {
  const size_t kib = 1024, mib = kib * 1024, gib = mib * 1024;
  if (bytes >= gib && bytes % gib == 0)
    fprintf(out, "%zu GiB", bytes / gib);
  else if (bytes >= gib)
    fprintf(out, "%.1f GiB", (double)bytes / (double)gib);
  else if (bytes >= mib && bytes % mib == 0)
    fprintf(out, "%zu MiB", bytes / mib);
  else if (bytes >= kib && bytes % kib == 0)
    fprintf(out, "%zu KiB", bytes / kib);
  else
    fprintf(out, "%zu bytes", bytes);
}

static int native_attr_of(const symm_cu_driver_t *drv, int attr, ncu_device dev) {
  int v = 0;
  return drv->cuDeviceGetAttribute(&v, attr, dev) == NCU_SUCCESS ? v : -1;
}

/* Granularity and the fabric export test need the device's context. */
static void native_describe_granularity(FILE *out, const symm_cu_driver_t *drv, int i,
                                        ncu_device dev, int fabric_attr) {
  ncu_context ctx = NULL, saved = NULL;
  if (drv->cuDevicePrimaryCtxRetain(&ctx, dev) != NCU_SUCCESS) {
    fprintf(out, "device %d granularity: unknown (no context)\n", i);
    return;
  }
  drv->cuCtxGetCurrent(&saved);
  drv->cuCtxSetCurrent(ctx);
  ncu_alloc_prop prop = native_alloc_prop(i, NCU_HANDLE_POSIX_FD);
  size_t min = 0, rec = 0;
  if (drv->cuMemGetAllocationGranularity(&min, &prop, NCU_GRANULARITY_MINIMUM) == NCU_SUCCESS &&
      drv->cuMemGetAllocationGranularity(&rec, &prop, NCU_GRANULARITY_RECOMMENDED) ==
          NCU_SUCCESS) {
    fprintf(out, "device %d granularity: minimum ", i);
    native_print_bytes(out, min);
    fprintf(out, ", recommended ");
    native_print_bytes(out, rec);
    fprintf(out, "\n");
  }
  if (fabric_attr > 0) {
    /* Devices report fabric support even where exporting needs an IMEX
     * channel that is absent, so try one small export for real. */
    ncu_alloc_prop fprop = native_alloc_prop(i, NCU_HANDLE_FABRIC | NCU_HANDLE_POSIX_FD);
    ncu_mem_handle h;
    size_t g = rec ? rec : (size_t)2 << 20;
    ncu_result cu = drv->cuMemCreate(&h, g, &fprop, 0);
    ncu_fabric_handle fh;
    if (cu == NCU_SUCCESS) {
      cu = drv->cuMemExportToShareableHandle(&fh, h, NCU_HANDLE_FABRIC, 0);
      drv->cuMemRelease(h);
    }
    fprintf(out, "device %d fabric export: %s%s\n", i, cu == NCU_SUCCESS ? "works" : "fails: ",
            cu == NCU_SUCCESS ? "" : symm_cu_error(cu));
  }
  drv->cuCtxSetCurrent(saved);
  drv->cuDevicePrimaryCtxRelease(dev);
}

static void native_describe_device(FILE *out, const symm_cu_driver_t *drv, int i) {
  ncu_device dev;
  if (drv->cuDeviceGet(&dev, i) != NCU_SUCCESS) {
    fprintf(out, "device %d: cuDeviceGet failed\n", i);
    return;
  }
  char name[128] = "?", bus[32] = "?";
  size_t mem = 0;
  drv->cuDeviceGetName(name, (int)sizeof name, dev);
  drv->cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
  drv->cuDeviceTotalMem(&mem, dev);
  fprintf(out, "device %d: %s, PCI %s, ", i, name, bus);
  native_print_bytes(out, mem);
  fprintf(out, ", sm_%d%d, %d SMs\n", native_attr_of(drv, NCU_DEV_ATTR_CC_MAJOR, dev),
          native_attr_of(drv, NCU_DEV_ATTR_CC_MINOR, dev),
          native_attr_of(drv, NCU_DEV_ATTR_MULTIPROCESSOR_COUNT, dev));
  int fabric = native_attr_of(drv, NCU_DEV_ATTR_FABRIC_SUPPORTED, dev);
  int multicast = native_attr_of(drv, NCU_DEV_ATTR_MULTICAST_SUPPORTED, dev);
  fprintf(out,
          "device %d support: vmm %s, posix-fd %s, fabric %s, multicast %s, "
          "gpudirect-rdma-with-vmm %s\n",
          i, native_yes(native_attr_of(drv, NCU_DEV_ATTR_VMM_SUPPORTED, dev)),
          native_yes(native_attr_of(drv, NCU_DEV_ATTR_POSIX_FD_SUPPORTED, dev)),
          native_yes(fabric), native_yes(multicast),
          native_yes(native_attr_of(drv, NCU_DEV_ATTR_GDR_WITH_VMM_SUPPORTED, dev)));
  native_describe_granularity(out, drv, i, dev, fabric);
}

/* Matrix of cuDeviceCanAccessPeer, then link attributes per ordered pair. */
static void native_describe_peers(FILE *out, const symm_cu_driver_t *drv, int n) {
  ncu_device dev[NATIVE_DESCRIBE_MAX_DEVICES];
  for (int i = 0; i < n; i++)
    if (drv->cuDeviceGet(&dev[i], i) != NCU_SUCCESS) return;
  fprintf(out, "peer access (row reads/writes column):\n     ");
  for (int j = 0; j < n; j++) fprintf(out, " %3d", j);
  fprintf(out, "\n");
  for (int i = 0; i < n; i++) {
    fprintf(out, "  %3d", i);
    for (int j = 0; j < n; j++) {
      int can = 0;
      if (i == j)
        fprintf(out, "   -");
      else if (drv->cuDeviceCanAccessPeer(&can, dev[i], dev[j]) == NCU_SUCCESS)
        fprintf(out, "   %c", can ? 'y' : 'n');
      else
        fprintf(out, "   ?");
    }
    fprintf(out, "\n");
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      int rank = -1, access = -1, atomics = -1;
      drv->cuDeviceGetP2PAttribute(&rank, NCU_P2P_PERFORMANCE_RANK, dev[i], dev[j]);
      drv->cuDeviceGetP2PAttribute(&access, NCU_P2P_ACCESS_SUPPORTED, dev[i], dev[j]);
      drv->cuDeviceGetP2PAttribute(&atomics, NCU_P2P_NATIVE_ATOMIC_SUPPORTED, dev[i], dev[j]);
      /* The driver does not name the link; native atomics across devices
       * are an NVLink (or C2C) property, PCIe peer paths lack them. */
      const char *kind = access <= 0 ? "none" : atomics > 0 ? "nvlink-class" : "pcie-class";
      fprintf(out, "link %d->%d: access %s, performance rank %d, native atomics %s (%s)\n", i, j,
              native_yes(access), rank, native_yes(atomics), kind);
    }
}

void native_describe(FILE *out) {
  int n = 0;
  const symm_cu_driver_t *drv = symm_gpu_describe_driver(out, &n);
  if (!drv) return;
  if (n > NATIVE_DESCRIBE_MAX_DEVICES) n = NATIVE_DESCRIBE_MAX_DEVICES;
  for (int i = 0; i < n; i++) native_describe_device(out, drv, i);
  if (n > 1) native_describe_peers(out, drv, n);
  fprintf(out, "handles: SYMM_NATIVE_HANDLE=%s\n", symm_settings()->SYMM_NATIVE_HANDLE.name);
}
