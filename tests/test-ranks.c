/* Multi-process behaviour on the host backend: real processes, real sockets,
 * real shared memory.  Each test forks its ranks (harness.c), which reach
 * the store served by the test process. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "symm_test_access.h"
#include "harness.h"


static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

/* A rank marks its arrival at a call under key; a peer that must come
 * late_ms after it (arrive_after) is ordered by that mark, not by a sleep
 * of its own: what the late one waits for then is only the time the test
 * needs a wait to last (past a liveness look, within a timeout). */
static void mark_arrival(symm_comm_t *comm, const char *key) {
  char v[32];
  int n = snprintf(v, sizeof v, "%llu", (unsigned long long)test_now_ms());
  ASSERT_OK(symm_store_set(symm_comm_store(comm), key, v, (size_t)n));
}

static void arrive_after(symm_comm_t *comm, const char *key, int late_ms) {
  char v[32];
  size_t len = 0;
  ASSERT_OK(symm_store_get(symm_comm_store(comm), key, v, sizeof v - 1, &len, 30000));
  v[len] = 0;
  const uint64_t at = strtoull(v, NULL, 10) + (uint64_t)late_ms;
  for (uint64_t now; (now = test_now_ms()) < at;) poll(NULL, 0, (int)(at - now));
}

static int64_t value_at(int writer, int64_t i) { return (int64_t)writer * 1000003 + i; }

/* Contiguous view of full_path_rank's tensor: [size, 3, 1001], aliasing
 * each rank's data; *out gets it. */
static void check_contiguous_view(symm_tensor_t *t, int rank, int size, int64_t *mine,
                                  int64_t numel, symm_view_t *out) {
  symm_view_t cv;
  ASSERT_OK(symm_tensor_contiguous_view(t, &cv));
  ASSERT_EQ(cv.ndim, 3);
  ASSERT_EQ(cv.sizes[0], size);
  ASSERT_EQ(cv.sizes[1], 3);
  ASSERT_EQ(cv.strides[1], 1001);
  ASSERT_GE(cv.strides[0], numel);
  ASSERT_EQ(cv.rank, -1);
  for (int r = 0; r < size; r++) {
    const int64_t *row = (const int64_t *)cv.data + r * cv.strides[0];
    int writer = (r + size - 1) % size;
    ASSERT_EQ(row[0], value_at(writer, 0));
    ASSERT_EQ(row[numel - 1], value_at(writer, numel - 1));
  }
  /* The contiguous view aliases the same memory: a write shows up in place. */
  ((int64_t *)cv.data)[rank * cv.strides[0] + 7] = -7;
  ASSERT_EQ(mine[7], -7);
  symm_view_t again;
  ASSERT_OK(symm_tensor_contiguous_view(t, &again));
  ASSERT_PTR_EQ(again.data, cv.data);
  *out = cv;
}

/* ---- the full path: alloc, rendezvous, remote write/read, contiguous view,
 * ---- interior lookups, validate. */
static int full_path_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  ASSERT_EQ(symm_comm_rank(comm), rank);
  ASSERT_EQ(symm_comm_size(comm), size);
  ASSERT_EQ(symm_comm_local_size(comm), size); /* same host: computed */
  ASSERT_EQ(symm_comm_local_rank(comm), rank);
  const char *want = getenv("SYMM_TEST_BACKEND");
  ASSERT(strcmp(symm_backend_name(symm_comm_backend(comm)), want && *want ? want : "host") == 0);

  /* 3 x 1001 i64: not a multiple of the page, so the contiguous view's
   * rank stride is padded. */
  int64_t sizes[2] = {3, 1001};
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, sizes, 2, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT(symm_tensor_is_rendezvoused(t));
  int64_t numel = 3 * 1001;

  /* Write into the right neighbour through the remote view. */
  int right = (rank + 1) % size;
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, right, &v));
  ASSERT_EQ(v.rank, right);
  ASSERT_EQ(v.ndim, 2);
  ASSERT_EQ(v.strides[0], 1001);
  ASSERT_EQ(v.device, symm_comm_device(comm)); /* -1 on the host backend */
  for (int64_t i = 0; i < numel; i++) ((int64_t *)v.data)[i] = value_at(rank, i);
  ASSERT_OK(symm_comm_barrier(comm));
  int left = (rank + size - 1) % size;
  const int64_t *mine = symm_tensor_data(t);
  for (int64_t i = 0; i < numel; i++) ASSERT_EQ(mine[i], value_at(left, i));

  /* Read every peer directly through the pointer array. */
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_PTR_EQ(ptrs[rank], mine);
  for (int r = 0; r < size; r++) {
    int writer = (r + size - 1) % size;
    ASSERT_EQ(((int64_t *)ptrs[r])[numel - 1], value_at(writer, numel - 1));
  }

  /* Contiguous view, or its refusal naming the backends that have one. */
  const bool contiguous = symm_comm_caps(comm)->contiguous_view;
  symm_view_t cv;
  if (contiguous) {
    check_contiguous_view(t, rank, size, (int64_t *)mine, numel, &cv);
  } else {
    ASSERT_RES(symm_tensor_contiguous_view(t, &cv), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "native or host");
  }

  /* Interior pointers of local, peer and contiguous mappings. */
  symm_tensor_t *found;
  int frank;
  size_t off;
  ASSERT_OK(symm_tensor_lookup((const char *)mine + 808, &found, &frank, &off));
  ASSERT_PTR_EQ(found, t);
  ASSERT_EQ(frank, rank);
  ASSERT_EQ(off, 808);
  ASSERT_OK(symm_tensor_lookup((char *)v.data + 8 * 1500 + 3, &found, &frank, &off));
  ASSERT_PTR_EQ(found, t);
  ASSERT_EQ(frank, right);
  ASSERT_EQ(off, 8 * 1500 + 3);
  if (contiguous) {
    ASSERT_OK(symm_tensor_lookup((char *)cv.data + 5, &found, &frank, &off));
    ASSERT_PTR_EQ(found, t);
    ASSERT_EQ(frank, -1);
    ASSERT_EQ(off, 5);
    /* From the start of the view, as the header says, in any rank's part. */
    const size_t at = (size_t)(size - 1) * (size_t)cv.strides[0] * 8 + 8 * 1001 + 3;
    ASSERT_OK(symm_tensor_lookup((char *)cv.data + at, &found, &frank, &off));
    ASSERT_EQ(frank, -1);
    ASSERT_EQ(off, at);
  }

  /* Validate: whole tensor, a slice of a peer, past the end. */
  ASSERT_OK(symm_validate(comm, mine, (size_t)numel * 8));
  ASSERT_OK(symm_validate(comm, (char *)v.data + 64, 64));
  /* Past any backend's rounding (native: 2 MiB granules). */
  ASSERT_RES(symm_validate(comm, mine, (size_t)numel * 8 + (64 << 20)), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_validate(comm, mine, (size_t)numel * 8 + 1), SYMM_ERR_INVALID_ARG);

  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  ASSERT_RES(symm_tensor_lookup(mine, &found, NULL, NULL), SYMM_ERR_NOT_FOUND);
  ASSERT_RES(symm_tensor_lookup(v.data, &found, NULL, NULL), SYMM_ERR_NOT_FOUND);
  if (contiguous) ASSERT_RES(symm_tensor_lookup(cv.data, &found, NULL, NULL), SYMM_ERR_NOT_FOUND);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_full_path_2) { ASSERT_EQ(test_run_ranks(2, full_path_rank, NULL), 0); return 0; }
TEST_IMPL(ranks_full_path_3) { ASSERT_EQ(test_run_ranks(3, full_path_rank, NULL), 0); return 0; }
TEST_IMPL(ranks_full_path_4) { ASSERT_EQ(test_run_ranks(4, full_path_rank, NULL), 0); return 0; }
TEST_IMPL(ranks_full_path_8) { ASSERT_EQ(test_run_ranks(8, full_path_rank, NULL), 0); return 0; }

/* ---- mismatches ----------------------------------------------------- */
static int mismatch_rank(int rank, int size, void *arg) {
  const char *kind = arg;
  symm_comm_t *comm = init_comm();
  int64_t n = 1024;
  symm_dtype_t dt = SYMM_DTYPE_F32;
  if (rank == size - 1) {
    if (strcmp(kind, "size") == 0) n = 2048;
    else dt = SYMM_DTYPE_I32;
  }
  symm_tensor_t *t;
  /* A backend that allocates collectively compares the calls there. */
  const symm_backend_caps_t *caps = symm_comm_caps(comm);
  if (caps->collective_alloc || caps->registers) {
    ASSERT_RES(symm_tensor_alloc(comm, &n, 1, dt, &t), SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank");
    goto usable;
  }
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, dt, &t));
  size_t registered = symm_registry_count();
  ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank");
  /* Nothing mapped: no new registry entries, no remote view. */
  ASSERT_EQ(symm_registry_count(), registered);
  ASSERT(!symm_tensor_is_rendezvoused(t));
  symm_view_t v;
  ASSERT_RES(symm_tensor_remote_view(t, (rank + 1) % size, &v), SYMM_ERR_STATE);
  symm_tensor_free(t);
usable:
  /* The communicator stays usable. */
  ASSERT_OK(symm_comm_barrier(comm));
  int64_t m = 64;
  ASSERT_OK(symm_tensor_alloc(comm, &m, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_mismatch_size) {
  ASSERT_EQ(test_run_ranks(3, mismatch_rank, "size"), 0);
  return 0;
}
TEST_IMPL(ranks_mismatch_dtype) {
  ASSERT_EQ(test_run_ranks(2, mismatch_rank, "dtype"), 0);
  return 0;
}

/* Ranks calling different collectives: barrier vs rendezvous. */
static int order_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  int64_t n = 16;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  if (rank == 0) ASSERT_RES(symm_comm_barrier(comm), SYMM_ERR_MISMATCH);
  else ASSERT_RES(symm_tensor_rendezvous(t), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "barrier");
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_mismatch_order) {
  ASSERT_EQ(test_run_ranks(2, order_rank, NULL), 0);
  return 0;
}

/* ---- a rank killed while the others wait ----------------------------- */
typedef struct {
  const char *where; /* "rendezvous" or "barrier" */
  int timeout_ms;
} kill_arg_t;

static int killed_rank(int rank, int size, void *arg) {
  kill_arg_t *ka = arg;
  symm_comm_t *comm = init_comm();
  int64_t n = 4096;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  if (rank == 1) {
    test_rank_ready();
    for (;;) pause(); /* killed by the harness */
  }
  uint64_t start = test_now_ms();
  symm_result_t res = strcmp(ka->where, "barrier") == 0 ? symm_comm_barrier(comm)
                                                         : symm_tensor_rendezvous(t);
  uint64_t took = test_now_ms() - start;
  /* Lost, seen from its pid or the store, well before the timeout: a
   * timeout would mean the death went unnoticed. */
  if (res != SYMM_ERR_PEER_LOST)
    TEST_FAIL_("rank %d: %s returned %s (%s)", rank, ka->where, symm_strerror(res),
               symm_last_error());
  ASSERT_LT(took, (uint64_t)ka->timeout_ms / 2);
  printf("rank %d: %s -> %s after %llu ms: %s\n", rank, ka->where, symm_strerror(res),
         (unsigned long long)took, symm_last_error());
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

static int count_job_sockets(const char *job) {
  FILE *f = fopen("/proc/net/unix", "r");
  if (!f) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, job)) n++;
  fclose(f);
  return n;
}

/* Rank 1 is killed `where`; NULL backend: the harness default, so that the
 * conformance run (SYMM_TEST_BACKEND) covers other backends too. */
static void run_kill_case(const char *where, int n, test_rank_fn fn) {
  kill_arg_t ka = {.where = where, .timeout_ms = 20000};
  int status[8];
  test_job_opts_t o = {.timeout_ms = 60000, .exit_status = status,
                       .store_timeout_ms = ka.timeout_ms,
                       .kill_rank = 1, .kill_after_ms = 300};
  int bad = test_run_ranks_opts(n, fn, &ka, &o);
  ASSERT_EQ(bad, 1); /* only the killed rank */
  ASSERT(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  /* Every rank is reaped by the harness; nothing of the job listens any more. */
  char pattern[64];
  snprintf(pattern, sizeof pattern, "symmem-t%d-", (int)getpid());
  ASSERT_EQ(count_job_sockets(pattern), 0);
}

TEST_IMPL(ranks_killed_in_rendezvous) {
  run_kill_case("rendezvous", 3, killed_rank);
  return 0;
}
TEST_IMPL(ranks_killed_in_barrier) {
  run_kill_case("barrier", 4, killed_rank);
  return 0;
}

/* ---- pool ------------------------------------------------------------ */
static int pool_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  int64_t n = 10000;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  void *peer_before = ptrs[(rank + 1) % size];
  void *mine_before = symm_tensor_data(t);
  symm_tensor_free(t);

  /* Same rounded size, other shape: a pool hit with the peer mapping kept. */
  int64_t sizes[2] = {100, 100};
  ASSERT_OK(symm_tensor_alloc(comm, sizes, 2, SYMM_DTYPE_F32, &t));
  ASSERT_PTR_EQ(symm_tensor_data(t), mine_before);
  size_t maps_before = test_mapped_bytes();
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_EQ(test_mapped_bytes(), maps_before); /* no new mapping */
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  ASSERT_PTR_EQ(ptrs[(rank + 1) % size], peer_before);
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, (rank + 1) % size, &v));
  ((float *)v.data)[0] = (float)rank;
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_EQ((int)((float *)symm_tensor_data(t))[0], (rank + size - 1) % size);
  symm_tensor_free(t);

  /* Rank 0 empties its pool: it allocates fresh memory while the others
   * reuse theirs, and everybody must still see everybody.  Where free is
   * collective the trim is too: every rank trims. */
  const symm_backend_caps_t *caps = symm_comm_caps(comm);
  if (rank == 0 || caps->collective_free) {
    size_t released = 0;
    ASSERT_OK(symm_comm_pool_trim(comm, &released));
    ASSERT_GT(released, 0);
  }
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  /* A collective allocation reuses a pooled one only where every rank
   * would: here none does. */
  if (rank != 0 && !caps->collective_alloc && !caps->registers)
    ASSERT_PTR_EQ(symm_tensor_data(t), mine_before);
  ASSERT_OK(symm_tensor_rendezvous(t));
  for (int r = 0; r < size; r++) {
    ASSERT_OK(symm_tensor_remote_view(t, r, &v));
    ((int32_t *)v.data)[rank] = 100 + rank;
  }
  ASSERT_OK(symm_comm_barrier(comm));
  for (int r = 0; r < size; r++) ASSERT_EQ(((int32_t *)symm_tensor_data(t))[r], 100 + r);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_pool_reuse) {
  ASSERT_EQ(test_run_ranks(3, pool_rank, NULL), 0);
  return 0;
}

/* ---- fork: the child keeps none of the library's sockets ----------------
 * (a child holding the fd server's listener or the store connection would
 * hide the rank's death from its peers). */
static int count_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len > 0 && strncmp(target, "socket:", 7) == 0) n++;
  }
  if (d) closedir(d);
  return n;
}

static int fork_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  int64_t n = 4096;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t)); /* fd-exchange connections now exist */
  int before = count_sockets();
  ASSERT_GT(before, 0);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    int left = count_sockets();
    ssize_t w = write(pipefd[1], &left, sizeof left);
    _exit(w == (ssize_t)sizeof left ? 0 : 1);
  }
  int left = -1;
  ASSERT_EQ((int)read(pipefd[0], &left, sizeof left), (int)sizeof left);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(pipefd[0]);
  close(pipefd[1]);
  printf("rank %d: %d sockets, %d in a forked child\n", rank, before, left);
  ASSERT_EQ(left, 0);
  ASSERT_EQ(count_sockets(), before); /* the parent's are untouched */
  /* And the parent's communicator still works. */
  symm_tensor_t *u;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &u));
  ASSERT_OK(symm_tensor_rendezvous(u));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(u);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_fork_drops_sockets) {
  ASSERT_EQ(test_run_ranks(3, fork_rank, NULL), 0);
  return 0;
}

/* ---- a full pool: frees beyond SYMM_POOL_BYTES release their memory ----
 * Host backend only (page granularity: a 1 MiB tensor takes 1 MiB and a
 * page); not labelled conformance, GPU granularities differ. */
static int pool_limit_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  setenv("SYMM_POOL_BYTES", "3584K", 1); /* room for three 1 MiB tensors, not four */
  symm_comm_t *comm = init_comm();
  enum { N = 5 };
  symm_tensor_t *t[N];
  void *data[N];
  for (int i = 0; i < N; i++) {
    int64_t n = 1 << 20;
    ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t[i]));
    ASSERT_OK(symm_tensor_rendezvous(t[i]));
    data[i] = symm_tensor_data(t[i]);
  }
  size_t mapped_all = test_mapped_bytes();
  for (int i = 0; i < N; i++) symm_tensor_free(t[i]);
  /* Two frees found the pool full: their memory (and peer mappings) went. */
  ASSERT_LT(test_mapped_bytes(), mapped_all);
  /* The three pooled ones come back, the most recently freed first... */
  int64_t n = 1 << 20;
  symm_tensor_t *again[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &again[i]));
    ASSERT_PTR_EQ(symm_tensor_data(again[i]), data[2 - i]);
  }
  for (int i = 0; i < 3; i++) symm_tensor_free(again[i]);
  /* ... and a trim releases exactly them: three allocations, under the limit. */
  size_t released = 0;
  ASSERT_OK(symm_comm_pool_trim(comm, &released));
  ASSERT_GT(released, (size_t)3 << 20);
  ASSERT_LE(released, (size_t)3584 << 10);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(pool_limit) {
  ASSERT_EQ(test_run_ranks(2, pool_limit_rank, NULL), 0);
  return 0;
}

/* ---- 10,000 alloc -> rendezvous -> free cycles, no growth ------------- */
static int cycles_rank(int rank, int size, void *arg) {
  const char *pool = arg;
  setenv("SYMM_POOL_BYTES", pool, 1);
  symm_comm_t *comm = init_comm();
  int fds0 = 0;
  size_t mapped0 = 0;
  for (int i = 0; i < 10000; i++) {
    if (i == 50) {
      fds0 = test_count_fds();
      mapped0 = test_mapped_bytes();
    }
    int64_t n = 1024 + (i % 4) * 4096; /* four different sizes */
    symm_tensor_t *t;
    ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
    ASSERT_OK(symm_tensor_rendezvous(t));
    ((uint8_t *)symm_tensor_data(t))[0] = (uint8_t)i;
    symm_tensor_free(t);
  }
  /* Count while every peer is still connected: one that already left would
   * have closed its connections to us. */
  ASSERT_OK(symm_comm_barrier(comm));
  int fds1 = test_count_fds();
  size_t mapped1 = test_mapped_bytes();
  ASSERT_OK(symm_comm_barrier(comm));
  printf("rank %d pool=%s: fds %d -> %d, mapped %zu -> %zu\n", rank, pool, fds0, fds1, mapped0,
         mapped1);
  ASSERT_EQ(fds1, fds0);
  ASSERT_LE(mapped1, mapped0 + (256 << 10)); /* malloc arenas may settle a little */
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_cycles_pool) {
  ASSERT_EQ(test_run_ranks(2, cycles_rank, "1G"), 0);
  return 0;
}
TEST_IMPL(ranks_cycles_nopool) {
  ASSERT_EQ(test_run_ranks(2, cycles_rank, "0"), 0);
  return 0;
}

/* ---- launcher environments ------------------------------------------- */
static int env_rank(int rank, int size, void *arg) {
  const char *style = arg;
  const char *addr = getenv("SYMM_STORE_ADDR");
  if (strcmp(style, "torchrun") == 0) {
    const char *colon = strrchr(addr, ':');
    char port[16];
    snprintf(port, sizeof port, "%s", colon + 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("SYMM_STORE_PORT", port, 1);
    unsetenv("SYMM_STORE_ADDR");
    test_setenv_int("RANK", rank);
    test_setenv_int("LOCAL_RANK", rank);
    test_setenv_int("WORLD_SIZE", size);
  } else { /* Open MPI */
    test_setenv_int("OMPI_COMM_WORLD_RANK", rank);
    test_setenv_int("OMPI_COMM_WORLD_SIZE", size);
  }
  unsetenv("SYMM_RANK");
  unsetenv("SYMM_WORLD_SIZE");
  symm_comm_t *comm = init_comm();
  ASSERT_EQ(symm_comm_rank(comm), rank);
  ASSERT_EQ(symm_comm_size(comm), size);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_env_torchrun) {
  ASSERT_EQ(test_run_ranks(3, env_rank, "torchrun"), 0);
  return 0;
}
TEST_IMPL(ranks_env_openmpi) {
  ASSERT_EQ(test_run_ranks(2, env_rank, "ompi"), 0);
  return 0;
}

/* ---- rank 0 serves the store itself (no symmem-run) ------------------- */
static int self_served_rank(int rank, int size, void *arg) {
  test_rank_serves_store(*(int *)arg);
  symm_comm_t *comm = init_comm();
  int64_t n = 100;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_tensor_free(t);
  symm_comm_destroy(comm); /* rank 0 waits for the others before stopping the store */
  return 0;
}

TEST_IMPL(ranks_rank0_serves_store) {
  int port = test_free_port();
  ASSERT_EQ(test_run_ranks(4, self_served_rank, &port), 0);
  return 0;
}

/* Communicators re-created at once on rank 0's address.  The others
 * destroy the first and create the second while rank 0 is still in its
 * destroy (which waits for their connections before it stops the store):
 * rank 0's store serves them on, and its second communicator takes it over.
 * A third lives beside the second on the same address.  Before, rank 0
 * waited for the second's connections too, then stopped the store under
 * them (SYMM_ERR_PEER_LOST). */
static int recreated_rank(int rank, int size, void *arg) {
  (void)size;
  test_rank_serves_store(*(int *)arg);
  setenv("SYMM_TIMEOUT_MS", "5000", 1);
  symm_comm_t *first = init_comm();
  ASSERT_OK(symm_comm_barrier(first));
  if (rank == 0 && !symm_comm_caps(first)->collective_free) {
    /* The others get to the next one first: their first exchange there
     * (their settings, under the second's prefix) has begun.  Where freeing
     * is collective (nvshmem) their destroy waits for rank 0's: no order. */
    const char *next[] = {"symm/c1/settings/1", "symm/c1/settings/2"};
    ASSERT_OK(symm_store_wait(symm_comm_store(first), next, 2, 20000));
  }
  symm_comm_destroy(first);
  symm_comm_t *second = init_comm();
  ASSERT_OK(symm_comm_barrier(second));
  symm_comm_t *third = init_comm();
  ASSERT_OK(symm_comm_barrier(third));
  ASSERT_OK(symm_comm_barrier(second));
  symm_comm_destroy(third);
  ASSERT_OK(symm_comm_barrier(second));
  symm_comm_destroy(second);
  /* And once more after the store stopped: a new one on the same port. */
  symm_comm_t *fourth = init_comm();
  ASSERT_OK(symm_comm_barrier(fourth));
  symm_comm_destroy(fourth);
  return 0;
}

TEST_IMPL(ranks_rank0_store_recreated) {
  int port = test_free_port();
  ASSERT_EQ(test_run_ranks(3, recreated_rank, &port), 0);
  return 0;
}

/* ---- a rank that dies before it joins the next communicator on rank 0's
 * ---- store, which serves several of them at once: the others' init of
 * ---- that communicator fails with PEER_LOST naming it, long before the
 * ---- timeout.  Its process is gone while it holds the first communicator
 * ---- (its connection there closes without BYE), or after it destroyed the
 * ---- first one (it has no connection left: only its pid says). */
enum { NEXT_COMM_TIMEOUT_MS = 20000 };

typedef struct {
  int port;
  bool destroy_first; /* the dying rank destroys the first communicator first */
} next_comm_arg_t;

static int dies_before_next_rank(int rank, int size, void *arg) {
  (void)size;
  const next_comm_arg_t *a = arg;
  test_rank_serves_store(a->port);
  symm_comm_t *first = init_comm();
  ASSERT_OK(symm_comm_barrier(first));
  if (rank == 2) {
    /* Where freeing is collective (nvshmem) destroy waits for the others:
     * the rank dies holding the communicator there. */
    if (a->destroy_first && !symm_comm_caps(first)->collective_free) symm_comm_destroy(first);
    raise(SIGKILL);
  }
  symm_comm_t *second = NULL;
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &second);
  uint64_t took = test_now_ms() - t0;
  printf("rank %d: second init %s after %llu ms: %s\n", rank, symm_strerror(res),
         (unsigned long long)took, symm_last_error());
  ASSERT_EQ(res, SYMM_ERR_PEER_LOST);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2");
  ASSERT(second == NULL);
  ASSERT_LT(took, NEXT_COMM_TIMEOUT_MS / 4);
  symm_comm_destroy(first);
  return 0;
}

static void run_dies_before_next(bool destroy_first) {
  next_comm_arg_t a = {.port = test_free_port(), .destroy_first = destroy_first};
  int status[3];
  test_job_opts_t o = {.timeout_ms = 60000, .exit_status = status,
                       .store_timeout_ms = NEXT_COMM_TIMEOUT_MS,
                       .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(3, dies_before_next_rank, &a, &o), 1); /* rank 2 only */
  ASSERT(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL);
}

TEST_IMPL(ranks_dies_before_next_comm) {
  run_dies_before_next(false);
  return 0;
}
TEST_IMPL(ranks_dies_after_destroy_before_next_comm) {
  run_dies_before_next(true);
  return 0;
}

/* ---- the store through the communicator ------------------------------ */
static int store_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  symm_store_t *s = symm_comm_store(comm);
  int64_t v;
  ASSERT_OK(symm_store_add(s, "app/counter", 1, &v));
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_store_add(s, "app/counter", 0, &v));
  ASSERT_EQ(v, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_store_counter) {
  ASSERT_EQ(test_run_ranks(4, store_rank, NULL), 0);
  return 0;
}

/* ---- the bootstrap's two transports ----------------------------------- */
/* The same jobs with the store as the only transport (SYMM_BOOTSTRAP_SHM=0),
 * which is what ranks on several hosts use. */
static int store_only_rank(int rank, int size, void *arg) {
  setenv("SYMM_BOOTSTRAP_SHM", "0", 1);
  return ((test_rank_fn)arg)(rank, size, NULL);
}

TEST_IMPL(ranks_store_bootstrap_full_path) {
  ASSERT_EQ(test_run_ranks(3, store_only_rank, (void *)full_path_rank), 0);
  return 0;
}

TEST_IMPL(ranks_store_bootstrap_mismatch) {
  ASSERT_EQ(test_run_ranks(2, store_only_rank, (void *)order_rank), 0);
  return 0;
}

static int store_only_killed_rank(int rank, int size, void *arg) {
  setenv("SYMM_BOOTSTRAP_SHM", "0", 1);
  return killed_rank(rank, size, arg);
}

TEST_IMPL(ranks_store_bootstrap_killed) {
  run_kill_case("barrier", 3, store_only_killed_rank);
  return 0;
}

/* Contributions of every size cross the shared-memory bootstrap: small ones
 * through the segment, large ones through the store; mixed in one round. */
static int big_gather_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  symm_bootstrap_t *bs = symm_test_comm_bootstrap(comm);
  ASSERT(strcmp(bs->ops->name, "shm") == 0);
  size_t lens[] = {0, 1, 4096, 16384, 16385, 200000, 3};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    for (int round = 0; round < 3; round++) { /* reuse both buffers, delete old keys */
      size_t len = lens[k] + (size_t)rank * (round == 2 && lens[k] > 100); /* round 2: v-sizes */
      unsigned char *mine = malloc(len + 1);
      for (size_t i = 0; i < len; i++) mine[i] = (unsigned char)(rank * 31 + i + round);
      void *values[16];
      size_t got[16];
      ASSERT_OK(bs->ops->allgatherv(bs, mine, len, values, got));
      for (int r = 0; r < size; r++) {
        size_t want = lens[k] + (size_t)r * (round == 2 && lens[k] > 100);
        ASSERT_EQ(got[r], want);
        for (size_t i = 0; i < want; i += 97)
          ASSERT_EQ(((unsigned char *)values[r])[i], (unsigned char)(r * 31 + i + round));
        free(values[r]);
      }
      free(mine);
    }
  }
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_shm_bootstrap_sizes) {
  ASSERT_EQ(test_run_ranks(3, big_gather_rank, NULL), 0);
  /* The segment's name is gone as soon as all ranks mapped it. */
  char out[4096];
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls /dev/shm | grep -c 'symmem-t%d-' || true", (int)getpid());
  test_run_command(cmd, out, sizeof out);
  ASSERT_EQ(atoi(out), 0);
  return 0;
}

/* ---- ranks in different PID namespaces (containers that share the host
 * ---- name and IPC but not PIDs): a peer's pid means nothing here, so it
 * ---- must not be watched, or a wait longer than one liveness look (20 ms)
 * ---- reports a live peer as lost. */

typedef struct {
  int rank, size;
} pidns_rank_arg_t;

static int pidns_body(void *arg) {
  const pidns_rank_arg_t *a = arg;
  int rank = a->rank, size = a->size;
  symm_comm_t *comm = init_comm();
  if (rank == 1) ASSERT_EQ(getpid(), 1); /* its pid names another process, or none, to rank 0 */
  for (int round = 0; round < 2; round++) {
    /* Each rank in turn arrives late, well past a liveness look (20 ms)
     * after the other. */
    char key[64];
    snprintf(key, sizeof key, "test/pidns/%d/reduce", round);
    if (rank == round) arrive_after(comm, key, 300);
    else mark_arrival(comm, key);
    float x[4] = {(float)rank, 1, 2, 3};
    ASSERT_OK(symm_all_reduce(comm, x, x, 4, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
    ASSERT_EQ((int)x[0], size * (size - 1) / 2);
    ASSERT_EQ((int)x[3], 3 * size);
    snprintf(key, sizeof key, "test/pidns/%d/barrier", round);
    if (rank == round) arrive_after(comm, key, 300);
    else mark_arrival(comm, key);
    ASSERT_OK(symm_comm_barrier(comm));
  }
  symm_comm_destroy(comm);
  return 0;
}

static int pidns_rank(int rank, int size, void *arg) {
  (void)arg;
  pidns_rank_arg_t a = {.rank = rank, .size = size};
  return rank == 1 ? test_run_in_pid_namespace(pidns_body, &a) : pidns_body(&a);
}

TEST_IMPL(pidns_peers_not_lost) {
  if (test_pid_namespace_skip()) return TEST_SKIP;
  ASSERT_EQ(test_run_ranks(2, pidns_rank, NULL), 0);
  return 0;
}

/* ---- one deadline per bootstrap collective: rank 0 waits for rank 1,
 * ---- which comes late but within the timeout, then for rank 2, which
 * ---- comes after the timeout counted from rank 0's arrival.  Rank 0 times
 * ---- out then, not a whole timeout after rank 1 came. */
enum { DEADLINE_TIMEOUT_MS = 1500 };

static int one_deadline_rank(int rank, int size, void *arg) {
  (void)arg, (void)size;
  symm_comm_t *comm = init_comm();
  /* The barrier goes through shared memory. */
  ASSERT(symm_test_comm_store_bootstrap(comm) != NULL);
  ASSERT_OK(symm_comm_barrier(comm));
  /* Rank 1 comes 900 ms after rank 0 (within its 1500 ms timeout). */
  if (rank == 0) mark_arrival(comm, "test/deadline/rank0");
  if (rank == 1) arrive_after(comm, "test/deadline/rank0", 900);
  if (rank == 2) {
    /* Comes only once rank 0 has given up (it says so in the store), so
     * that no scheduling delay can make it early. */
    test_store_await(symm_comm_store(comm), "test/deadline/gave_up");
  }
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_barrier(comm);
  uint64_t took = test_now_ms() - t0;
  if (rank == 0) {
    ASSERT_EQ(res, SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 2");
    ASSERT_LT(took, DEADLINE_TIMEOUT_MS + 500);
    ASSERT_OK(symm_store_set(symm_comm_store(comm), "test/deadline/gave_up", "1", 1));
  } else {
    /* A round that rank 0 gave up fails on every rank (symmem.h,
     * Timeouts): rank 2 came late, and rank 1 waited for it in vain. */
    ASSERT_EQ(res, SYMM_ERR_TIMEOUT);
    if (rank == 2) ASSERT_STR_CONTAINS(symm_last_error(), "came late");
  }
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(shm_bootstrap_one_deadline) {
  test_job_opts_t o = {.timeout_ms = 30000, .backend = "host",
                       .store_timeout_ms = DEADLINE_TIMEOUT_MS,
                       .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_opts(3, one_deadline_rank, NULL, &o), 0);
  return 0;
}

/* ---- the allocator for memory managers (symm_mempool_*): blocks of the
 * ---- communicator set, found by lookup from interior pointers,
 * ---- rendezvoused and written across ranks, given back by free; what
 * ---- it refuses returns NULL with the reason. */
static int mempool_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  const int dev = symm_comm_device(comm); /* -1: the host's memory */
  ASSERT(symm_mempool_alloc(4096, dev, NULL) == NULL); /* no communicator yet */
  ASSERT_STR_CONTAINS(symm_last_error(), "symm_mempool_set_comm");
  const symm_backend_caps_t *caps = symm_comm_caps(comm);
  if (caps->collective_alloc || caps->registers) {
    ASSERT_RES(symm_mempool_set_comm(comm), SYMM_ERR_UNSUPPORTED);
    ASSERT_STR_CONTAINS(symm_last_error(), "allocates collectively");
    symm_comm_destroy(comm);
    return 0;
  }
  ASSERT_OK(symm_mempool_set_comm(comm));
  ASSERT(symm_mempool_alloc(0, dev, NULL) == NULL);
  ASSERT(symm_mempool_alloc(4096, dev + 1, NULL) == NULL);
  char want[32];
  snprintf(want, sizeof want, "device %d", dev + 1);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  const int64_t sizes[] = {4096, 100000, 3};
  for (int k = 0; k < 3; k++) {
    char *p = symm_mempool_alloc(sizes[k], dev, NULL);
    ASSERT(p != NULL);
    symm_tensor_t *t = NULL;
    int frank = -2;
    size_t off = 1;
    ASSERT_OK(symm_tensor_lookup(p + sizes[k] - 1, &t, &frank, &off));
    ASSERT_EQ(frank, rank);
    ASSERT_EQ(off, (size_t)sizes[k] - 1);
    ASSERT_EQ(symm_tensor_nbytes(t), (size_t)sizes[k]);
    ASSERT_OK(symm_tensor_rendezvous(t));
    void *const *ptrs = NULL;
    ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
    memset(ptrs[(rank + 1) % size], 'a' + rank, (size_t)sizes[k]);
    ASSERT_OK(symm_comm_barrier(comm));
    ASSERT_EQ(p[0], 'a' + (rank + size - 1) % size);
    ASSERT_EQ(p[sizes[k] - 1], 'a' + (rank + size - 1) % size);
    ASSERT_OK(symm_comm_barrier(comm));
    symm_mempool_free(p + 1, sizes[k], dev, NULL); /* not a block's start: left alone */
    ASSERT_OK(symm_tensor_lookup(p, &t, NULL, NULL));
    symm_mempool_free(p, sizes[k], dev, NULL);
    ASSERT_RES(symm_tensor_lookup(p, &t, NULL, NULL), SYMM_ERR_NOT_FOUND);
  }
  /* A tensor of the user's own is no block: free leaves it. */
  int64_t n = 64;
  symm_tensor_t *own = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &own));
  symm_mempool_free(symm_tensor_data(own), 64, dev, NULL);
  symm_tensor_t *found = NULL;
  ASSERT_OK(symm_tensor_lookup(symm_tensor_data(own), &found, NULL, NULL));
  ASSERT_PTR_EQ(found, own);
  ASSERT_OK(symm_tensor_free(own));
  symm_comm_destroy(comm); /* unsets the allocator's communicator */
  ASSERT(symm_mempool_alloc(4096, dev, NULL) == NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "no communicator");
  return 0;
}

TEST_IMPL(ranks_mempool) {
  ASSERT_EQ(test_run_ranks(3, mempool_rank, NULL), 0);
  return 0;
}

/* ---- a communicator's own signal-pad size (symm_config_t.signal_pad_bytes,
 * ---- PyTorch's set_signal_pad_size): every tensor's pad has it, in front
 * ---- of the data, reachable across ranks to its last word, zeroed again
 * ---- when the pool hands the allocation out anew; more channels; ranks
 * ---- that disagree, or a size that is no multiple of 4096, are refused. */
static int pad_size_rank(int rank, int size, void *arg) {
  const size_t pad_bytes = *(const size_t *)arg;
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.signal_pad_bytes = pad_bytes;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(&cfg, &comm));
  ASSERT_EQ(symm_comm_signal_pad_bytes(comm), pad_bytes);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int round = 0; round < 2; round++) {
    int64_t n = 1000;
    symm_tensor_t *t = NULL;
    ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
    ASSERT_OK(symm_tensor_rendezvous(t));
    ASSERT_EQ(symm_signal_channels(t), (int)(pad_bytes / 4 / (size_t)size));
    void *mine = NULL, *theirs = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, rank, &mine));
    ASSERT_OK(symm_tensor_signal_pad(t, right, &theirs));
    /* The pad lies wholly before the data, and starts zeroed (also the
     * second round's, which comes from the pool with the last word set). */
    ASSERT((char *)symm_tensor_data(t) - (char *)mine >= (ptrdiff_t)pad_bytes);
    volatile uint32_t *last = (volatile uint32_t *)mine + pad_bytes / 4 - 1;
    ASSERT_EQ(*last, 0);
    ASSERT_OK(symm_comm_barrier(comm));
    ((volatile uint32_t *)theirs)[pad_bytes / 4 - 1] = 100u + (unsigned)rank;
    ASSERT_OK(symm_comm_barrier(comm));
    ASSERT_EQ(*last, 100u + (unsigned)left);
    ASSERT_OK(symm_comm_barrier(comm));
    ASSERT_OK(symm_tensor_free(t));
  }
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_signal_pad_size) {
  size_t pad_bytes = 16384;
  ASSERT_EQ(test_run_ranks(3, pad_size_rank, &pad_bytes), 0);
  pad_bytes = 1 << 20;
  ASSERT_EQ(test_run_ranks(2, pad_size_rank, &pad_bytes), 0);
  return 0;
}

static int pad_size_refused_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_config_t cfg = SYMM_CONFIG_INIT;
  symm_comm_t *comm = NULL;
  const size_t bad[] = {5000, 2u << 20, 4096 + 1};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cfg.signal_pad_bytes = bad[i];
    ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(symm_last_error(), "signal_pad_bytes");
    ASSERT(comm == NULL);
  }
  cfg.signal_pad_bytes = rank == 1 ? 8192 : 0; /* 0: the setting's 4096 */
  ASSERT_RES(symm_comm_init(&cfg, &comm), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "signal pads");
  return 0;
}

TEST_IMPL(ranks_signal_pad_size_refused) {
  ASSERT_EQ(test_run_ranks(3, pad_size_refused_rank, NULL), 0);
  return 0;
}

/* ---- blocks a memory manager gives back after their communicator was
 * ---- destroyed (torch deletes a MemPool after the communicator) are
 * ---- forgotten quietly; a block given back twice is warned about and
 * ---- left alone; symm_tensor_free of a block is refused. */
static size_t count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char text[8192] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  size_t count = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) count++;
  return count;
}

static int mempool_outlived_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  char path[128];
  snprintf(path, sizeof path, "/tmp/symm-mempool-test-%d.log", (int)getpid());
  setenv("SYMM_DEBUG", "WARN", 1);
  setenv("SYMM_DEBUG_FILE", path, 1);
  symm_comm_t *comm = init_comm();
  if (symm_comm_caps(comm)->collective_alloc || symm_comm_caps(comm)->registers) {
    symm_comm_destroy(comm);
    unlink(path);
    return 0;
  }
  const int dev = symm_comm_device(comm);
  ASSERT_OK(symm_mempool_set_comm(comm));
  char *kept = symm_mempool_alloc(4096, dev, NULL);
  char *twice = symm_mempool_alloc(8192, dev, NULL);
  char *taken = symm_mempool_alloc(100, dev, NULL);
  ASSERT(kept && twice && taken);
  symm_mempool_free(twice, 8192, dev, NULL);
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_lookup(taken, &t, NULL, NULL));
  ASSERT_RES(symm_tensor_free(t), SYMM_ERR_INVALID_ARG); /* the memory manager's */
  ASSERT_STR_CONTAINS(symm_last_error(), "symm_mempool_free");
  symm_mempool_free(taken, 100, dev, NULL);
  ASSERT_EQ(count_in_file(path, "symm_mempool_free"), 0);
  symm_comm_destroy(comm); /* releases `kept`, whose block torch still lists */
  symm_mempool_free(kept, 4096, dev, NULL); /* quiet: its communicator released it */
  ASSERT_EQ(count_in_file(path, "symm_mempool_free"), 0);
  symm_mempool_free(kept, 4096, dev, NULL); /* given back twice */
  symm_mempool_free(twice, 8192, dev, NULL);
  ASSERT_EQ(count_in_file(path, "given back twice; left alone"), 2);
  unlink(path);
  return 0;
}

TEST_IMPL(ranks_mempool_outlived) {
  ASSERT_EQ(test_run_ranks(2, mempool_outlived_rank, NULL), 0);
  return 0;
}

/* ---- a rank that comes late to a call its peers gave up because a rank
 * ---- died learns of the death (PEER_LOST naming it), not "came late":
 * ---- rank 1 is killed while it waits in the call, rank 0 gives the call
 * ---- up, and only then (told through a pipe) does rank 2 arrive.  The
 * ---- bootstrap's all-gather over shared memory (rank 2 finds the round's
 * ---- word given up) and over the store (rank 2 may find every key there,
 * ---- rank 1's included, and the verdict "given up"), and the CPU
 * ---- engine's all-reduce. */
typedef enum { LATE_SHM, LATE_STORE, LATE_ALL_REDUCE } late_where_t;

typedef struct {
  int pipe[2];
  late_where_t where;
} late_loss_arg_t;

static symm_result_t late_call(symm_comm_t *comm, late_where_t where, int rank) {
  symm_bootstrap_t *bs = symm_test_comm_bootstrap(comm);
  int mine = rank, all[3];
  if (where != LATE_ALL_REDUCE) return bs->ops->allgather(bs, &mine, sizeof mine, all);
  float x[64] = {(float)rank};
  return symm_all_reduce(comm, x, x, 64, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
}

static int late_after_loss_rank(int rank, int size, void *arg) {
  (void)size;
  late_loss_arg_t *a = arg;
  if (a->where == LATE_STORE) setenv("SYMM_BOOTSTRAP_SHM", "0", 1);
  symm_comm_t *comm = init_comm();
  if (a->where != LATE_ALL_REDUCE)
    ASSERT(strcmp(symm_test_comm_bootstrap(comm)->ops->name,
                  a->where == LATE_STORE ? "store" : "shm") == 0);
  ASSERT_OK(late_call(comm, a->where, rank));
  if (rank == 1) {
    test_rank_ready();
    (void)late_call(comm, a->where, rank); /* killed in it */
    for (;;) pause();
  }
  char byte = 0;
  if (rank == 2) ASSERT_EQ(read(a->pipe[0], &byte, 1), 1); /* rank 0 gave up */
  symm_result_t res = late_call(comm, a->where, rank);
  printf("rank %d: %s: %s\n", rank, symm_strerror(res), symm_last_error());
  if (rank == 0) {
    ASSERT(res == SYMM_ERR_PEER_LOST || res == SYMM_ERR_TIMEOUT); /* waited for rank 1, or 2 */
    ASSERT_EQ(write(a->pipe[1], "x", 1), 1);
  } else {
    ASSERT_EQ(res, SYMM_ERR_PEER_LOST);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 1");
  }
  symm_comm_destroy(comm);
  return 0;
}

static void run_late_after_loss(late_where_t where) {
  late_loss_arg_t a = {.where = where};
  ASSERT_EQ(pipe(a.pipe), 0);
  int status[3];
  test_job_opts_t o = {.timeout_ms = 30000, .exit_status = status, .store_timeout_ms = 2000,
                       .kill_rank = 1, .kill_after_ms = 300};
  ASSERT_EQ(test_run_ranks_opts(3, late_after_loss_rank, &a, &o), 1);
  ASSERT(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  close(a.pipe[0]);
  close(a.pipe[1]);
}

TEST_IMPL(shm_bootstrap_late_after_loss) {
  run_late_after_loss(LATE_SHM);
  return 0;
}

TEST_IMPL(store_bootstrap_late_after_loss) {
  run_late_after_loss(LATE_STORE);
  return 0;
}

TEST_IMPL(host_all_reduce_late_after_loss) {
  run_late_after_loss(LATE_ALL_REDUCE);
  return 0;
}
