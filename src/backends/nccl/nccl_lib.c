/* libnccl loaded at run time (nccl_lib.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nccl_lib.h"

typedef struct {
  size_t offset;
  const char *name;
  bool required;
} nccl_symbol_t;

#define NCCL_SYM(member, name, required) {offsetof(symm_nccl_lib_t, member), name, required}
static const nccl_symbol_t nccl_symbols[] = {
    NCCL_SYM(get_version, "ncclGetVersion", true),
    NCCL_SYM(get_unique_id, "ncclGetUniqueId", true),
    NCCL_SYM(comm_init_rank, "ncclCommInitRank", true),
    NCCL_SYM(comm_destroy, "ncclCommDestroy", true),
    NCCL_SYM(get_error_string, "ncclGetErrorString", true),
    NCCL_SYM(all_reduce, "ncclAllReduce", true),
    NCCL_SYM(all_gather, "ncclAllGather", true),
    NCCL_SYM(reduce_scatter, "ncclReduceScatter", true),
    NCCL_SYM(broadcast, "ncclBroadcast", true),
    NCCL_SYM(send, "ncclSend", true),
    NCCL_SYM(recv, "ncclRecv", true),
    NCCL_SYM(group_start, "ncclGroupStart", true),
    NCCL_SYM(group_end, "ncclGroupEnd", true),
    NCCL_SYM(comm_init_rank_config, "ncclCommInitRankConfig", false),
    NCCL_SYM(comm_abort, "ncclCommAbort", false),
    NCCL_SYM(comm_get_async_error, "ncclCommGetAsyncError", false),
    NCCL_SYM(mem_alloc, "ncclMemAlloc", false),
    NCCL_SYM(mem_free, "ncclMemFree", false),
    NCCL_SYM(comm_window_register, "ncclCommWindowRegister", false),
    NCCL_SYM(comm_window_deregister, "ncclCommWindowDeregister", false),
    NCCL_SYM(all_to_all, "ncclAlltoAll", false),
    NCCL_SYM(get_peer_device_pointer, "ncclGetPeerDevicePointer", false),
    NCCL_SYM(get_last_error, "ncclGetLastError", false),
    NCCL_SYM(comm_split, "ncclCommSplit", false),
    NCCL_SYM(comm_count, "ncclCommCount", false),
    NCCL_SYM(comm_user_rank, "ncclCommUserRank", false),
};
#undef NCCL_SYM

void symm_nccl_version_parts(int code, int *major, int *minor, int *patch) {
  /* Codes below 10000 are the old encoding (2.8.4 is 2804). */
  int scale = code < 10000 ? 1000 : 10000;
  *major = code / scale;
  *minor = code % scale / 100;
  *patch = code % 100;
}

void symm_nccl_config_init(symm_nccl_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->magic = SYMM_NCCL_CONFIG_MAGIC;
  cfg->version = SYMM_NCCL_VERSION(2, 27, 0);
  cfg->blocking = cfg->cga_cluster_size = cfg->min_ctas = cfg->max_ctas = SYMM_NCCL_CONFIG_UNDEF;
  cfg->split_share = cfg->traffic_class = cfg->collnet_enable = SYMM_NCCL_CONFIG_UNDEF;
  cfg->cta_policy = cfg->shrink_share = cfg->nvls_ctas = SYMM_NCCL_CONFIG_UNDEF;
  cfg->net_name = cfg->comm_name = NULL;
}

const char *symm_nccl_lib_symbol(size_t member_offset) {
  for (size_t i = 0; i < sizeof nccl_symbols / sizeof nccl_symbols[0]; i++)
    if (nccl_symbols[i].offset == member_offset) return nccl_symbols[i].name;
  return NULL;
}

bool symm_nccl_lib_load(symm_nccl_lib_t *lib, const char *path, char *why, size_t cap) {
  const char *name = path && *path ? path : SYMM_NCCL_LIB_DEFAULT;
  memset(lib, 0, sizeof *lib);
  lib->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    snprintf(why, cap, "%s cannot be loaded: %s", name, dlerror());
    return false;
  }
  for (size_t i = 0; i < sizeof nccl_symbols / sizeof nccl_symbols[0]; i++) {
    void *fn = dlsym(lib->handle, nccl_symbols[i].name);
    memcpy((char *)lib + nccl_symbols[i].offset, &fn, sizeof fn);
    if (!fn && nccl_symbols[i].required) {
      snprintf(why, cap, "%s has no %s", name, nccl_symbols[i].name);
      return false;
    }
  }
  if (lib->get_version(&lib->version) != 0) lib->version = 0;
  return true;
}
