/* What symmem-info prints for the nvshmem backend: the library found, its
 * version, how NVSHMEM would be started (bootstrap), which of the
 * provider's collectives it has, the NVLS guard. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BACKEND
#include <stdio.h>
#include <stdlib.h>

#include "backends/nvshmem/nvshmem.h"

void nvsh_describe(FILE *out) {
  char why[768] = "";
  const nvsh_lib_t *lib = nvsh_lib_get(why, sizeof why);
  if (!lib) return; /* symmem-info already shows the probe's reason */
  fprintf(out, "library: %s, NVSHMEM %d.%d.%d\n", lib->path, lib->major, lib->minor, lib->patch);
  fprintf(out, "memory: nvshmem_malloc (collective), peers by nvshmem_ptr; heap per PE: %s\n",
          getenv("NVSHMEM_SYMMETRIC_SIZE") ? getenv("NVSHMEM_SYMMETRIC_SIZE")
                                           : "NVSHMEM's default (NVSHMEM_SYMMETRIC_SIZE)");
  const nvsh_route_t route = nvsh_boot_route(lib, why, sizeof why);
  if (route == NVSH_ROUTE_PLUGIN)
    fprintf(out, "bootstrap: plugin %s (NVSHMEM's rounds ride symmem's bootstrap; %s)\n",
            nvsh_boot_plugin_path(), why);
  else if (route == NVSH_ROUTE_UNIQUEID)
    fprintf(out, "bootstrap: unique id from rank 0, NVSHMEM's own sockets (%s)\n", why);
  else
    fprintf(out, "bootstrap: none: SYMM_NVSHMEM_BOOTSTRAP=plugin, but %s\n", why);
  if (lib->coll_missing)
    fprintf(out, "collectives beyond load/store: %d entry point(s) missing, first %s\n",
            lib->coll_missing, lib->first_missing);
  else
    fprintf(out, "collectives beyond load/store: NVSHMEM's on-stream team reduce, reducescatter, "
            "fcollect, broadcast, alltoall\n");
  if (lib->buffer_register_symmetric && lib->buffer_unregister_symmetric)
    fprintf(out, "user memory (symm_tensor_register): nvshmemx_buffer_register_symmetric\n");
  else
    fprintf(out, "user memory (symm_tensor_register): refused: NVSHMEM %d.%d.%d has no "
            "nvshmemx_buffer_register_symmetric\n", lib->major, lib->minor, lib->patch);
  const char *nvls = getenv("NVSHMEM_DISABLE_NVLS");
  fprintf(out, "NVLS: off (NVSHMEM_DISABLE_NVLS=1 set at init; now %s)\n", nvls ? nvls : "unset");
}
