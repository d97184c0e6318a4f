/* symmem-bench's NCCL: the same calls through NCCL on the same buffers and
 * stream, where libnccl loads (src/backends/nccl/nccl_lib.c). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symmem_bench.h"

#ifdef SYMM_HAVE_CUDA
/* NCCL's data type for the bench's dtype; movement of a dtype NCCL lacks
 * goes as bytes.  Sets *scale to the elements per bench element. */
static int nccl_dtype(const bench_t *b, size_t *scale) {
  *scale = 1;
  switch (b->opt.dtype) {
  case SYMM_DTYPE_F16: return SYMM_NCCL_FLOAT16;
  case SYMM_DTYPE_BF16: return SYMM_NCCL_BFLOAT16;
  case SYMM_DTYPE_F32: return SYMM_NCCL_FLOAT32;
  case SYMM_DTYPE_F64: return SYMM_NCCL_FLOAT64;
  case SYMM_DTYPE_I8: return SYMM_NCCL_INT8;
  case SYMM_DTYPE_U8: return SYMM_NCCL_UINT8;
  case SYMM_DTYPE_I32: return SYMM_NCCL_INT32;
  case SYMM_DTYPE_U32: return SYMM_NCCL_UINT32;
  case SYMM_DTYPE_I64: return SYMM_NCCL_INT64;
  case SYMM_DTYPE_U64: return SYMM_NCCL_UINT64;
  default: *scale = b->esize; return SYMM_NCCL_UINT8;
  }
}

void call_nccl(bench_t *b, const layout_t *l) {
  bench_nccl_t *n = &b->nccl;
  size_t scale;
  int dt = nccl_dtype(b, &scale), rc = 0;
  int op = b->opt.op == SYMM_REDUCE_MIN ? SYMM_NCCL_MIN : b->opt.op == SYMM_REDUCE_MAX ? SYMM_NCCL_MAX
                                                                                    : SYMM_NCCL_SUM;
  size_t count = l->count * scale, chunk = l->count * b->esize;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE:
    rc = n->lib.all_reduce(l->send, l->recv, count, dt, op, n->comm, b->stream);
    break;
  case BENCH_ALL_GATHER:
    rc = n->lib.all_gather(l->send, l->recv, count, dt, n->comm, b->stream);
    break;
  case BENCH_REDUCE_SCATTER:
    rc = n->lib.reduce_scatter(l->send, l->recv, count, dt, op, n->comm, b->stream);
    break;
  case BENCH_BROADCAST:
    rc = n->lib.broadcast(l->send, l->recv, count, dt, b->opt.root, n->comm, b->stream);
    break;
  case BENCH_ALL_TO_ALL:
    /* NCCL has no all-to-all call; it is a group of sends and receives. */
    rc = n->lib.group_start();
    for (int p = 0; p < b->size && rc == 0; p++) {
      rc = n->lib.send(l->send + (size_t)p * chunk, count, dt, p, n->comm, b->stream);
      if (rc == 0)
        rc = n->lib.recv(l->recv + (size_t)p * chunk, count, dt, p, n->comm, b->stream);
    }
    if (rc == 0) rc = n->lib.group_end();
    else n->lib.group_end();
    break;
  case BENCH_ALL_TO_ALL_V:
    rc = n->lib.group_start();
    for (int p = 0; p < b->size && rc == 0; p++) {
      rc = n->lib.send(l->send + l->send_displs[p] * b->esize, l->send_counts[p] * scale, dt, p,
                       n->comm, b->stream);
      if (rc == 0)
        rc = n->lib.recv(l->recv + l->recv_displs[p] * b->esize, l->recv_counts[p] * scale, dt,
                         p, n->comm, b->stream);
    }
    if (rc == 0) rc = n->lib.group_end();
    else n->lib.group_end();
    break;
  default: break;
  }
  if (rc != 0)
    bench_die("nccl %s failed: %s", coll_names[b->opt.coll],
              n->lib.get_error_string ? n->lib.get_error_string(rc) : "error");
}

/* The value of setting `name` this process sees, NULL when unset. */
static const char *setting_value(const char *name) {
  for (size_t i = 0, n = symm_setting_count(); i < n; i++) {
    symm_setting_info_t info;
    if (symm_setting_get(i, &info) == SYMM_SUCCESS && strcmp(info.name, name) == 0)
      return info.value;
  }
  return NULL;
}

/* Whether this rank can run NCCL; n->why says why not. */
static bool nccl_usable_here(bench_t *b) {
  bench_nccl_t *n = &b->nccl;
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (!b->opt.nccl) snprintf(n->why, sizeof n->why, "--nccl 0");
  else if (!nvls || strcmp(nvls, "0") != 0)
    snprintf(n->why, sizeof n->why, "NCCL_NVLS_ENABLE=%s; the GPU safety rule (README) runs "
             "NCCL only with NCCL_NVLS_ENABLE=0", nvls ? nvls : "(unset)");
  else if (b->opt.inplace && (b->opt.coll == BENCH_ALL_TO_ALL ||
                              b->opt.coll == BENCH_ALL_TO_ALL_V))
    snprintf(n->why, sizeof n->why, "NCCL has no in-place all-to-all; use --inplace 0");
  else
    return symm_nccl_lib_load(&n->lib, setting_value("SYMM_NCCL_LIB"), n->why, sizeof n->why);
  return false;
}

/* Publishes this rank's GPU as "host PCI-bus-id" under bench/nccl/gpu/<rank>. */
static void post_gpu_identity(bench_t *b) {
  char ident[320] = "", key[64];
  int len = 0;
  if (gethostname(ident, 255) == 0) {
    ident[255] = 0;
    len = (int)strlen(ident);
  }
  ident[len++] = ' ';
  if (cudaDeviceGetPCIBusId(ident + len, (int)sizeof ident - len, b->device) != cudaSuccess)
    snprintf(ident + len, sizeof ident - (size_t)len, "device %d", b->device);
  bench_key(b, key, sizeof key, "nccl/gpu/%d", b->rank);
  BENCH_CHECK(symm_store_set(b->store, key, ident, strlen(ident) + 1));
}

/* Rank 0: NCCL refuses two ranks on one GPU ("duplicate GPU", ranks that
 * share it with SYMM_ALLOW_SHARED_DEVICE); says which ranks do, in why. */
static void find_shared_gpu(bench_t *b, char *why, size_t why_len) {
  char (*ids)[320] = calloc((size_t)b->size, sizeof *ids);
  if (!ids) bench_die("out of memory");
  for (int r = 0; r < b->size && !why[0]; r++) {
    char key[64];
    size_t len = 0;
    bench_key(b, key, sizeof key, "nccl/gpu/%d", r);
    BENCH_CHECK(symm_store_get(b->store, key, ids[r], sizeof ids[r], &len, -1));
    ids[r][sizeof ids[r] - 1] = 0;
    for (int q = 0; q < r && !why[0]; q++)
      if (strcmp(ids[q], ids[r]) == 0)
        snprintf(why, why_len, "ranks %d and %d share GPU %s; NCCL needs one GPU per rank", q,
                 r, strchr(ids[r], ' ') + 1);
  }
  free(ids);
}

/* The first byte of the store key bench/nccl/id: what the rest holds. */
#define BENCH_NCCL_TAG_ID 'I'      /* NCCL's unique id: NCCL is timed */
#define BENCH_NCCL_TAG_REFUSED 'R' /* why it is not (without its NUL) */

/* Rank 0: tells every rank the unique id, or (why != NULL) why NCCL is not
 * timed. */
static void post_nccl_verdict(bench_t *b, const char *why, const symm_nccl_unique_id_t *id) {
  char msg[1 + (sizeof b->nccl.why > sizeof *id ? sizeof b->nccl.why : sizeof *id)];
  size_t len;
  if (why) {
    msg[0] = BENCH_NCCL_TAG_REFUSED;
    len = strlen(why);
    if (len > sizeof msg - 1) len = sizeof msg - 1;
    memcpy(msg + 1, why, len);
  } else {
    msg[0] = BENCH_NCCL_TAG_ID;
    len = sizeof *id;
    memcpy(msg + 1, id, len);
  }
  char key[64];
  bench_key(b, key, sizeof key, "nccl/id");
  BENCH_CHECK(symm_store_set(b->store, key, msg, 1 + len));
}
#endif

/* Decides with every rank whether NCCL is timed (a communicator is
 * collective, so either all ranks make one or none does) and makes it. */
void nccl_setup(bench_t *b) {
  bench_nccl_t *n = &b->nccl;
  if (!on_gpu(b)) {
    snprintf(n->why, sizeof n->why, "host backend");
    return;
  }
#ifndef SYMM_HAVE_CUDA
  snprintf(n->why, sizeof n->why, "symmem-bench built without CUDA");
#else
  char key[64], verdict[sizeof n->why + 32];
  bool ok = nccl_usable_here(b);
  snprintf(verdict, sizeof verdict, "%s", ok ? "" : n->why);
  bench_key(b, key, sizeof key, "nccl/%d", b->rank);
  BENCH_CHECK(symm_store_set(b->store, key, verdict, strlen(verdict) + 1));
  post_gpu_identity(b);
  symm_nccl_unique_id_t id;
  size_t len = 0;
  if (b->rank == 0) {
    /* The first rank's reason stands for all. */
    char why[sizeof verdict] = "";
    for (int r = 0; r < b->size && !why[0]; r++) {
      bench_key(b, key, sizeof key, "nccl/%d", r);
      BENCH_CHECK(symm_store_get(b->store, key, verdict, sizeof verdict, &len, -1));
      verdict[sizeof verdict - 1] = 0;
      if (verdict[0]) snprintf(why, sizeof why, "rank %d: %s", r, verdict);
    }
    if (!why[0]) find_shared_gpu(b, why, sizeof why);
    int rc = why[0] ? 0 : n->lib.get_unique_id(&id);
    if (rc != 0) snprintf(why, sizeof why, "ncclGetUniqueId: %s", n->lib.get_error_string(rc));
    post_nccl_verdict(b, why[0] ? why : NULL, &id);
  }
  /* A tag byte, then the id or the reason: told apart by length alone, a
   * reason of 127 characters (and its NUL) would pass for an id. */
  char reply[1 + (sizeof n->why > sizeof id ? sizeof n->why : sizeof id)];
  bench_key(b, key, sizeof key, "nccl/id");
  BENCH_CHECK(symm_store_get(b->store, key, reply, sizeof reply, &len, -1));
  if (len == 1 + sizeof id && reply[0] == BENCH_NCCL_TAG_ID) {
    memcpy(&id, reply + 1, sizeof id);
  } else if (len >= 1 && reply[0] == BENCH_NCCL_TAG_REFUSED) {
    snprintf(n->why, sizeof n->why, "%.*s", (int)(len - 1), reply + 1);
    return;
  } else {
    bench_die("store key %s holds %zu bytes that are neither an NCCL id nor a reason", key,
              len);
  }
  /* On the nccl backend NCCL runs on the backend's own communicator, so
   * that its collectives work on the same registered windows as ours. */
  void *own = NULL;
  if (symm_comm_backend(b->comm) == SYMM_BACKEND_NCCL &&
      symm_comm_backend_handle(b->comm, &own) == SYMM_SUCCESS) {
    n->comm = (symm_nccl_comm_t)own;
    n->borrowed = true;
    n->used = true;
    return;
  }
  int rc = n->lib.comm_init_rank(&n->comm, b->size, id, b->rank);
  if (rc != 0) bench_die("ncclCommInitRank: %s", n->lib.get_error_string(rc));
  n->used = true;
#endif
}

void nccl_teardown(bench_t *b) {
#ifdef SYMM_HAVE_CUDA
  if (b->nccl.used && !b->nccl.borrowed) b->nccl.lib.comm_destroy(b->nccl.comm);
#endif
  /* The library stays loaded: NCCL's threads may outlive the destroy. */
}
