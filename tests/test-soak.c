/* A call that its peers gave up on never succeeds on the rank that comes
 * late, and never pairs with their later calls (tests/list-soak.h).
 *
 * late_*: deterministic.  Rank 0's call times out while rank 1 stays out
 * of the communicator (it waits for a store key that rank 0 sets once its
 * call has failed); then rank 1 makes the same call, late.  It must fail
 * (SYMM_ERR_TIMEOUT, "came late"), not succeed alone, and afterwards a
 * barrier and an all-reduce (values checked) work on both.  Over the
 * shared-memory bootstrap and over the store.
 *
 * soak_*: ranks run f32 all-reduces with counts varying per iteration
 * (1..4096, now and then 20000 in a symmetric tensor: zero copy), while
 * a controller process stops one rank at a time (SIGSTOP) for 20 ms to 3
 * timeouts and resumes it (4 ranks: all-reduces sliced by 4 KiB, so that
 * a call is several rounds).  After a failed call a rank gets back in step
 * with a barrier and an all-reduce of the iteration numbers, as symmem.h
 * says.  Every SYMM_SUCCESS is checked element by element: one wrong
 * element fails the test. */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define SOAK_MAX_RANKS 16
#define SOAK_BIG 20000

/* ------------------------------------------------------------- late calls */

typedef enum { LATE_BARRIER, LATE_SMALL, LATE_ONE_SHOT, LATE_TWO_SHOT, LATE_ZERO_COPY } late_call_t;

typedef struct {
  late_call_t call;
  bool store_bootstrap;
} late_case_t;

static symm_result_t late_run(symm_comm_t *comm, late_call_t call, float *buf, size_t n) {
  switch (call) {
    case LATE_BARRIER: return symm_comm_barrier(comm);
    case LATE_SMALL: return symm_all_reduce(comm, buf, buf, 4, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
    case LATE_ONE_SHOT: return symm_all_reduce(comm, buf, buf, 300, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
    case LATE_TWO_SHOT:
    case LATE_ZERO_COPY: return symm_all_reduce(comm, buf, buf, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  }
  return SYMM_ERR_INTERNAL;
}

static void all_reduce_checked(symm_comm_t *comm, int rank, int size) {
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)(rank + i % 11);
  ASSERT_OK(symm_all_reduce(comm, x, x, 1000, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  for (int i = 0; i < 1000; i++) ASSERT_EQ((int)x[i], size * (size - 1) / 2 + size * (i % 11));
}

static int late_rank(int rank, int size, void *arg) {
  const late_case_t *lc = arg;
  if (lc->store_bootstrap) setenv("SYMM_BOOTSTRAP_SHM", "0", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const size_t n = SOAK_BIG;
  int64_t len = (int64_t)n;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *own = malloc(n * sizeof *own);
  ASSERT(own);
  float *buf = lc->call == LATE_ZERO_COPY ? symm_tensor_data(t) : own;
  for (size_t i = 0; i < n; i++) buf[i] = (float)rank;
  all_reduce_checked(comm, rank, size); /* warm: the scratch exists */
  symm_store_t *store = symm_comm_store(comm);
  if (rank == 0) {
    ASSERT_RES(late_run(comm, lc->call, buf, n), SYMM_ERR_TIMEOUT);
    printf("rank 0: %s\n", symm_last_error());
    ASSERT_OK(symm_store_set(store, "test/late/gave_up", "1", 1));
  } else {
    test_store_await(store, "test/late/gave_up");
    uint64_t start = test_now_ms();
    symm_result_t res = late_run(comm, lc->call, buf, n);
    uint64_t took = test_now_ms() - start;
    printf("rank 1 (late): %s after %llu ms: %s\n", symm_strerror(res), (unsigned long long)took,
           symm_last_error());
    ASSERT_RES(res, SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "came late");
    ASSERT_LT(took, (uint64_t)symm_comm_timeout_ms(comm) / 2);
  }
  ASSERT_OK(symm_comm_barrier(comm));
  all_reduce_checked(comm, rank, size);
  for (size_t i = 0; i < n; i++) buf[i] = (float)rank;
  ASSERT_OK(late_run(comm, lc->call, buf, n));
  if (lc->call != LATE_BARRIER)
    ASSERT_EQ((int)buf[0], size * (size - 1) / 2);
  ASSERT_OK(symm_comm_barrier(comm));
  free(own);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

#define LATE_TEST(name, call_, store_)                                         \
  TEST_IMPL(name) {                                                            \
    static late_case_t lc = {.call = call_, .store_bootstrap = store_};        \
    test_job_opts_t o = {.store_timeout_ms = 1500, .kill_rank = -1};           \
    ASSERT_EQ(test_run_ranks_opts(2, late_rank, &lc, &o), 0);                  \
    return 0;                                                                  \
  }

LATE_TEST(soak_late_barrier, LATE_BARRIER, false)
LATE_TEST(soak_late_barrier_store, LATE_BARRIER, true)
LATE_TEST(soak_late_small, LATE_SMALL, false)
LATE_TEST(soak_late_one_shot, LATE_ONE_SHOT, false)
LATE_TEST(soak_late_two_shot, LATE_TWO_SHOT, false)
LATE_TEST(soak_late_zero_copy, LATE_ZERO_COPY, false)
LATE_TEST(soak_late_small_store, LATE_SMALL, true)

/* ------------------------------------------------------------------ soak */

typedef struct {
  _Atomic int32_t pid[SOAK_MAX_RANKS];
  _Atomic int stop;
  _Atomic uint64_t calls[SOAK_MAX_RANKS], ok[SOAK_MAX_RANKS], failed[SOAK_MAX_RANKS];
  _Atomic uint64_t late[SOAK_MAX_RANKS], wrong[SOAK_MAX_RANKS], recovered[SOAK_MAX_RANKS];
  _Atomic uint64_t freezes, long_freezes;
  char first_wrong[SOAK_MAX_RANKS][256];
} soak_shared_t;

typedef struct {
  soak_shared_t *sh;
  int seconds;
  int timeout_ms; /* SYMM_TIMEOUT_MS of the ranks */
  const char *slice; /* SYMM_HOST_SLICE_BYTES of the ranks, NULL: default */
} soak_case_t;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static size_t soak_count(uint64_t iter) {
  uint64_t h = mix64(iter + 1);
  return (h & 7) == 0 ? SOAK_BIG - (size_t)(h >> 40) % 4096 : 1 + (size_t)(h >> 8) % 4096;
}

static float soak_value(uint64_t iter, size_t j, int rank) {
  return (float)((int)((iter * 7 + j) % 1021) + 3 * rank);
}

/* Barrier, then the highest iteration of any rank; true when both
 * succeeded (and the second element proves every rank took part). */
static bool soak_resync(symm_comm_t *comm, int size, uint64_t *iter) {
  if (symm_comm_barrier(comm) != SYMM_SUCCESS) return false;
  int32_t v[2] = {(int32_t)*iter, symm_comm_rank(comm)};
  if (symm_all_reduce(comm, v, v, 2, SYMM_DTYPE_I32, SYMM_REDUCE_MAX, NULL) != SYMM_SUCCESS)
    return false;
  ASSERT_EQ(v[1], size - 1);
  *iter = (uint64_t)v[0] + 1;
  return true;
}

static int soak_rank(int rank, int size, void *arg) {
  const soak_case_t *sc = arg;
  soak_shared_t *sh = sc->sh;
  if (sc->slice) setenv("SYMM_HOST_SLICE_BYTES", sc->slice, 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int64_t len = SOAK_BIG;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *sym = symm_tensor_data(t), *own = malloc(SOAK_BIG * sizeof *own),
        *out = malloc(SOAK_BIG * sizeof *out);
  ASSERT(own && out);
  ASSERT_OK(symm_comm_barrier(comm));
  atomic_store(&sh->pid[rank], (int32_t)getpid());
  uint64_t iter = 0;
  bool behind = false;
  while (!atomic_load(&sh->stop)) {
    if (behind) {
      if (!soak_resync(comm, size, &iter)) continue;
      behind = false;
      atomic_fetch_add(&sh->recovered[rank], 1);
    }
    const size_t n = soak_count(iter);
    const bool big = n > 4096, in_place = iter & 1;
    float *src = big ? sym : own, *dst = in_place ? src : out;
    for (size_t j = 0; j < n; j++) src[j] = soak_value(iter, j, rank);
    atomic_fetch_add(&sh->calls[rank], 1);
    symm_result_t res = symm_all_reduce(comm, src, dst, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
    if (res != SYMM_SUCCESS) {
      atomic_fetch_add(&sh->failed[rank], 1);
      if (strstr(symm_last_error(), "came late")) atomic_fetch_add(&sh->late[rank], 1);
      behind = true;
      continue;
    }
    size_t bad = 0, at = 0;
    for (size_t j = 0; j < n; j++) {
      float want = 0;
      for (int r = 0; r < size; r++) want += soak_value(iter, j, r);
      if (dst[j] != want && !bad++) at = j;
    }
    if (bad) {
      if (!atomic_fetch_add(&sh->wrong[rank], 1))
        snprintf(sh->first_wrong[rank], sizeof sh->first_wrong[rank],
                 "iteration %llu, count %zu: %zu of %zu elements wrong, first at %zu",
                 (unsigned long long)iter, n, bad, n, at);
    } else {
      atomic_fetch_add(&sh->ok[rank], 1);
    }
    iter++;
  }
  free(own);
  free(out);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Stops one rank at a time for 20 ms to 3 timeouts (the subject of this
 * test is lateness itself: these sleeps are the faults, not an order). */
static void soak_controller(soak_shared_t *sh, int n, int seconds, int timeout_ms) {
  for (int r = 0; r < n; r++)
    while (!atomic_load(&sh->pid[r])) {
      if (atomic_load(&sh->stop)) _exit(0);
      sleep_ms(1);
    }
  uint64_t seed = mix64((uint64_t)getpid()), end = test_now_ms() + (uint64_t)seconds * 1000;
  while (test_now_ms() < end) {
    seed = mix64(seed);
    int r = (int)(seed % (uint64_t)n);
    int frozen = 20 + (int)((seed >> 16) % (uint64_t)(3 * timeout_ms));
    pid_t pid = atomic_load(&sh->pid[r]);
    if (kill(pid, SIGSTOP) == 0) {
      atomic_fetch_add(&sh->freezes, 1);
      if (frozen > timeout_ms) atomic_fetch_add(&sh->long_freezes, 1);
      sleep_ms(frozen);
      kill(pid, SIGCONT);
    }
    sleep_ms((int)((seed >> 40) % 150));
  }
  atomic_store(&sh->stop, 1);
  for (int r = 0; r < n; r++) kill(atomic_load(&sh->pid[r]), SIGCONT);
  _exit(0);
}

static int soak(int n, int seconds, int timeout_ms, const char *slice) {
  soak_shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
  ASSERT(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  pid_t ctl = fork();
  ASSERT(ctl >= 0);
  if (ctl == 0) soak_controller(sh, n, seconds, timeout_ms);
  soak_case_t sc = {.sh = sh, .seconds = seconds, .timeout_ms = timeout_ms, .slice = slice};
  test_job_opts_t o = {.timeout_ms = (seconds + 40) * 1000 + 10 * timeout_ms,
                       .store_timeout_ms = timeout_ms, .kill_rank = -1};
  int failed_ranks = test_run_ranks_opts(n, soak_rank, &sc, &o);
  atomic_store(&sh->stop, 1);
  int st;
  waitpid(ctl, &st, 0);
  uint64_t calls = 0, ok = 0, failed = 0, late = 0, wrong = 0, recovered = 0;
  for (int r = 0; r < n; r++) {
    calls += sh->calls[r], ok += sh->ok[r], failed += sh->failed[r];
    late += sh->late[r], wrong += sh->wrong[r], recovered += sh->recovered[r];
    if (sh->wrong[r]) fprintf(stderr, "rank %d: wrong result as success: %s\n", r, sh->first_wrong[r]);
  }
  printf("soak, %d ranks, %d s, SYMM_TIMEOUT_MS=%d: %llu freezes (%llu longer than the timeout); "
         "%llu calls: %llu right, %llu failed (%llu came late), %llu wrong; %llu recoveries\n",
         n, seconds, timeout_ms, (unsigned long long)sh->freezes,
         (unsigned long long)sh->long_freezes, (unsigned long long)calls, (unsigned long long)ok,
         (unsigned long long)failed, (unsigned long long)late, (unsigned long long)wrong,
         (unsigned long long)recovered);
  ASSERT_EQ(wrong, 0);
  ASSERT_EQ(failed_ranks, 0);
  /* The faults happened and the ranks got back in step after them. */
  ASSERT_GT(sh->long_freezes, 0);
  ASSERT_GT(failed, 0);
  ASSERT_GT(recovered, 0);
  ASSERT_GT(ok, 0);
  munmap(sh, sizeof *sh);
  return 0;
}

TEST_IMPL(soak_freeze_2) { return soak(2, 25, 300, NULL); }
/* Slices of 4 KiB: a large all-reduce is several rounds, and a rank that
 * fails one gives up the rest. */
TEST_IMPL(soak_freeze_4) { return soak(4, 25, 300, "4K"); }

/* By hand, longer or wider: SYMM_TEST_SOAK="ranks seconds timeout_ms"
 * (at most 16 ranks). */
TEST_IMPL(soak_freeze_long) {
  const char *spec = getenv("SYMM_TEST_SOAK");
  int n = 0, seconds = 0, timeout_ms = 0;
  if (!spec || sscanf(spec, "%d %d %d", &n, &seconds, &timeout_ms) != 3) {
    printf("SKIP: a run by hand; set SYMM_TEST_SOAK=\"ranks seconds timeout_ms\"\n");
    return TEST_SKIP;
  }
  ASSERT(n >= 2 && n <= SOAK_MAX_RANKS && seconds > 0 && timeout_ms > 0);
  return soak(n, seconds, timeout_ms, getenv("SYMM_HOST_SLICE_BYTES"));
}
