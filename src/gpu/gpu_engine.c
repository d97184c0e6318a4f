/*
 * The GPU engine's lifecycle and its table (symm_engine.h): init (the
 * driver, the device, its primary context, a private stream, the kernels,
 * and what this rank publishes about its device), startup (every rank's
 * device: the shared-GPU check, peer ordinals and access, the kernels and
 * LL128 agreed), fini.
 */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"

/* ------------------------------------------------------------------ blob */

/*
 * What a rank publishes at init: its device, the kernels it loaded, and
 * the PCI bus ids of the devices its own reaches with native peer atomics
 * (`atomic_peers` of them follow the header), from which every rank works
 * out the same all-pairs LL128 answer without another exchange.  The host
 * is the hostname's hash: several ranks on one GPU are only a mistake on
 * one host, and a pair of ranks on other hosts than this one is compared
 * too, so that every rank reports the same pair.
 */
typedef struct gpu_blob {
  int32_t ordinal;
  uint32_t atomic_peers;
  uint64_t kernels;
  uint64_t host;
  char bus_id[GPU_BUS_ID_BYTES];
  uint8_t uuid[16];
} gpu_blob_t;

static uint64_t gpu_host_hash(void) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return symm_hash64(host, strlen(host), 0x6e6174697665ull);
}

/* dev's PCI bus id, cut to GPU_BUS_ID_BYTES - 1 bytes (a driver may fill
 * the buffer without a NUL). */
static bool gpu_bus_id(const symm_cu_driver_t *drv, ncu_device dev, char *id) {
  memset(id, 0, GPU_BUS_ID_BYTES);
  bool ok = drv->cuDeviceGetPCIBusId(id, GPU_BUS_ID_BYTES, dev) == NCU_SUCCESS;
  id[GPU_BUS_ID_BYTES - 1] = 0;
  return ok;
}

/* LL128 needs a 128-byte store to reach the peer in one piece: true over
 * NVLink and within one GPU, not over PCIe, where NCCL turns it off too.
 * Native peer atomics are what NVLink-class links report: the devices of
 * this process that ours reaches with them, by bus id. */
static symm_result_t gpu_publish(symm_gpu_t *g, symm_blob_t *blob) {
  int count = 0;
  if (g->drv->cuDeviceGetCount(&count) != NCU_SUCCESS || count < 0) count = 0;
  gpu_blob_t *b = calloc(1, sizeof *b + (size_t)count * GPU_BUS_ID_BYTES);
  if (!b) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", g->name);
  char *list = (char *)(b + 1);
  for (int i = 0; i < count; i++) {
    ncu_device d;
    int atomics = 0;
    if (g->drv->cuDeviceGet(&d, i) != NCU_SUCCESS || d == g->dev) continue;
    if (g->drv->cuDeviceGetP2PAttribute(&atomics, NCU_P2P_NATIVE_ATOMIC_SUPPORTED, g->dev, d) !=
            NCU_SUCCESS || !atomics)
      continue;
    if (gpu_bus_id(g->drv, d, list + (size_t)b->atomic_peers * GPU_BUS_ID_BYTES))
      b->atomic_peers++;
  }
  b->ordinal = g->ordinal;
  b->kernels = g->kernels;
  b->host = gpu_host_hash();
  if (!gpu_bus_id(g->drv, g->dev, b->bus_id))
    snprintf(b->bus_id, sizeof b->bus_id, "ordinal-%d", g->ordinal);
  ncu_uuid uuid;
  memset(&uuid, 0, sizeof uuid);
  /* Without a UUID the PCI bus id names the GPU on this host (all-zero
   * UUIDs would make every pair of ranks look like they share one). */
  if (g->drv->cuDeviceGetUuid(&uuid, g->dev) == NCU_SUCCESS)
    memcpy(b->uuid, uuid.bytes, sizeof b->uuid);
  else
    memcpy(b->uuid, b->bus_id, sizeof b->uuid);
  blob->data = b;
  blob->len = sizeof *b + (size_t)b->atomic_peers * GPU_BUS_ID_BYTES;
  return SYMM_SUCCESS;
}

/* Rank r's blob, checked: its header, NULL when malformed (recorded). */
static const gpu_blob_t *gpu_blob_of(const symm_gpu_t *g, const symm_blob_t *all, int r) {
  const gpu_blob_t *b = all[r].data;
  if (!b || all[r].len < sizeof *b ||
      all[r].len != sizeof *b + (size_t)b->atomic_peers * GPU_BUS_ID_BYTES) {
    symm_error(SYMM_ERR_PROTOCOL, "%s: rank %d published a GPU description of %zu bytes",
               g->name, r, all[r].len);
    return NULL;
  }
  return b;
}

/* ------------------------------------------------------------------- init */

/* Picks the ordinal for this rank: the one the configuration or
 * SYMM_DEVICE asks for, else the local rank.  An ordinal from the local
 * rank wraps around the visible devices: a launcher that shows each process
 * only its own GPU (CUDA_VISIBLE_DEVICES per rank, Slurm --gpus-per-task)
 * leaves one device per process, and ranks that really share a GPU are
 * refused later by its UUID (gpu_check_shared).  An explicit ordinal past
 * the visible devices wraps only with SYMM_ALLOW_SHARED_DEVICE. */
static symm_result_t gpu_pick_device(symm_comm_t *comm, symm_gpu_t *g) {
  int count = 0;
  ncu_result cu = g->drv->cuDeviceGetCount(&count);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuDeviceGetCount");
  if (count < 1) return symm_error(SYMM_ERR_UNSUPPORTED, "%s: no CUDA device is visible", g->name);
  const int asked = symm_comm_requested_device(comm), local = symm_comm_local_rank(comm);
  int want = asked >= 0 ? asked : (local >= 0 ? local : 0);
  if (want >= count && asked < 0) {
    SYMM_INFO(BACKEND, "%s: rank %d: local rank %d, %d GPU(s) visible: GPU %d", g->name, g->rank,
              want, count, want % count);
    want %= count;
  }
  if (want >= count) {
    if (!symm_settings()->SYMM_ALLOW_SHARED_DEVICE) {
      const char *vis = getenv("CUDA_VISIBLE_DEVICES");
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "%s: rank %d asks for GPU %d (SYMM_DEVICE or the config) but only %d "
                        "CUDA device(s) are visible (CUDA_VISIBLE_DEVICES=%s); set SYMM_DEVICE to "
                        "one of them, or SYMM_ALLOW_SHARED_DEVICE=1 to let several ranks share a GPU",
                        g->name, g->rank, want, count, vis ? vis : "unset");
    }
    SYMM_INFO(BACKEND, "%s: rank %d: GPU %d not present, sharing GPU %d (%d visible)", g->name,
              g->rank, want, want % count, count);
    want %= count;
  }
  g->ordinal = want;
  cu = g->drv->cuDeviceGet(&g->dev, want);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuDeviceGet(%d)", want);
  symm_comm_set_device(comm, want);
  symm_log_set_device(want);
  return SYMM_SUCCESS;
}

static symm_result_t gpu_init(symm_comm_t *comm, symm_blob_t *blob) {
  symm_gpu_t *g = calloc(1, sizeof *g);
  if (!g) return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", symm_comm_backend_name(comm));
  symm_engine_set_state(comm, g); /* fini frees what a failed init made */
  g->name = symm_comm_backend_name(comm);
  g->rank = symm_comm_rank(comm);
  g->size = symm_comm_size(comm);
  char why[512] = "";
  g->drv = symm_cu_driver_init(why, sizeof why);
  if (!g->drv) return symm_error(SYMM_ERR_UNSUPPORTED, "%s: %s", g->name, why);
  SYMM_CHECK(gpu_pick_device(comm, g));

  ncu_result cu = g->drv->cuDevicePrimaryCtxRetain(&g->ctx, g->dev);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuDevicePrimaryCtxRetain(%d)", g->ordinal);
  g->ctx_retained = true;
  /* Left current on purpose: the application's CUDA runtime calls on this
   * thread then use the same (primary) context and device.  What was current
   * before is put back if init fails (gpu_fini). */
  g->caller_saved = g->drv->cuCtxGetCurrent(&g->caller_ctx) == NCU_SUCCESS;
  cu = g->drv->cuCtxSetCurrent(g->ctx);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuCtxSetCurrent(device %d)", g->ordinal);
  cu = g->drv->cuStreamCreate(&g->stream, NCU_STREAM_NON_BLOCKING);
  if (cu != NCU_SUCCESS) return symm_gpu_fail(cu, "cuStreamCreate");
  SYMM_CHECK(gpu_module_load(comm, g));
  return gpu_publish(g, blob);
}

/* ---------------------------------------------------------------- startup */

/* Several ranks on one GPU only when asked: otherwise it is almost always a
 * launch mistake (all ranks on GPU 0) that would silently serialise them. */
static symm_result_t gpu_check_shared(const symm_gpu_t *g, const gpu_blob_t *const *b) {
  if (symm_settings()->SYMM_ALLOW_SHARED_DEVICE) return SYMM_SUCCESS;
  for (int x = 0; x < g->size; x++)
    for (int y = x + 1; y < g->size; y++)
      if (memcmp(b[x]->uuid, b[y]->uuid, sizeof b[x]->uuid) == 0 && b[x]->host == b[y]->host)
        return symm_error(SYMM_ERR_INVALID_ARG,
                          "%s: ranks %d and %d both use GPU %s; give each rank its own GPU "
                          "(SYMM_DEVICE, CUDA_VISIBLE_DEVICES) or set SYMM_ALLOW_SHARED_DEVICE=1",
                          g->name, x, y, g->ranks[x].bus_id);
  return SYMM_SUCCESS;
}

/* Ranks that share a GPU (SYMM_ALLOW_SHARED_DEVICE, MPS) run their
 * collective kernels side by side, and a kernel's blocks spin until the
 * peers' blocks of the same call arrive: every sharing rank's grid must be
 * on the GPU at once, or blocks of one rank keep the other's off the SMs
 * until the timeout.  Grids are capped at a quarter of the SMs for each
 * rank of the most crowded GPU (SMs / (4 x ranks on it)): a 512-thread
 * block may fill an SM's registers, and with programmatic dependent launch
 * a rank's next kernel is resident beside its last (under MPS, 2 ranks on
 * an H100 timed out with 66 blocks each, and ran with 8 or 32), unless
 * SYMM_COLL_MAX_BLOCKS says otherwise.  The same cap on every rank (a grid is part of the
 * kernels' signature): the most sharing of any GPU, this GPU's SMs (the
 * ranks' GPUs are alike). */
static void gpu_fit_shared(symm_gpu_t *g, const gpu_blob_t *const *b) {
  int most = 1;
  for (int x = 0; x < g->size; x++) {
    int same = 0;
    for (int y = 0; y < g->size; y++)
      same += memcmp(b[x]->uuid, b[y]->uuid, sizeof b[x]->uuid) == 0 && b[x]->host == b[y]->host;
    if (same > most) most = same;
  }
  int sms = 0;
  if (most < 2 || g->max_blocks ||
      g->drv->cuDeviceGetAttribute(&sms, NCU_DEV_ATTR_MULTIPROCESSOR_COUNT, g->dev) !=
          NCU_SUCCESS || sms <= 0)
    return;
  const int cap = sms / (4 * most);
  g->max_blocks = (unsigned)(cap > 1 ? cap : 1);
  SYMM_INFO(COLL, "%s: up to %d ranks share a GPU: collective grids capped at %u blocks (%d SMs)",
            g->name, most, g->max_blocks, sms);
}

/* Each rank's GPU as an ordinal of this process, and whether ours reaches it. */
static symm_result_t gpu_map_peer_devices(symm_gpu_t *g, const gpu_blob_t *const *b) {
  g->peer_ordinal = malloc(sizeof(int) * (size_t)g->size);
  g->peer_access = malloc(sizeof(int) * (size_t)g->size);
  if (!g->peer_ordinal || !g->peer_access)
    return symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", g->name);
  for (int r = 0; r < g->size; r++) {
    ncu_device d;
    g->peer_ordinal[r] = -1;
    g->peer_access[r] = -1;
    if (b[r]->host != b[g->rank]->host) continue;
    if (g->drv->cuDeviceGetByPCIBusId(&d, g->ranks[r].bus_id) != NCU_SUCCESS) continue;
    g->peer_ordinal[r] = d;
    int can = 0;
    if (d == g->dev)
      can = 1;
    else if (g->drv->cuDeviceCanAccessPeer(&can, g->dev, d) != NCU_SUCCESS)
      can = -1;
    g->peer_access[r] = can;
  }
  return SYMM_SUCCESS;
}

/* Whether rank x's device reaches rank y's with native peer atomics (or is
 * the same device). */
static bool gpu_pair_nvlink(const symm_gpu_t *g, const gpu_blob_t *const *b, int x, int y) {
  if (b[x]->host != b[y]->host) return false;
  if (strcmp(g->ranks[x].bus_id, g->ranks[y].bus_id) == 0) return true;
  const char *list = (const char *)(b[x] + 1);
  for (uint32_t i = 0; i < b[x]->atomic_peers; i++)
    if (strncmp(list + (size_t)i * GPU_BUS_ID_BYTES, g->ranks[y].bus_id, GPU_BUS_ID_BYTES - 1) ==
        0)
      return true;
  return false;
}

/* LL128 when every pair of ranks' GPUs is NVLink-class: the same answer on
 * every rank, from the same blobs, so that every rank picks the same
 * kernels. */
static bool gpu_all_nvlink(const symm_gpu_t *g, const gpu_blob_t *const *b) {
  for (int x = 0; x < g->size; x++)
    for (int y = 0; y < g->size; y++)
      if (x != y && !gpu_pair_nvlink(g, b, x, y)) return false;
  return true;
}

static symm_result_t gpu_startup(symm_comm_t *comm, const symm_blob_t *all) {
  symm_gpu_t *g = symm_gpu_of(comm);
  symm_result_t res = SYMM_SUCCESS;
  const gpu_blob_t **b = calloc((size_t)g->size, sizeof *b);
  g->ranks = calloc((size_t)g->size, sizeof *g->ranks);
  if (!b || !g->ranks) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "%s: out of memory", g->name);
    goto out;
  }
  for (int r = 0; r < g->size; r++) {
    if (!(b[r] = gpu_blob_of(g, all, r))) {
      res = SYMM_ERR_PROTOCOL;
      goto out;
    }
    g->ranks[r].ordinal = b[r]->ordinal;
    g->ranks[r].kernels = b[r]->kernels;
    /* Peers' strings: terminated whatever came. */
    memcpy(g->ranks[r].bus_id, b[r]->bus_id, GPU_BUS_ID_BYTES - 1);
    memcpy(g->ranks[r].uuid, b[r]->uuid, sizeof g->ranks[r].uuid);
  }
  SYMM_CHECK_GOTO(gpu_check_shared(g, b), res, out);
  gpu_fit_shared(g, b);
  SYMM_CHECK_GOTO(gpu_map_peer_devices(g, b), res, out);
  g->ll128 = gpu_all_nvlink(g, b);
  SYMM_CHECK_GOTO(gpu_module_agree(comm, g), res, out);
  SYMM_INFO(COLL, "%s: LL128 all-reduce %s", g->name,
            g->ll128 ? "on (NVLink-class peers)" : "off (a pair of GPUs without NVLink)");
out:
  free(b);
  return res;
}

/* ------------------------------------------------------------------- fini */

static void gpu_fini(symm_comm_t *comm) {
  symm_gpu_t *g = symm_gpu_of(comm);
  if (!g) return;
  /* After a failed symm_comm_init, at whatever step, this thread's context
   * goes back to what init found: the application's. */
  const bool put_back = g->caller_saved && !symm_comm_ready(comm);
  if (g->drv && g->ctx_retained) {
    ncu_context saved = NULL;
    bool entered = symm_gpu_enter(g, &saved) == SYMM_SUCCESS;
    gpu_module_unload(g);
    if (g->stream) g->drv->cuStreamDestroy(g->stream);
    if (entered) symm_gpu_leave(g, saved);
    g->drv->cuDevicePrimaryCtxRelease(g->dev);
    /* If ours was the last reference the context is destroyed; it must not
     * stay current on this thread.  If the runtime (or another
     * communicator) still holds it, it stays as the application had it. */
    unsigned int flags = 0;
    int active = 1;
    ncu_context cur = NULL;
    if (g->drv->cuDevicePrimaryCtxGetState(g->dev, &flags, &active) == NCU_SUCCESS && !active &&
        g->drv->cuCtxGetCurrent(&cur) == NCU_SUCCESS && cur == g->ctx)
      g->drv->cuCtxSetCurrent(NULL);
  }
  if (g->drv && put_back) g->drv->cuCtxSetCurrent(g->caller_ctx);
  free(g->ranks);
  free(g->peer_ordinal);
  free(g->peer_access);
  free(g);
  symm_engine_set_state(comm, NULL);
}

/* The embedded kernels reduce every dtype with every op; a kernel file of
 * SYMM_COLL_KERNELS may lack some.  Without kernels at all, the collective
 * itself says why. */
static bool gpu_reduces(symm_comm_t *comm, symm_dtype_t dtype, symm_redop_t op) {
  symm_gpu_t *g = NULL;
  ncu_function fn = NULL;
  if (gpu_coll_usable(comm, &g) != SYMM_SUCCESS) return true;
  return gpu_coll_function(g, SYMM_COLL_KERNEL_AR_ONE_SHOT, (int)dtype, (int)op, &fn) ==
         SYMM_SUCCESS;
}

/* A refused call meets the peers as the algorithm they run would. */
static symm_result_t gpu_abstain_any(symm_comm_t *comm, const symm_coll_args_t *args) {
  return args->algo == SYMM_ALGO_CE ? gpu_ce_abstain(comm, args) : gpu_abstain(comm, args);
}

const symm_engine_ops_t symm_gpu_engine = {
    .version = 6,
    .name = "gpu",
    .mem_kind = SYMM_MEM_DEVICE,
    .init = gpu_init,
    .startup = gpu_startup,
    .fini = gpu_fini,
    .scratch_fixed = gpu_scratch_fixed,
    .allreduce_algo = gpu_allreduce_algo,
    .scratch_bytes = gpu_scratch_bytes,
    .collective = gpu_collective,
    .abstain = gpu_abstain_any,
    .signal = gpu_signal,
    .poll_async_error = gpu_poll_async_error,
    .zero = gpu_zero,
    .device_copy = symm_gpu_device_copy,
    .device_free = symm_gpu_device_free,
    .write32 = gpu_write32,
    .reduces = gpu_reduces,
    .copy = gpu_copy,
    .ce_collective = gpu_ce_collective,
};
