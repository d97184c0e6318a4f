/* libnccl loaded at run time (nccl_lib.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nccl_lib.h"

bool symm_nccl_lib_load(symm_nccl_lib_t *lib, const char *path, char *why, size_t cap) {
  const char *name = path && *path ? path : SYMM_NCCL_LIB_DEFAULT;
  memset(lib, 0, sizeof *lib);
  lib->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    snprintf(why, cap, "%s cannot be loaded: %s", name, dlerror());
    return false;
  }
  struct { void **fn; const char *name; } syms[] = {
      {(void **)&lib->get_version, "ncclGetVersion"},
      {(void **)&lib->get_unique_id, "ncclGetUniqueId"},
      {(void **)&lib->comm_init_rank, "ncclCommInitRank"},
      {(void **)&lib->comm_destroy, "ncclCommDestroy"},
      {(void **)&lib->get_error_string, "ncclGetErrorString"},
      {(void **)&lib->all_reduce, "ncclAllReduce"},
      {(void **)&lib->all_gather, "ncclAllGather"},
      {(void **)&lib->reduce_scatter, "ncclReduceScatter"},
      {(void **)&lib->broadcast, "ncclBroadcast"},
      {(void **)&lib->send, "ncclSend"},
      {(void **)&lib->recv, "ncclRecv"},
      {(void **)&lib->group_start, "ncclGroupStart"},
      {(void **)&lib->group_end, "ncclGroupEnd"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(lib->handle, syms[i].name);
    if (!*syms[i].fn) {
      snprintf(why, cap, "%s has no %s", name, syms[i].name);
      return false;
    }
  }
  if (lib->get_version(&lib->version) != 0) lib->version = 0;
  return true;
}
