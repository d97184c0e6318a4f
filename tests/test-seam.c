/* The backend seam, proved with the tests' own backend (arena_backend.c):
 * through symm_backend.h alone it gets rendezvous, remote views, signals and
 * every collective from the core and the CPU engine, and its collective
 * variant runs the core's cross-rank checks of allocation, free and
 * registration.  Real processes, real shared memory. */
#include <stddef.h>
#include <unistd.h>

#include "arena_backend.h"
#include "backends/builtin.h"
#include "symm_backend.h"
#include "harness.h"

static symm_comm_t *arena_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

static int run_on(const char *backend, int n, test_rank_fn fn) {
  arena_backends_register();
  test_job_opts_t o = {.backend = backend, .kill_rank = -1, .store_timeout_ms = 10000};
  return test_run_ranks_opts(n, fn, NULL, &o);
}

/* A one-dimensional tensor of n elements, rendezvoused. */
static symm_tensor_t *rendezvoused_tensor(symm_comm_t *comm, int64_t n, symm_dtype_t dtype) {
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, dtype, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  return t;
}

static float value_of(int rank, size_t i) { return (float)(rank * 1000 + (int)(i % 997)); }

/* Views, lookup and the calls the arena cannot do, refused by name. */
static void check_views(symm_comm_t *comm, int rank, int size) {
  const size_t n = 3000;
  symm_tensor_t *t = rendezvoused_tensor(comm, n, SYMM_DTYPE_F32);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, right, &v));
  ASSERT_EQ(v.rank, right);
  ASSERT_EQ(v.device, -1);
  for (size_t i = 0; i < n; i++) ((float *)v.data)[i] = value_of(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  const float *mine = symm_tensor_data(t);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(mine[i], value_of(left, i));
  /* An interior pointer of the peer's data finds the tensor and the rank. */
  symm_tensor_t *found = NULL;
  int owner = -1;
  size_t off = 0;
  ASSERT_OK(symm_tensor_lookup((float *)v.data + 7, &found, &owner, &off));
  ASSERT_PTR_EQ(found, t);
  ASSERT_EQ(owner, right);
  ASSERT_EQ(off, 7 * sizeof(float));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_PTR_EQ(ptrs[right], v.data);
  /* What the arena lacks is refused, naming the backends that have it. */
  ASSERT_RES(symm_tensor_contiguous_view(t, &v), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "contiguous view needs the native or host backend");
  ASSERT_STR_CONTAINS(symm_last_error(), "uses arena");
  ASSERT_RES(symm_tensor_peer_ptrs_device(t, &ptrs), SYMM_ERR_UNSUPPORTED);
  char who[128];
  symm_backend_names_with(offsetof(symm_backend_caps_t, device_peer_array), who, sizeof who);
  ASSERT_STR_CONTAINS(who, "native");
  ASSERT_STR_CONTAINS(symm_last_error(), who);
  ASSERT_RES(symm_tensor_signal_pad_ptrs_device(t, &ptrs), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "use symm_tensor_signal_pad");
  ASSERT_RES(symm_signal_put(t, right, 0, (symm_stream_t)0x1), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "takes no stream");
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
}

static void check_signals(symm_comm_t *comm, int rank, int size) {
  symm_tensor_t *t = rendezvoused_tensor(comm, 16, SYMM_DTYPE_I32);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int round = 0; round < 50; round++) {
    ASSERT_OK(symm_signal_put(t, right, 1, NULL));
    ASSERT_OK(symm_signal_wait(t, left, 1, NULL));
  }
  ASSERT_OK(symm_signal_barrier(t, 2, NULL));
  ASSERT_OK(symm_tensor_free(t));
}

/* Every collective, from symmetric and from private buffers, checked. */
static void check_collectives(symm_comm_t *comm, int rank, int size) {
  const size_t counts[] = {5, 1000, 70000};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    const size_t count = counts[k], total = count * (size_t)size;
    symm_tensor_t *st = rendezvoused_tensor(comm, (int64_t)total, SYMM_DTYPE_F32);
    symm_tensor_t *rt = rendezvoused_tensor(comm, (int64_t)total, SYMM_DTYPE_F32);
    float *send = symm_tensor_data(st), *recv = symm_tensor_data(rt);
    float *priv = malloc(sizeof *priv * total);
    ASSERT(priv);
    const symm_algo_t algos[] = {SYMM_ALGO_AUTO, SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
    for (size_t a = 0; a < 3; a++) {
      ASSERT_OK(symm_comm_set_allreduce_algo(comm, algos[a]));
      for (size_t i = 0; i < count; i++) send[i] = value_of(rank, i);
      ASSERT_OK(symm_all_reduce(comm, send, recv, count, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < size; r++) want += value_of(r, i);
        ASSERT_EQ(recv[i], want);
      }
    }
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_AUTO));
    /* all-gather into a private buffer */
    for (size_t i = 0; i < count; i++) send[i] = value_of(rank, i);
    ASSERT_OK(symm_all_gather(comm, send, priv, count, SYMM_DTYPE_F32, NULL));
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < count; i++) ASSERT_EQ(priv[(size_t)r * count + i], value_of(r, i));
    /* reduce-scatter: rank r gets the sum of every rank's block r */
    for (size_t i = 0; i < total; i++) send[i] = value_of(rank, i);
    ASSERT_OK(symm_reduce_scatter(comm, send, recv, count, SYMM_DTYPE_F32, SYMM_REDUCE_MAX,
                                  NULL));
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(recv[i], value_of(size - 1, (size_t)rank * count + i));
    /* broadcast from the last rank, private buffers */
    for (size_t i = 0; i < count; i++) priv[i] = value_of(rank, i);
    ASSERT_OK(symm_broadcast(comm, priv, priv, count, SYMM_DTYPE_F32, size - 1, NULL));
    for (size_t i = 0; i < count; i++) ASSERT_EQ(priv[i], value_of(size - 1, i));
    /* all-to-all: block r of rank q lands in block q of rank r */
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < count; i++) send[(size_t)r * count + i] = value_of(rank, (size_t)r + i);
    ASSERT_OK(symm_all_to_all(comm, send, recv, count, SYMM_DTYPE_F32, NULL));
    for (int q = 0; q < size; q++)
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(recv[(size_t)q * count + i], value_of(q, (size_t)rank + i));
    free(priv);
    ASSERT_OK(symm_comm_barrier(comm));
    ASSERT_OK(symm_tensor_free(st));
    ASSERT_OK(symm_tensor_free(rt));
  }
}

static int arena_everything_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = arena_comm();
  ASSERT(strcmp(symm_backend_name(symm_comm_backend(comm)), getenv("SYMM_BACKEND")) == 0);
  ASSERT_EQ(symm_comm_device(comm), -1);
  check_views(comm, rank, size);
  check_signals(comm, rank, size);
  check_collectives(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(seam_arena_2) { return run_on("arena", 2, arena_everything_rank); }
TEST_IMPL(seam_arena_3) { return run_on("arena", 3, arena_everything_rank); }
/* The same on the collective variant: the scratch and every tensor go
 * through the core's collective allocation. */
TEST_IMPL(seam_arena_coll_3) { return run_on("arena_coll", 3, arena_everything_rank); }

/* ---- collective allocation, free and registration ---------------------- */

static int coll_alloc_rank(int rank, int size, void *arg) {
  (void)arg, (void)size;
  symm_comm_t *comm = arena_comm();
  const long base = arena_registered(comm);
  int64_t n = 1000, other = rank == 1 ? 2000 : 1000;
  symm_tensor_t *a, *b, *bad;
  /* Different sizes: every rank is told, with both shapes; nothing made. */
  ASSERT_RES(symm_tensor_alloc(comm, &other, 1, SYMM_DTYPE_F32, &bad), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), rank == 1 ? "rank 0 asked for [1000] f32"
                                                   : "rank 1 asked for [2000] f32");
  ASSERT_EQ(arena_registered(comm), base);
  /* Then the same call on every rank works, registered once. */
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &a));
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &b));
  ASSERT_EQ(arena_registered(comm), base + 2);
  ASSERT_OK(symm_tensor_rendezvous(a));
  /* Out of order: rank 0 frees a, rank 1 frees b.  Both are refused, both
   * tensors stay usable. */
  ASSERT_RES(symm_tensor_free(rank == 0 ? a : b), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "frees collectively");
  ASSERT_STR_CONTAINS(symm_last_error(), "nothing was freed");
  float *p = symm_tensor_data(a);
  p[0] = (float)rank;
  ASSERT_OK(symm_all_reduce(comm, p, p, 1, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_EQ(p[0], 1.0f);
  const long with_scratch = arena_registered(comm); /* the all-reduce made the scratch */
  ASSERT_EQ(with_scratch, base + 3);
  /* In order: both freed.  They go to the pool and keep their
   * registration; the same allocation again reuses one without a new
   * registration. */
  ASSERT_OK(symm_tensor_free(a));
  ASSERT_OK(symm_tensor_free(b));
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &a));
  ASSERT_EQ(arena_registered(comm), with_scratch);
  ASSERT_OK(symm_tensor_rendezvous(a));
  ASSERT_OK(symm_tensor_free(a));
  /* Trimming the pool releases (and deregisters) the pooled ones, on every
   * rank alike. */
  size_t released = 0;
  ASSERT_OK(symm_comm_pool_trim(comm, &released));
  ASSERT_GT(released, 0);
  ASSERT_EQ(arena_registered(comm), with_scratch - 2);
  /* A rank that allocates while its peer frees: a mismatch, not a hang. */
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &a));
  if (rank == 0) {
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &b), SYMM_ERR_MISMATCH);
  } else {
    ASSERT_RES(symm_tensor_free(a), SYMM_ERR_MISMATCH);
  }
  ASSERT_STR_CONTAINS(symm_last_error(), "called");
  ASSERT_OK(symm_tensor_free(a));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(seam_collective_alloc) { return run_on("arena_coll", 2, coll_alloc_rank); }

/* Pooling a collective free is agreed: ranks whose pools differ in room
 * still free together (one pools nothing, so nobody does). */
static int coll_pool_differs_rank(int rank, int size, void *arg) {
  (void)arg, (void)size;
  if (rank == 1) unsetenv("SYMM_POOL_BYTES"); /* the default pool; rank 0 has none */
  symm_comm_t *comm = arena_comm();
  int64_t n = 4096;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  const long before = arena_registered(comm);
  ASSERT_OK(symm_tensor_free(t));
  ASSERT_EQ(arena_registered(comm), before - 1); /* really freed on both */
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(seam_collective_free_pool_agreed) {
  /* The ranks inherit the variable; rank 1 clears it before its init. */
  setenv("SYMM_POOL_BYTES", "0", 1);
  int bad = run_on("arena_coll", 2, coll_pool_differs_rank);
  unsetenv("SYMM_POOL_BYTES");
  return bad;
}

TEST_IMPL(seam_backend_names) {
  arena_backends_register();
  symm_backend_t b;
  ASSERT_OK(symm_backend_from_name("arena_coll", &b));
  ASSERT_EQ(b, ARENA_COLL_BACKEND_ID);
  ASSERT(strcmp(symm_backend_name(b), "arena_coll") == 0);
  ASSERT_RES(symm_backend_from_name("arena_x", &b), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "nvshmem, arena, arena_coll");
  ASSERT_OK(symm_backend_available(b, NULL, 0));
  return 0;
}

/* Every built-in table holds what its capabilities imply; a table that
 * claims a capability without its members is refused naming them. */
static symm_result_t table_probe(char *why, size_t len) { return SYMM_SUCCESS; }
static symm_result_t table_init(symm_comm_t *c, symm_backend_caps_t *caps, symm_blob_t *b) {
  return SYMM_SUCCESS;
}
static void table_fini(symm_comm_t *c) {}
static size_t table_gran(symm_comm_t *c) { return 4096; }
static symm_result_t table_alloc(symm_comm_t *c, symm_mem_t *m) { return SYMM_ERR_UNSUPPORTED; }
static void table_free(symm_comm_t *c, symm_mem_t *m) {}
static symm_result_t table_map(symm_comm_t *c, const symm_mem_t *l, int peer,
                               const symm_exchange_info_t *info, symm_peer_map_t *map) {
  return SYMM_ERR_UNSUPPORTED;
}
static void table_unmap(symm_comm_t *c, symm_peer_map_t *map) {}
static symm_result_t table_split(symm_comm_t *c, int color, int key, void **child) {
  return SYMM_ERR_UNSUPPORTED;
}

TEST_IMPL(seam_table_checked) {
#define CHECK_BUILTIN(name)                                                      \
  if (symm_backend_table_lacks(&symm_##name##_ops))                             \
    TEST_FAIL_("built-in %s lacks %s", #name, symm_backend_table_lacks(&symm_##name##_ops));
  SYMM_BUILTIN_BACKENDS(CHECK_BUILTIN)
#undef CHECK_BUILTIN
  symm_backend_ops_t t = {.version = 1, .name = "incomplete", .id = (symm_backend_t)20,
                          .mem_kind = SYMM_MEM_HOST, .probe = table_probe, .init = table_init,
                          .fini = table_fini, .granularity = table_gran, .alloc = table_alloc,
                          .free = table_free, .map_peer = table_map, .unmap_peer = table_unmap};
  ASSERT(symm_backend_table_lacks(&t) == NULL);
  t.caps.contiguous_view = true;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "contiguous_map and contiguous_unmap");
  t.caps.contiguous_view = false;
  t.caps.registers = true;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "register_mem and deregister_mem");
  t.caps.registers = false;
  t.caps.takes_stream = true;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_MEM_DEVICE");
  t.caps.takes_stream = false;
  t.version = 4;
  t.split = table_split;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "split_release");
  t.split = NULL;
  t.caps.registers_user = true;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "register_user and deregister_user (version 6)");
  t.caps.registers_user = false;
  t.version = 7;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "a version in 1..6");
  t.version = 1;
  t.map_peer = NULL;
  ASSERT_RES(symm_backend_register(&t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "required members");
  return 0;
}

/* ---- peers beyond load and store --------------------------------------- */

/* ARENA_UNREACHABLE: rank 2 and ranks 0, 1 do not reach each other.  The
 * tensor rendezvouses; what needs loads and stores to the unreachable
 * peers is refused naming them; a backend with collectives of its own runs
 * them instead. */
/* A backend with one-sided transfers of its own (arena_coll): puts, gets,
 * put_signal and barriers reach the unreachable peer through them, the
 * reachable ones through the engine; every byte checked. */
static void provider_one_sided(symm_comm_t *comm, symm_tensor_t *t, int rank, int size) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const long before = arena_provider_calls(comm);
  float mine[16], back[16];
  for (int i = 0; i < 16; i++) mine[i] = (float)(100 * rank + i);
  ASSERT_OK(symm_put_signal(t, right, 16 * sizeof(float), mine, sizeof mine, 0, NULL));
  ASSERT_OK(symm_signal_wait(t, left, 0, NULL));
  const float *d = symm_tensor_data(t);
  for (int i = 0; i < 16; i++) ASSERT_EQ(d[16 + i], (float)(100 * left + i));
  ASSERT_OK(symm_signal_barrier(t, 1, NULL));
  ASSERT_OK(symm_get(t, left, 16 * sizeof(float), back, sizeof back, NULL));
  for (int i = 0; i < 16; i++) ASSERT_EQ(back[i], (float)(100 * ((left + size - 1) % size) + i));
  ASSERT_OK(symm_signal_barrier(t, 1, NULL));
  /* Rank 2 reaches nobody, 0 and 1 reach one another: the transfers to
   * rank 2 and all of rank 2's are the provider's.  Rank 0: a barrier put
   * to 2 twice, the get from 2; rank 1: the put and signal to 2, the
   * barrier puts to 2; rank 2: put, signal, 2 x 2 barrier puts, get. */
  const long used = arena_provider_calls(comm) - before;
  const long want = rank == 0 ? 3 : rank == 1 ? 4 : 7;
  ASSERT_MSG(used == want, "%ld provider transfers, want %ld", used, want);
}

static int unreachable_rank(int rank, int size, void *arg) {
  (void)arg;
  const bool own = strcmp(getenv("SYMM_BACKEND"), "arena_coll") == 0;
  symm_comm_t *comm = arena_comm();
  int64_t n = 64;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  const int last = size - 1, far = rank == last ? 0 : last;
  symm_view_t v;
  ASSERT_RES(symm_tensor_remote_view(t, far, &v), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "not load/store reachable");
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_PTR_EQ(ptrs[far], NULL);
  if (rank != last) ASSERT_OK(symm_tensor_remote_view(t, 1 - rank, &v)); /* 0 and 1 do */
  if (own) {
    provider_one_sided(comm, t, rank, size);
  } else {
    ASSERT_RES(symm_signal_put(t, far, 0, NULL), SYMM_ERR_UNSUPPORTED);
    char want[64];
    snprintf(want, sizeof want, "rank %d not load/store reachable from rank %d", far, rank);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
    ASSERT_RES(symm_signal_barrier(t, 0, NULL), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), rank == last ? "ranks 0, 1 not" : "rank 2 not");
    float x = 1;
    ASSERT_RES(symm_put(t, far, 0, &x, sizeof x, NULL), SYMM_ERR_UNSUPPORTED);
    snprintf(want, sizeof want, "rank %d is not load/store reachable", far);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
  }
  float *p = symm_tensor_data(t);
  const long calls = arena_provider_calls(comm);
  symm_result_t res = symm_all_reduce(comm, p, p, 64, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  if (own) {
    ASSERT_OK(res);
    ASSERT_EQ(arena_provider_calls(comm), calls + 1);
  } else {
    ASSERT_EQ(res, SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "runs no collectives of its own");
    ASSERT_STR_CONTAINS(symm_last_error(), rank == last ? "ranks 0, 1 not" : "rank 2 not");
  }
  ASSERT_OK(symm_comm_barrier(comm)); /* the bootstrap still reaches everyone */
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

static int run_unreachable(const char *backend) {
  setenv("ARENA_UNREACHABLE", "1", 1);
  int bad = run_on(backend, 3, unreachable_rank);
  unsetenv("ARENA_UNREACHABLE");
  return bad;
}

TEST_IMPL(seam_unreachable_refused) { return run_unreachable("arena"); }
TEST_IMPL(seam_unreachable_provider_collective) { return run_unreachable("arena_coll"); }
