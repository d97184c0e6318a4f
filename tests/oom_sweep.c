/*
 * Out of memory at every allocation of a rank's life, one at a time: this
 * program replaces malloc, calloc and realloc (for itself and the library
 * linked into it, no LD_PRELOAD), and for each n makes the n-th allocation
 * of one rank fail, from symm_comm_init to symm_comm_destroy, while its
 * peer runs normally.  Whatever a call then returns, it must not be an
 * error that blames something else: SYMM_ERR_PROTOCOL (a peer's malformed
 * message) or SYMM_ERR_INVALID_ARG (the caller's arguments) on the rank
 * that ran out, since every argument is valid and every peer is well.
 * Neither rank may crash, and a collective that returns success must have
 * the right result (among them an all-gather read in the peer's process
 * through the bounce buffer, whose allocation fails in turn too).  With
 * SYMM_OOM_BACKEND=arena_coll (the tests' backend whose allocation and
 * free are collective), a rank whose allocation or free failed must not
 * leave its peer's succeeding, except
 * where the failure was the copy-out of a bootstrap round that every rank
 * had completed (listed with SYMM_OOM_ALONE, not judged: that is the
 * bootstrap's to fix).
 *
 *   symm-oom-sweep [FIRST [LAST]]   (default: every n until one is not
 *                                   reached, for rank 0 and then rank 1)
 *
 * Prints one line per n that went wrong and a summary; exit status 0 when
 * none did.  Built without sanitizers only (they bring their own malloc).
 * Diagnostics, not judged: SYMM_OOM_TRACE=1 prints the failing allocation's
 * backtrace; SYMM_OOM_ALONE=1 lists the collective calls that failed on the
 * rank that ran out while its peer's succeeded; SYMM_OOM_PEER=1 lists what
 * the peer got for each call that failed on both.
 */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena_backend.h"
#include "harness.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);

/* Allocations left before the one that fails; 0: disarmed. */
static _Atomic long oom_countdown;
static _Atomic int oom_reached;

static bool oom_now(void) {
  if (atomic_load_explicit(&oom_countdown, memory_order_relaxed) <= 0) return false;
  if (atomic_fetch_sub(&oom_countdown, 1) != 1) return false;
  atomic_store(&oom_reached, 1);
  if (getenv("SYMM_OOM_TRACE")) { /* where it failed, for a person */
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
  return true;
}

void *malloc(size_t n) {
  if (oom_now()) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_malloc(n);
}

void *calloc(size_t n, size_t size) {
  if (oom_now()) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n) {
  if (oom_now()) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_realloc(p, n);
}

#define RANKS 2
#define STEPS 10
#define MSG 240
/* A step that returned success with a wrong result: always wrong. */
#define WRONG_RESULT 1000

/* What each rank saw, shared with the driver (mapped before the fork). */
typedef struct {
  int reached;               /* the failing allocation happened */
  int steps;                 /* calls made */
  int codes[STEPS];
  char names[STEPS][24];
  char msgs[STEPS][MSG];
} rank_report_t;

typedef struct {
  int oom_rank;
  long oom_at;
  rank_report_t *reports; /* [RANKS], shared */
} sweep_arg_t;

static bool note(rank_report_t *rep, const char *name, symm_result_t res) {
  if (rep->steps < STEPS) {
    int i = rep->steps++;
    rep->codes[i] = (int)res;
    snprintf(rep->names[i], sizeof rep->names[i], "%s", name);
    snprintf(rep->msgs[i], sizeof rep->msgs[i], "%s", res ? symm_last_error() : "");
  }
  return res == SYMM_SUCCESS;
}

/* A collective's result, once it returned success: `want` in every one
 * of n floats, else WRONG_RESULT. */
static symm_result_t checked(symm_result_t res, const float *out, size_t n, float want) {
  for (size_t i = 0; res == SYMM_SUCCESS && i < n; i++)
    if (out[i] != want) return (symm_result_t)WRONG_RESULT;
  return res;
}

/* The CMA step's all-gather: pieces of 64 KiB (read in the peer's process
 * from 32 KiB) from a page-aligned sendbuf into a recvbuf 16 bytes past a
 * page, where the read goes through the communicator's bounce buffer
 * (cpu_cma.c), whose allocation the sweep fails too. */
enum { CMA_PIECE = 16384 };
static _Alignas(4096) float cma_send[CMA_PIECE];
static _Alignas(4096) float cma_room[RANKS * CMA_PIECE + 1024];

static symm_result_t all_gather_cma(symm_comm_t *comm, int rank) {
  float *recv = cma_room + 4;
  for (size_t i = 0; i < CMA_PIECE; i++) cma_send[i] = (float)(rank + 1);
  memset(cma_room, 0, sizeof cma_room);
  symm_result_t res = symm_all_gather(comm, cma_send, recv, CMA_PIECE, SYMM_DTYPE_F32, NULL);
  for (int r = 0; r < RANKS && res == SYMM_SUCCESS; r++)
    res = checked(res, recv + (size_t)r * CMA_PIECE, CMA_PIECE, (float)(r + 1));
  return res;
}

/* init, alloc, rendezvous, barrier, an all-reduce through the scratch, one
 * in place, an all-gather read in the peer's process, free, barrier,
 * destroy; after a failed call only destroy.  A collective that returns
 * success must have the right result. */
static int sweep_rank(int rank, int size, void *argp) {
  (void)size;
  sweep_arg_t *arg = argp;
  rank_report_t *rep = &arg->reports[rank];
  symm_comm_t *comm = NULL;
  symm_tensor_t *t = NULL;
  enum { COUNT = 256 };
  static float send[COUNT], recv[COUNT];
  for (int i = 0; i < COUNT; i++) send[i] = (float)(rank + 1);
  const float sum = RANKS * (RANKS + 1) / 2;
  int64_t n = COUNT;
  if (rank == arg->oom_rank) atomic_store(&oom_countdown, arg->oom_at);
  bool ok = note(rep, "init", symm_comm_init(NULL, &comm)) &&
            note(rep, "alloc", symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t)) &&
            note(rep, "rendezvous", symm_tensor_rendezvous(t)) &&
            note(rep, "barrier", symm_comm_barrier(comm)) &&
            note(rep, "all_reduce",
                 checked(symm_all_reduce(comm, send, recv, COUNT, SYMM_DTYPE_F32,
                                         SYMM_REDUCE_SUM, NULL), recv, COUNT, sum));
  float *x = ok ? symm_tensor_data(t) : NULL;
  for (int i = 0; x && i < COUNT; i++) x[i] = (float)(rank + 1);
  ok = ok && note(rep, "all_reduce_tensor",
                  checked(symm_all_reduce(comm, x, x, COUNT, SYMM_DTYPE_F32, SYMM_REDUCE_SUM,
                                          NULL), x, COUNT, sum)) &&
       note(rep, "all_gather_cma", all_gather_cma(comm, rank)) &&
       note(rep, "free", symm_tensor_free(t)) && note(rep, "barrier2", symm_comm_barrier(comm));
  (void)ok;
  if (comm) symm_comm_destroy(comm);
  rep->reached = atomic_load(&oom_reached);
  atomic_store(&oom_countdown, 0);
  return 0;
}

/* One job with allocation oom_at of rank oom_rank failing.  Returns 1 when
 * it was reached, 0 when not (past the last allocation), and counts what
 * went wrong in *bad. */
static int sweep_one(int oom_rank, long oom_at, rank_report_t *reports, int *bad) {
  memset(reports, 0, sizeof *reports * RANKS);
  sweep_arg_t arg = {.oom_rank = oom_rank, .oom_at = oom_at, .reports = reports};
  int status[RANKS] = {0};
  test_job_opts_t o = {.kill_rank = -1, .exit_status = status, .store_timeout_ms = 600,
                       .timeout_ms = 30000, .backend = getenv("SYMM_OOM_BACKEND")};
  test_run_ranks_opts(RANKS, sweep_rank, &arg, &o);
  for (int r = 0; r < RANKS; r++) {
    if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)) {
      printf("oom at %ld of rank %d: rank %d %s %d\n", oom_at, oom_rank, r,
             WIFSIGNALED(status[r]) ? "died of signal" : "exited", WIFSIGNALED(status[r]) ?
             WTERMSIG(status[r]) : WEXITSTATUS(status[r]));
      ++*bad;
      continue;
    }
    const rank_report_t *rep = &reports[r];
    for (int i = 0; i < rep->steps; i++) {
      const symm_result_t c = (symm_result_t)rep->codes[i];
      if (c == (symm_result_t)WRONG_RESULT) {
        printf("oom at %ld of rank %d: rank %d's %s returned success with a wrong result\n",
               oom_at, oom_rank, r, rep->names[i]);
        ++*bad;
      } else if (r == oom_rank && (c == SYMM_ERR_PROTOCOL || c == SYMM_ERR_INVALID_ARG)) {
        printf("oom at %ld of rank %d: %s -> %s: %s\n", oom_at, oom_rank, rep->names[i],
               symm_strerror(c), rep->msgs[i]);
        ++*bad;
      }
    }
  }
  /* A collective call that failed on the rank that ran out must not have
   * succeeded on its peer.  Judged for the allocation and the free where
   * they are collective (arena_coll: an agreed step, then the registration
   * of the memory); listed for the others with SYMM_OOM_ALONE (the
   * bootstrap's own rounds). */
  const rank_report_t *me = &reports[oom_rank], *peer = &reports[1 - oom_rank];
  const char *backend = getenv("SYMM_OOM_BACKEND");
  const bool coll_alloc = backend && strcmp(backend, "arena_coll") == 0;
  for (int i = 0; i < me->steps && i < peer->steps; i++) {
    if (getenv("SYMM_OOM_PEER") && me->codes[i] != SYMM_SUCCESS && peer->codes[i] != SYMM_SUCCESS)
      printf("oom at %ld of rank %d: %s -> %s; peer %s: %s\n", oom_at, oom_rank, me->names[i],
             symm_strerror((symm_result_t)me->codes[i]),
             symm_strerror((symm_result_t)peer->codes[i]), peer->msgs[i]);
    if (me->codes[i] == SYMM_SUCCESS || peer->codes[i] != SYMM_SUCCESS) continue;
    const bool alloc_or_free = !strcmp(me->names[i], "alloc") || !strcmp(me->names[i], "free");
    if (alloc_or_free && !coll_alloc) continue; /* local calls */
    /* A bootstrap round whose copy-out ran out of memory after every rank
     * had contributed: the bootstrap's rounds, not these steps (known). */
    const bool in_round = strstr(me->msgs[i], "bootstrap: out of memory") ||
                          strstr(me->msgs[i], "store multi_get: out of memory");
    const bool judged = alloc_or_free && !in_round;
    if (judged || getenv("SYMM_OOM_ALONE"))
      printf("oom at %ld of rank %d: %s -> %s alone%s: %s\n", oom_at, oom_rank, me->names[i],
             symm_strerror((symm_result_t)me->codes[i]), judged ? "" : " (not judged)",
             me->msgs[i]);
    if (judged) ++*bad;
  }
  fflush(stdout);
  return reports[oom_rank].reached || !(WIFEXITED(status[oom_rank]));
}

int main(int argc, char **argv) {
  long first = argc > 1 ? atol(argv[1]) : 1, last = argc > 2 ? atol(argv[2]) : 0;
  rank_report_t *reports = mmap(NULL, sizeof *reports * RANKS, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (reports == MAP_FAILED) return 2;
  setenv("SYMM_DEBUG", "NONE", 1);
  arena_backends_register();
  int bad = 0;
  long points = 0;
  for (int rank = 0; rank < RANKS; rank++)
    for (long at = first; !last || at <= last; at++) {
      if (!sweep_one(rank, at, reports, &bad)) break;
      points++;
    }
  printf("oom sweep: %ld injection points, %d wrong\n", points, bad);
  return bad ? 1 : 0;
}
