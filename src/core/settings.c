/* The one definition of every SYMM_* environment variable: name, type,
 * default and help text.  `symmem-info --env` prints this table. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const symm_setting_desc_t settings[] = {
    {"SYMM_BACKEND", SYMM_SETTING_STRING, "auto",
     "Backend: auto|host|native|cuda|nccl|nvshmem. An unknown name is an error."},
    {"SYMM_TIMEOUT_MS", SYMM_SETTING_INT, "60000",
     "Timeout of every blocking wait (bootstrap, rendezvous, barrier), in ms."},
    {"SYMM_DEBUG", SYMM_SETTING_STRING, "WARN", "Log level: NONE|WARN|INFO|TRACE."},
    {"SYMM_DEBUG_SUBSYS", SYMM_SETTING_STRING, "ALL",
     "Comma list of subsystems to log: INIT,BOOTSTRAP,STORE,ALLOC,BACKEND,COLL,ALL; "
     "a leading ^ excludes them instead."},
    {"SYMM_DEBUG_FILE", SYMM_SETTING_STRING, NULL,
     "Write log lines to this file instead of stderr; %h = hostname, %p = pid."},
    {"SYMM_RANK", SYMM_SETTING_INT, NULL, "Rank of this process (set by symmem-run).", false,
     true},
    {"SYMM_WORLD_SIZE", SYMM_SETTING_INT, NULL, "Number of ranks (set by symmem-run).", false,
     true},
    {"SYMM_LOCAL_RANK", SYMM_SETTING_INT, NULL, "Rank among the processes of this host.", false,
     true},
    {"SYMM_LOCAL_SIZE", SYMM_SETTING_INT, NULL, "Number of ranks on this host.", false, true},
    {"SYMM_STORE_ADDR", SYMM_SETTING_STRING, NULL,
     "host:port of the job's key-value store (set by symmem-run). Else MASTER_ADDR "
     "with SYMM_STORE_PORT.", false, true},
    {"SYMM_STORE_PORT", SYMM_SETTING_INT, "29600",
     "Port of the store when only MASTER_ADDR is known (under torchrun, pick one "
     "other than MASTER_PORT, which torchrun's own store uses)."},
    {"SYMM_STORE_BIND", SYMM_SETTING_STRING, "127.0.0.1",
     "Address the store served by rank 0 binds to; set 0.0.0.0 for multi-host jobs."},
    {"SYMM_STORE_EXTERNAL", SYMM_SETTING_BOOL, "0",
     "1: the store is served by someone else (symmem-run); rank 0 does not start one.", false,
     true},
    {"SYMM_STORE_HANDSHAKE_MS", SYMM_SETTING_INT, "5000",
     "A store connection that has not said a valid HELLO within this time is dropped."},
    {"SYMM_BOOTSTRAP_SHM", SYMM_SETTING_BOOL, "1",
     "1: ranks that all share one host exchange bootstrap data through shared memory "
     "(faster rendezvous and barriers); 0: always through the store."},
    {"SYMM_TOKEN", SYMM_SETTING_STRING, NULL,
     "Secret every store connection must present (symmem-run makes a random one).", true, true},
    {"SYMM_JOB_ID", SYMM_SETTING_STRING, NULL,
     "Job identifier used in socket names (symmem-run sets it; else derived).", false, true},
    {"SYMM_DEVICE", SYMM_SETTING_INT, NULL, "GPU ordinal for this rank (default: local rank)."},
    {"SYMM_ALLOW_SHARED_DEVICE", SYMM_SETTING_BOOL, "0",
     "1: several ranks may use the same GPU (for tests with more ranks than GPUs)."},
    {"SYMM_NATIVE_HANDLE", SYMM_SETTING_STRING, "auto",
     "native backend handle type: auto|fd|fabric (auto falls back to fd)."},
    {"SYMM_POOL_BYTES", SYMM_SETTING_SIZE, "4G",
     "Limit of freed-but-still-mapped memory kept per communicator for reuse (0 = off)."},
    {"SYMM_SCRATCH_BYTES", SYMM_SETTING_SIZE, "32M",
     "Per-rank staging of the collectives' scratch tensor, for buffers that are not "
     "symmetric memory (reserved on first use, or with symm_comm_reserve_scratch; grows "
     "on demand). The native backend's LL areas (28 MiB) come on top."},
    {"SYMM_HOST_SLICE_BYTES", SYMM_SETTING_SIZE, "2M",
     "Host backend: all-reduces larger than this run as slices of this size, so that "
     "every rank's buffers stay in the CPU caches (0: never slice). The same on every "
     "rank (ranks that differ cannot create a communicator: SYMM_ERR_MISMATCH)."},
    {"SYMM_ALLREDUCE_ALGO", SYMM_SETTING_STRING, "auto",
     "All-reduce algorithm: auto|one_shot|two_shot|ll|ll128 (auto picks by size and ranks)."},
    {"SYMM_NATIVE_PDL", SYMM_SETTING_BOOL, "1",
     "native: launch collective and signal kernels with programmatic dependent launch "
     "(sm_90+), so that back-to-back kernels overlap their launch latency."},
    {"SYMM_COLL_MAX_BLOCKS", SYMM_SETTING_INT, "0",
     "native: most thread blocks one collective kernel runs, 1..1024 (0, or a value out of "
     "that range: as many as pay off); fewer leave SMs to kernels that overlap. Kernels "
     "that exchange headers never run more blocks than they have channels (122 at 2 ranks); "
     "the LL kernels up to 1024. The same on every rank."},
    {"SYMM_COLL_LL_THREADS", SYMM_SETTING_INT, "0",
     "native: threads per block of the LL and LL128 all-reduce kernels, 32..512 in "
     "multiples of 32 (0, or another value: 256); for tuning. The same on every rank."},
    {"SYMM_COLL_KERNELS", SYMM_SETTING_STRING, NULL,
     "native: file of collective kernels (fatbin, cubin or PTX built from this version's "
     "src/kernels/coll_kernels.cu, e.g. with other -D knobs) to load instead of the embedded "
     "ones; for tuning. The same file on every rank; a file that cannot be loaded, or of "
     "another ABI, fails communicator creation."},
    {"SYMM_CUDA_LIB", SYMM_SETTING_STRING, "libcuda.so.1", "CUDA driver library to load."},
    {"SYMM_NCCL_LIB", SYMM_SETTING_STRING, "libnccl.so.2", "NCCL library to load."},
};

const symm_setting_desc_t *symm_settings_table(size_t *count) {
  if (count) *count = sizeof settings / sizeof settings[0];
  return settings;
}

const char *symm_setting_shown(const symm_setting_desc_t *d, const char *v) {
  return v && d && d->secret ? "(set; hidden: a secret)" : v;
}

static const symm_setting_desc_t *find_setting(const char *name) {
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (strcmp(settings[i].name, name) == 0) return &settings[i];
  return NULL;
}

const char *symm_setting_str(const char *name) {
  const symm_setting_desc_t *d = find_setting(name);
  if (!d) {
    SYMM_WARN(INIT, "internal: setting %s is not declared in settings.c", name);
    return NULL;
  }
  const char *v = getenv(name);
  if (v && *v) return v;
  return d->default_value;
}

int64_t symm_parse_size(const char *text) {
  if (!text || !*text) return -1;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (end == text || v < 0) return -1;
  while (isspace((unsigned char)*end)) end++;
  int64_t mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mult = 1LL << 10; end++; break;
    case 'M': mult = 1LL << 20; end++; break;
    case 'G': mult = 1LL << 30; end++; break;
    case 'T': mult = 1LL << 40; end++; break;
    default: return -1;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  if (v > INT64_MAX / mult) return -1;
  return (int64_t)v * mult;
}

int64_t symm_setting_int(const char *name) {
  const char *v = symm_setting_str(name);
  if (!v) return 0;
  const symm_setting_desc_t *d = find_setting(name);
  if (d && d->type == SYMM_SETTING_SIZE) {
    int64_t s = symm_parse_size(v);
    return s < 0 ? 0 : s;
  }
  if (d && d->type == SYMM_SETTING_BOOL) return symm_setting_bool(name);
  char *end;
  long long x = strtoll(v, &end, 10);
  if (end == v) return 0;
  return x;
}

static bool text_true(const char *v) {
  return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 ||
               strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0);
}

bool symm_setting_bool(const char *name) { return text_true(symm_setting_str(name)); }

void symm_multicast_status(char *why, size_t why_len) {
  static const char *const vetoes[][2] = {{"NCCL_NVLS_ENABLE", "0"},
                                          {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
                                          {"NVSHMEM_DISABLE_NVLS", "1"}};
  if (!why || !why_len) return;
  size_t n = (size_t)snprintf(why, why_len, "symmem never creates NVLink multicast objects "
                              "(they can take a shared host's GPUs out of service)");
  for (size_t i = 0; i < 3 && n < why_len; i++) {
    const char *v = getenv(vetoes[i][0]);
    if (v && strcmp(v, vetoes[i][1]) == 0)
      n += (size_t)snprintf(why + n, why_len - n, "; %s=%s is set", vetoes[i][0], v);
  }
}
