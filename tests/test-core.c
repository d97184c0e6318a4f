/* Single-process behaviour of the core: names, configuration, bad input,
 * a one-rank communicator, the registry. */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "symm_test_access.h"
#include "harness.h"

TEST_IMPL(core_backend_names) {
  symm_backend_t b;
  ASSERT_OK(symm_backend_from_name("host", &b));
  ASSERT_EQ(b, SYMM_BACKEND_HOST);
  ASSERT_OK(symm_backend_from_name("NVSHMEM", &b));
  ASSERT_EQ(b, SYMM_BACKEND_NVSHMEM);
  ASSERT_RES(symm_backend_from_name("bogus", &b), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "bogus");
  const char *names[] = {"auto", "host", "native", "cuda", "nccl", "nvshmem"};
  for (int i = 0; i < 6; i++) {
    ASSERT_STR_CONTAINS(symm_last_error(), names[i]);
    ASSERT_STR_CONTAINS(symm_backend_name((symm_backend_t)i), names[i]);
  }
  ASSERT_RES(symm_backend_from_name(NULL, &b), SYMM_ERR_INVALID_ARG);
  ASSERT_PTR_EQ(symm_backend_name((symm_backend_t)42), NULL);
  char why[256] = "";
  ASSERT_OK(symm_backend_available(SYMM_BACKEND_HOST, why, sizeof why));
  return 0;
}

/* Reduction and algorithm names round-trip; unknown names list the valid. */
TEST_IMPL(core_coll_names) {
  for (int i = 0; i < SYMM_REDUCE_COUNT_; i++) {
    symm_redop_t op;
    ASSERT_OK(symm_redop_from_name(symm_redop_name((symm_redop_t)i), &op));
    ASSERT_EQ((int)op, i);
  }
  for (int i = 0; i < SYMM_ALGO_COUNT_; i++) {
    symm_algo_t a;
    ASSERT_OK(symm_algo_from_name(symm_algo_name((symm_algo_t)i), &a));
    ASSERT_EQ((int)a, i);
  }
  symm_algo_t a;
  ASSERT_OK(symm_algo_from_name("LL128", &a)); /* case-insensitive */
  ASSERT_EQ((int)a, (int)SYMM_ALGO_LL128);
  ASSERT_RES(symm_algo_from_name("fast", &a), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "ll128");
  symm_redop_t op;
  ASSERT_RES(symm_redop_from_name("mean", &op), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "sum, min, max, prod, avg");
  ASSERT_RES(symm_redop_from_name(NULL, &op), SYMM_ERR_INVALID_ARG);
  ASSERT(symm_redop_name((symm_redop_t)SYMM_REDUCE_COUNT_) == NULL);
  ASSERT(symm_algo_name((symm_algo_t)SYMM_ALGO_COUNT_) == NULL);
  return 0;
}

TEST_IMPL(core_gpu_backends_explain) {
  /* On a machine without a GPU every GPU backend says why it is unusable. */
  for (int b = SYMM_BACKEND_NATIVE; b <= SYMM_BACKEND_NVSHMEM; b++) {
    char why[512] = "";
    symm_result_t r = symm_backend_available((symm_backend_t)b, why, sizeof why);
    if (r == SYMM_SUCCESS) continue; /* a GPU machine */
    ASSERT_EQ(r, SYMM_ERR_BACKEND_UNAVAILABLE);
    ASSERT_GT(strlen(why), 10);
    ASSERT_STR_CONTAINS(symm_last_error(), symm_backend_name((symm_backend_t)b));
  }
  return 0;
}

TEST_IMPL(core_dtypes) {
  ASSERT_EQ(symm_dtype_size(SYMM_DTYPE_BF16), 2);
  ASSERT_EQ(symm_dtype_size(SYMM_DTYPE_F64), 8);
  ASSERT_EQ(symm_dtype_size(SYMM_DTYPE_U8), 1);
  ASSERT_EQ(symm_dtype_size((symm_dtype_t)99), 0);
  symm_dtype_t d;
  ASSERT_OK(symm_dtype_from_name("i32", &d));
  ASSERT_EQ(d, SYMM_DTYPE_I32);
  ASSERT_RES(symm_dtype_from_name("f128", &d), SYMM_ERR_INVALID_ARG);
  for (int i = 0; i < SYMM_DTYPE_COUNT_; i++) {
    symm_dtype_t back;
    ASSERT_OK(symm_dtype_from_name(symm_dtype_name((symm_dtype_t)i), &back));
    ASSERT_EQ(back, i);
  }
  return 0;
}

TEST_IMPL(core_settings) {
  size_t n;
  const symm_setting_desc_t *s = symm_settings_table(&n);
  ASSERT_GT(n, 10);
  for (size_t i = 0; i < n; i++) {
    ASSERT(strncmp(s[i].name, "SYMM_", 5) == 0);
    ASSERT(s[i].help && strlen(s[i].help) > 10);
  }
  setenv("SYMM_POOL_BYTES", "64M", 1);
  ASSERT_OK(symm_settings_load());
  ASSERT_EQ(symm_settings()->SYMM_POOL_BYTES, 64 << 20);
  unsetenv("SYMM_POOL_BYTES");
  ASSERT_OK(symm_settings_load());
  ASSERT_EQ(symm_settings()->SYMM_POOL_BYTES, 4LL << 30);
  ASSERT_EQ(symm_parse_size("1.5G"), -1);
  ASSERT_EQ(symm_parse_size("4KiB"), 4096);
  return 0;
}

TEST_IMPL(core_multicast_never) {
  /* symmem has no multicast path at all (check-exports.sh also checks that
   * the library names no cuMulticast entry point); the status says so and
   * names the NVLS-disabling variables that are set. */
  char why[512];
  unsetenv("NCCL_NVLS_ENABLE");
  unsetenv("TORCH_SYMM_MEM_DISABLE_MULTICAST");
  unsetenv("NVSHMEM_DISABLE_NVLS");
  symm_multicast_status(why, sizeof why);
  ASSERT_STR_CONTAINS(why, "never creates NVLink multicast");
  ASSERT(strstr(why, "is set") == NULL);
  const char *vars[][2] = {{"NCCL_NVLS_ENABLE", "0"},
                           {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
                           {"NVSHMEM_DISABLE_NVLS", "1"}};
  for (int i = 0; i < 3; i++) setenv(vars[i][0], vars[i][1], 1);
  symm_multicast_status(why, sizeof why);
  for (int i = 0; i < 3; i++) ASSERT_STR_CONTAINS(why, vars[i][0]);
  char tiny[8];
  symm_multicast_status(tiny, sizeof tiny); /* truncates, never overflows */
  ASSERT_EQ(strlen(tiny), 7);
  return 0;
}

static void clear_launcher_env(void) {
  const char *vars[] = {"SYMM_RANK", "SYMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS", "SYMM_STORE_ADDR", "MASTER_ADDR",
                        "SYMM_BACKEND", NULL};
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
}

TEST_IMPL(core_config_errors) {
  clear_launcher_env();
  symm_comm_t *comm = (symm_comm_t *)0x1;
  ASSERT_RES(symm_comm_init(NULL, NULL), SYMM_ERR_INVALID_ARG);

  symm_config_t bad = SYMM_CONFIG_INIT;
  bad.size = 8;
  ASSERT_RES(symm_comm_init(&bad, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_PTR_EQ(comm, NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_CONFIG_INIT");

  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.rank = 3;
  cfg.world_size = 2;
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "out of range");

  cfg.rank = 0;
  cfg.world_size = 2; /* two ranks but no store address anywhere */
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_STORE_ADDR");

  setenv("SYMM_BACKEND", "bogus", 1);
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "valid names");
  ASSERT_STR_CONTAINS(symm_last_error(), "native");
  unsetenv("SYMM_BACKEND");

  symm_config_t range = SYMM_CONFIG_INIT;
  range.backend = (symm_backend_t)77;
  ASSERT_RES(symm_comm_init(&range, &comm), SYMM_ERR_INVALID_ARG);

  /* A struct from a newer symmem.h, a negative timeout: refused, not
   * taken for something else. */
  symm_config_t newer = SYMM_CONFIG_INIT;
  newer.version = SYMM_CONFIG_VERSION + 1;
  ASSERT_RES(symm_comm_init(&newer, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "newer than this library's");
  symm_config_t negative = SYMM_CONFIG_INIT;
  negative.timeout_ms = -5;
  ASSERT_RES(symm_comm_init(&negative, &comm), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "timeout_ms -5 is negative");
  ASSERT_PTR_EQ(comm, NULL);
  return 0;
}

TEST_IMPL(core_unavailable_backend) {
  clear_launcher_env();
  char why[256];
  if (symm_backend_available(SYMM_BACKEND_NCCL, why, sizeof why) == SYMM_SUCCESS) {
    printf("SKIP: nccl backend usable here\n");
    return TEST_SKIP;
  }
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.backend = SYMM_BACKEND_NCCL;
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), "nccl");
  ASSERT_PTR_EQ(comm, NULL);
  return 0;
}

/* A process with no launcher environment is a world of one. */
TEST_IMPL(core_single_rank) {
  clear_launcher_env();
  symm_comm_t *comm;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_EQ(symm_comm_rank(comm), 0);
  ASSERT_EQ(symm_comm_size(comm), 1);
  ASSERT_EQ(symm_comm_local_rank(comm), 0);
  ASSERT_EQ(symm_comm_local_size(comm), 1);
  ASSERT_NE(symm_comm_backend(comm), SYMM_BACKEND_AUTO);
  ASSERT_OK(symm_comm_barrier(comm));
  void *h;
  if (symm_comm_backend(comm) == SYMM_BACKEND_HOST) {
    ASSERT_RES(symm_comm_native_handle(comm, &h), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "nccl");
  }

  symm_store_t *store = symm_comm_store(comm);
  ASSERT(store != NULL);
  ASSERT_OK(symm_store_set(store, "app/key", "value", 6));
  char buf[16];
  size_t len;
  ASSERT_OK(symm_store_get(store, "app/key", buf, sizeof buf, &len, 0));
  ASSERT_EQ(len, 6);
  ASSERT(strcmp(buf, "value") == 0);

  int64_t sizes[2] = {3, 5};
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, sizes, 2, SYMM_DTYPE_F32, &t));
  ASSERT_EQ(symm_tensor_numel(t), 15);
  ASSERT_EQ(symm_tensor_nbytes(t), 60);
  ASSERT_EQ(symm_tensor_strides(t)[0], 5);
  ASSERT_EQ(symm_tensor_strides(t)[1], 1);
  ASSERT(!symm_tensor_is_rendezvoused(t));
  symm_view_t v;
  /* This rank's own view is its local view, before a rendezvous too. */
  ASSERT_OK(symm_tensor_remote_view(t, 0, &v));
  ASSERT_PTR_EQ(v.data, symm_tensor_data(t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_tensor_rendezvous(t)); /* idempotent */
  ASSERT_OK(symm_tensor_remote_view(t, 0, &v));
  ASSERT_PTR_EQ(v.data, symm_tensor_data(t));
  ASSERT_EQ(v.strides[0], 5);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(core_alloc_bad_input) {
  clear_launcher_env();
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_tensor_t *t = (symm_tensor_t *)0x1;
  int64_t ok[1] = {4}, zero[2] = {4, 0}, neg[1] = {-3}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  int64_t huge[2] = {INT64_MAX / 2, 4};
  ASSERT_RES(symm_tensor_alloc(NULL, ok, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, NULL, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, ok, 1, SYMM_DTYPE_F32, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, zero, 2, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_PTR_EQ(t, NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "dimension 1");
  ASSERT_RES(symm_tensor_alloc(comm, neg, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, ok, 0, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, nine, 9, SYMM_DTYPE_F32, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "ndim 9");
  ASSERT_RES(symm_tensor_alloc(comm, ok, 1, (symm_dtype_t)40, &t), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_alloc(comm, huge, 2, SYMM_DTYPE_F64, &t), SYMM_ERR_INVALID_ARG);

  ASSERT_OK(symm_tensor_alloc(comm, ok, 1, SYMM_DTYPE_F32, &t));
  symm_view_t v;
  ASSERT_RES(symm_tensor_remote_view(t, 1, &v), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 out of range");
  ASSERT_RES(symm_tensor_remote_view(t, -1, &v), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_remote_view(NULL, 0, &v), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_tensor_remote_view(t, 0, NULL), SYMM_ERR_INVALID_ARG);
  void *const *ptrs;
  ASSERT_RES(symm_tensor_peer_ptrs(t, &ptrs), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_contiguous_view(t, &v), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_rendezvous(NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_validate(comm, symm_tensor_data(t), 4), SYMM_ERR_STATE);
  symm_tensor_t *found;
  ASSERT_RES(symm_tensor_lookup(NULL, &found, NULL, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_comm_barrier(NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_EQ(symm_comm_rank(NULL), -1);
  ASSERT_PTR_EQ(symm_tensor_data(NULL), NULL);
  symm_tensor_free(NULL);
  symm_comm_destroy(NULL);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(core_signal_pad_and_validate) {
  clear_launcher_env();
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *a, *b;
  ASSERT_OK(symm_comm_init(NULL, &a));
  ASSERT_OK(symm_comm_init(NULL, &b));
  int64_t n = 1000;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(a, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *pad;
  ASSERT_OK(symm_tensor_signal_pad(t, 0, &pad));
  ASSERT_GE(symm_signal_pad_bytes(), 1024);
  ASSERT((char *)pad + symm_signal_pad_bytes() <= (char *)symm_tensor_data(t));
  for (size_t i = 0; i < symm_signal_pad_bytes(); i++) ASSERT_EQ(((unsigned char *)pad)[i], 0);

  char *data = symm_tensor_data(t);
  ASSERT_OK(symm_validate(a, data, 4000));
  ASSERT_OK(symm_validate(a, data + 100, 16));
  ASSERT_RES(symm_validate(b, data, 16), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "another communicator");
  ASSERT_RES(symm_validate(a, data, 1 << 20), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "past the end of its tensor");
  /* The tensor's bytes, not the rounding behind them: 4000 bytes of i32. */
  ASSERT_RES(symm_validate(a, data + 3996, 8), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "runs 4 bytes past the end of its tensor (4000 bytes)");
  ASSERT_RES(symm_validate(a, data + 4000, 4), SYMM_ERR_NOT_FOUND);
  symm_tensor_t *in_pad = NULL;
  ASSERT_RES(symm_tensor_lookup(data + 4000, &in_pad, NULL, NULL), SYMM_ERR_NOT_FOUND);
  ASSERT_OK(symm_tensor_lookup(data + 3999, &in_pad, NULL, NULL));
  ASSERT_PTR_EQ(in_pad, t);
  int on_stack;
  ASSERT_RES(symm_validate(a, &on_stack, 4), SYMM_ERR_NOT_FOUND);
  void *heap = malloc(64);
  ASSERT_RES(symm_validate(a, heap, 4), SYMM_ERR_NOT_FOUND);
  free(heap);
  ASSERT_RES(symm_validate(a, data, 0), SYMM_ERR_INVALID_ARG);

  /* Signals written by a previous user are gone when the pool hands the
   * memory out again. */
  memset(pad, 0xab, symm_signal_pad_bytes());
  symm_tensor_free(t);
  ASSERT_RES(symm_validate(a, data, 4), SYMM_ERR_NOT_FOUND);
  ASSERT_OK(symm_tensor_alloc(a, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_PTR_EQ(symm_tensor_data(t), data); /* pooled */
  ASSERT_OK(symm_tensor_signal_pad(t, 0, &pad));
  for (size_t i = 0; i < symm_signal_pad_bytes(); i++) ASSERT_EQ(((unsigned char *)pad)[i], 0);
  size_t released = 0;
  symm_tensor_free(t);
  ASSERT_OK(symm_comm_pool_trim(a, &released));
  ASSERT_GE(released, 4000);
  symm_comm_destroy(b);
  symm_comm_destroy(a);
  return 0;
}

/* Lookups from several threads while the main thread allocates and frees. */
typedef struct {
  symm_tensor_t *stable;
  int stop; /* atomic */
  long lookups;
} lookup_arg_t;

static void *lookup_thread(void *p) {
  lookup_arg_t *a = p;
  char *base = symm_tensor_data(a->stable);
  size_t n = symm_tensor_nbytes(a->stable);
  while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
    for (size_t off = 0; off < n; off += 997) {
      symm_tensor_t *t;
      size_t o;
      int r;
      if (symm_tensor_lookup(base + off, &t, &r, &o) != SYMM_SUCCESS || t != a->stable || o != off)
        abort();
      __atomic_add_fetch(&a->lookups, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

TEST_IMPL(core_registry_threads) {
  clear_launcher_env();
  setenv("SYMM_BACKEND", "host", 1);
  setenv("SYMM_POOL_BYTES", "0", 1);
  symm_comm_t *comm;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 1 << 16;
  lookup_arg_t arg = {0};
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &arg.stable));
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, lookup_thread, &arg);
  size_t before = symm_registry_count();
  /* At least 300 rounds, and on until the readers have really run alongside
   * (on a busy machine they may not be scheduled during the first ones). */
  for (int i = 0; i < 300 || (__atomic_load_n(&arg.lookups, __ATOMIC_RELAXED) < 1000 && i < 200000);
       i++) {
    int64_t m = 4096 + (i % 300) * 64;
    symm_tensor_t *t;
    ASSERT_OK(symm_tensor_alloc(comm, &m, 1, SYMM_DTYPE_U8, &t));
    symm_tensor_t *found;
    int rank;
    size_t off;
    ASSERT_OK(symm_tensor_lookup((char *)symm_tensor_data(t) + m - 1, &found, &rank, &off));
    ASSERT_PTR_EQ(found, t);
    ASSERT_EQ(off, m - 1);
    ASSERT_EQ(rank, 0);
    symm_tensor_free(t);
    ASSERT_RES(symm_tensor_lookup((char *)symm_tensor_data(arg.stable) - 1, &found, NULL, NULL),
               SYMM_ERR_NOT_FOUND);
  }
  __atomic_store_n(&arg.stop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  ASSERT_EQ(symm_registry_count(), before);
  ASSERT_GE(arg.lookups, 1000);
  symm_tensor_free(arg.stable);
  ASSERT_EQ(symm_registry_count(), 0);
  symm_comm_destroy(comm);
  unsetenv("SYMM_POOL_BYTES");
  return 0;
}

/* SYMM_DEBUG / SYMM_DEBUG_SUBSYS / SYMM_DEBUG_FILE, read once at the first
 * log call of the process (this test runs in a process of its own). */
TEST_IMPL(core_log_file) {
  char pattern[128], path[128];
  snprintf(pattern, sizeof pattern, "/tmp/symm-log-test-%d-%%p.log", (int)getpid());
  snprintf(path, sizeof path, "/tmp/symm-log-test-%d-%d.log", (int)getpid(), (int)getpid());
  setenv("SYMM_DEBUG", "INFO", 1);
  setenv("SYMM_DEBUG_SUBSYS", "INIT,BOOTSTRAP", 1);
  setenv("SYMM_DEBUG_FILE", pattern, 1);
  SYMM_INFO(INIT, "init-line %d", 1);
  SYMM_INFO(STORE, "store-line %d", 2);
  SYMM_TRACE(INIT, "trace-line %d", 3);
  SYMM_WARN(BOOTSTRAP, "warn-line %d", 4);
  FILE *f = fopen(path, "r");
  ASSERT(f != NULL); /* %p expanded to the pid */
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  unlink(path);
  ASSERT_STR_CONTAINS(text, "symm INFO");
  ASSERT_STR_CONTAINS(text, "init-line 1");
  ASSERT_STR_CONTAINS(text, "warn-line 4");
  ASSERT(strstr(text, "store-line") == NULL); /* subsystem not selected */
  ASSERT(strstr(text, "trace-line") == NULL); /* above the level */
  return 0;
}

/* An operation's deadline is its timeout from its begin (not from the
 * first wait that asks for it), an enclosing
 * operation's where earlier, and ends with it; a wait within it keeps to
 * the earlier of its own and the operation's. */
TEST_IMPL(core_op_deadline) {
  const uint64_t start = symm_now_ns();
  const uint64_t outer = symm_op_deadline_begin(1000);
  const uint64_t begun = symm_now_ns();
  ASSERT_EQ(outer, 0);
  usleep(200000); /* a deadline taken later than begin would show */
  const uint64_t d = symm_deadline_after(60000); /* the operation's comes first */
  ASSERT_MSG(d >= start + 1000000000ull && d <= begun + 1000000000ull,
             "the operation's deadline is %lld ms after its begin, not 1000",
             (long long)(d - begun) / 1000000);
  ASSERT(symm_deadline_after(10) < d); /* a shorter wait's own */
  const uint64_t inner = symm_op_deadline_begin(60000);
  ASSERT_EQ(inner, d);
  ASSERT_EQ(symm_deadline_after(60000), d); /* the enclosing deadline holds */
  symm_op_deadline_end(inner);
  symm_op_deadline_end(outer);
  ASSERT(symm_deadline_after(60000) >= start + 60000000000ull); /* none left */
  return 0;
}

/* symm_ms_until and symm_poll_until, the one wait-for-a-socket-until-a-
 * deadline of the fd exchange and the store client. */
TEST_IMPL(core_poll_until) {
  ASSERT_EQ(symm_ms_until(symm_now_ns() - 1), 0);
  /* A deadline 10 s ahead: at most 10000 ms, and not 0 (no timed bound). */
  int ms = symm_ms_until(symm_now_ns() + 10000000000ull);
  ASSERT(ms > 0 && ms <= 10000);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* Nothing to read: the deadline, whether passed or 20 ms away. */
  ASSERT_EQ(symm_poll_until(sv[0], POLLIN, symm_now_ns() - 1), 0);
  ASSERT_EQ(symm_poll_until(sv[0], POLLIN, symm_now_ns() + 20000000ull), 0);
  /* Writable at once; readable once written, even past the deadline. */
  ASSERT_EQ(symm_poll_until(sv[0], POLLOUT, symm_now_ns() + 1000000000ull), 1);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  ASSERT_EQ(symm_poll_until(sv[0], POLLIN, symm_now_ns() - 1), 1);
  /* A hang-up counts as ready: the next read reports it. */
  char c;
  ASSERT_EQ(read(sv[0], &c, 1), 1);
  close(sv[1]);
  ASSERT_EQ(symm_poll_until(sv[0], POLLIN, symm_now_ns() + 1000000000ull), 1);
  ASSERT_EQ(read(sv[0], &c, 1), 0);
  close(sv[0]);
  return 0;
}

/* The shared-memory bootstrap's segment has no name at any time (a rank
 * that dies mid-setup can leave nothing in /dev/shm): none exists while
 * rank 0 broadcasts its outcome, and when that broadcast fails (a peer
 * gone) the segment's descriptor is closed again. */
static char shm_job[64];
static int shm_named_seen = -1; /* /dev/shm entries naming the job during the broadcast */

static int count_job_shm(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, shm_job) != NULL;
  closedir(d);
  return n;
}

static symm_result_t failing_broadcast(symm_bootstrap_t *bs, void *buf, size_t len, int root) {
  (void)bs, (void)buf, (void)len, (void)root;
  shm_named_seen = count_job_shm();
  return symm_error(SYMM_ERR_PEER_LOST, "test: the broadcast failed");
}

TEST_IMPL(core_shm_bootstrap_nameless) {
  static const symm_bootstrap_ops_t ops = {.version = 1, .name = "failing",
                                           .broadcast = failing_broadcast};
  symm_bootstrap_t store_bs = {.ops = &ops, .rank = 0, .size = 2, .timeout_ms = 1000};
  snprintf(shm_job, sizeof shm_job, "nameless-test-%d", (int)getpid());
  struct stat st;
  if (stat("/dev/shm", &st) != 0) {
    printf("SKIP: no /dev/shm to look into\n");
    return TEST_SKIP;
  }
  const int32_t pids[2] = {(int32_t)getpid(), (int32_t)getpid()};
  const int fds_before = test_count_fds();
  symm_bootstrap_t *out = NULL;
  ASSERT_RES(symm_bootstrap_shm_init(&store_bs, NULL, "symm/c7/", shm_job, 7, pids, &out),
             SYMM_ERR_PEER_LOST);
  ASSERT(out == NULL);
  ASSERT_EQ(shm_named_seen, 0);
  ASSERT_EQ(count_job_shm(), 0);
  ASSERT_EQ(test_count_fds(), fds_before);
  return 0;
}

/* A pooled allocation whose pad cannot be reset (GPU backends reset it
 * through the driver) is released, not leaked: here the host backend with
 * a failing reset_pad, on a one-rank communicator. */
static symm_result_t failing_reset_pad(symm_comm_t *comm, symm_mem_t *mem) {
  (void)comm, (void)mem;
  return symm_error(SYMM_ERR_BACKEND, "test: reset_pad failed");
}

TEST_IMPL(core_pool_reset_pad_fails) {
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  static symm_backend_ops_t ops;
  ops = *symm_test_comm_ops(comm);
  ops.reset_pad = failing_reset_pad;
  symm_test_comm_set_ops(comm, &ops);
  const size_t bytes = (size_t)16 << 20;
  int64_t n = (int64_t)bytes;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  const char *data = symm_tensor_data(t);
  symm_tensor_free(t); /* into the pool, still mapped */
  ASSERT(test_address_mapped(data) && test_address_mapped(data + bytes - 1));
  t = NULL;
  ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_BACKEND);
  ASSERT(t == NULL);
  /* Gone, not leaked: no mapping is left where its bytes were (counting
   * all mapped bytes instead was upset by what ASan maps meanwhile). */
  if (test_address_mapped(data) || test_address_mapped(data + bytes - 1))
    TEST_FAIL_("the pooled allocation stayed mapped at %p", (const void *)data);
  size_t released = 1;
  ASSERT_OK(symm_comm_pool_trim(comm, &released));
  ASSERT_EQ(released, 0);
  symm_comm_destroy(comm);
  return 0;
}

/* A lone process serves its own store on loopback with a random token of
 * its own (not an empty one that any local user could present); its own
 * store calls work. */
TEST_IMPL(core_single_rank_token) {
  clear_launcher_env();
  unsetenv("SYMM_TOKEN");
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  struct symm_store_server *server = symm_test_comm_store_server(comm);
  ASSERT(server != NULL);
  ASSERT_OK(symm_store_set(symm_comm_store(comm), "app/k", "v", 1));
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", symm_store_server_port(server));
  symm_store_t *s = NULL;
  ASSERT_RES(symm_store_connect(addr, "", -1, 2000, &s), SYMM_ERR_PERMISSION);
  ASSERT(s == NULL);
  symm_comm_destroy(comm);
  return 0;
}

/* A tensor the user did not free before symm_comm_destroy: its memory goes
 * with the communicator, every call on the handle is SYMM_ERR_STATE (no
 * crash, no use of freed memory: the sanitizer run checks), and
 * symm_tensor_free releases the handle. */
TEST_IMPL(core_tensor_after_destroy) {
  clear_launcher_env();
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = 256;
  symm_tensor_t *t, *done;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &done));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_tensor_free(done)); /* pooled: the pool's, not the user's */
  float *data = symm_tensor_data(t);
  symm_comm_destroy(comm);
  symm_view_t v;
  void *const *ptrs;
  void *pad;
  ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_STATE);
  ASSERT_STR_CONTAINS(symm_last_error(), "communicator was destroyed");
  ASSERT_RES(symm_tensor_local_view(t, &v), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_remote_view(t, 0, &v), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_peer_ptrs(t, &ptrs), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_signal_pad(t, 0, &pad), SYMM_ERR_STATE);
  ASSERT_RES(symm_tensor_contiguous_view(t, &v), SYMM_ERR_STATE);
  ASSERT_RES(symm_signal_barrier(t, 0, NULL), SYMM_ERR_STATE);
  ASSERT_PTR_EQ(symm_tensor_data(t), NULL);
  ASSERT_PTR_EQ(symm_tensor_comm(t), NULL);
  ASSERT_EQ(symm_tensor_is_rendezvoused(t), 0);
  symm_tensor_t *found;
  ASSERT_RES(symm_tensor_lookup(data, &found, NULL, NULL), SYMM_ERR_NOT_FOUND);
  ASSERT_RES(symm_tensor_free(t), SYMM_ERR_STATE);
  ASSERT_STR_CONTAINS(symm_last_error(), "destroyed first");
  return 0;
}

/* A host allocation the machine cannot back is refused at allocation
 * (before, 1 TiB succeeded and touching it would SIGBUS). */
TEST_IMPL(core_alloc_beyond_memory) {
  clear_launcher_env();
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t n = (int64_t)1 << 40; /* 1 TiB of u8 */
  symm_tensor_t *t = NULL;
  ASSERT_RES(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t), SYMM_ERR_NO_MEMORY);
  ASSERT_STR_CONTAINS(symm_last_error(), "available");
  ASSERT_PTR_EQ(t, NULL);
  /* What fits is backed: writing every page does not fault. */
  int64_t m = 8 << 20;
  ASSERT_OK(symm_tensor_alloc(comm, &m, 1, SYMM_DTYPE_U8, &t));
  memset(symm_tensor_data(t), 1, (size_t)m);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

/* symm_dlpack_capsule_destructor outside a Python process: no interpreter
 * to find, so it touches nothing (a NULL capsule neither). */
TEST_IMPL(core_dlpack_destructor_without_python) {
  unsigned char capsule[64];
  memset(capsule, 0xa5, sizeof capsule);
  symm_dlpack_capsule_destructor(NULL);
  symm_dlpack_capsule_destructor(capsule);
  for (size_t i = 0; i < sizeof capsule; i++) ASSERT_EQ(capsule[i], 0xa5);
  return 0;
}
