/* Bootstrap collectives through shared memory, for communicators whose ranks
 * all run on one host: a round costs a few cache-line transfers instead of a
 * TCP round trip to the store.
 *
 * Segment: a memfd of rank 0 that the others open through /proc (no name
 * in /dev/shm at any time); a header with one round word per parity
 * (base/symm_shm_round.h), then one slot per rank.  A slot holds
 * `published` (the number of the last collective whose contribution is in
 * place, for messages and to watch who is missing), `left` (the last
 * collective this rank has left, whatever its result) and two data
 * buffers; collective k uses buffer and word k & 1.  A rank arrives at
 * word k & 1 once its contribution is in place and reads the others' once
 * every rank has arrived.  The round completes for every rank or for none:
 * a rank that stops waiting gives it up, which fails only if every rank
 * already arrived, and a rank that arrives later finds it given up and
 * fails too, so a late rank never reads what its peers wrote for a later
 * round.  A rank writes buffer k & 1 only once every rank has left k - 2
 * (known at once when k - 1 completed; else read from `left` and waited
 * for), and one that gives k up before arriving says so in `left` and
 * gives up the word if a peer already took it over.
 *
 * Contributions larger than a buffer go through the store under a per-round
 * key, and the slot carries a marker instead.  Waits back off as the host
 * backend's do (symm_backoff_*: spin, yield, sleep) and are bounded by the
 * timeout; with more ranks than CPUs a wait for a round sleeps in the
 * kernel on the round's word instead (symm_round_block), which the last
 * arrival or a rank giving up wakes.  A rank whose process is gone is
 * reported as lost (all ranks share the host, so its pid says). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symm_backoff.h"
#include "symm_shm_round.h"
#include "store.h"
#include "symm_fault.h"

#define SHM_MAGIC 0x53594d42534d4832ull /* "SYMBSMH2" */
#define SHM_BUF_BYTES (16u << 10)
#define SHM_IN_STORE UINT32_MAX          /* len marker: the data is in the store */
/* Longest sleep in the kernel of a crowded wait between looks at the
 * deadline and the peers' processes. */
#define SHM_BLOCK_NS (20ull * 1000000ull)

typedef struct {
  _Alignas(64) _Atomic uint64_t published;
  uint32_t len[2];
  _Alignas(64) _Atomic uint64_t left;
  _Alignas(64) uint8_t data[2][SHM_BUF_BYTES];
} shm_slot_t;

typedef struct {
  _Alignas(64) symm_round_word_t word;
} shm_round_t;

typedef struct {
  uint64_t magic;
  uint32_t size, buf_bytes;
  shm_round_t round[2];
  _Alignas(64) shm_slot_t slots[];
} shm_segment_t;

typedef struct {
  shm_segment_t *seg;
  size_t seg_bytes;
  uint64_t seq;
  symm_store_t *store;
  char prefix[128];
  int32_t *pids;
  bool in_store[2]; /* round parity -> that round's contribution went to the store */
  uint64_t all_left; /* every rank has left every round up to this one */
  bool arrived[2];   /* round parity -> this rank arrived at the current round */
} shm_bs_t;

static size_t segment_bytes(int size) {
  return sizeof(shm_segment_t) + (size_t)size * sizeof(shm_slot_t);
}

static void store_key(const shm_bs_t *s, uint64_t seq, int rank, char *out, size_t cap) {
  snprintf(out, cap, "%sshm/%llu/%d", s->prefix, (unsigned long long)seq, rank);
}

static uint64_t left_of(const shm_bs_t *s, int r) { return atomic_load(&s->seg->slots[r].left); }

/* The first rank other than this one whose contribution to seq is not in
 * place, or -1. */
static int first_missing(const symm_bootstrap_t *bs, uint64_t seq) {
  const shm_bs_t *s = bs->state;
  for (int i = 1; i < bs->size; i++) {
    int r = (bs->rank + i) % bs->size;
    if (atomic_load_explicit(&s->seg->slots[r].published, memory_order_acquire) < seq) return r;
  }
  return -1;
}

/* The error of a rank that finds round seq given up by its peers: a
 * rank whose process is gone without leaving the round (it died in it or
 * before: why the peers gave up, or the end of the job anyway) if there
 * is one, else this rank came late.  A peer that gave the round up, left
 * it and then exited is not lost. */
static symm_result_t late_error(const symm_bootstrap_t *bs, uint64_t seq) {
  const shm_bs_t *s = bs->state;
  for (int r = 0; r < bs->size; r++)
    if (r != bs->rank && left_of(s, r) < seq && s->pids[r] > 0 && symm_process_gone(s->pids[r]))
      return symm_error(SYMM_ERR_PEER_LOST, "bootstrap: rank %d (pid %d) is gone; collective "
                        "#%llu was given up, and fails on every rank", r, (int)s->pids[r],
                        (unsigned long long)seq);
  return symm_error(SYMM_ERR_TIMEOUT, "bootstrap: collective #%llu was given up by a rank that "
                    "stopped waiting before every rank arrived (this rank came late: slow, or "
                    "stopped); it fails on every rank", (unsigned long long)seq);
}

/* The error of a wait that ended at the deadline or with rank r's process
 * gone (lost), once the round is given up. */
static symm_result_t wait_error(const symm_bootstrap_t *bs, int r, bool lost, uint64_t seq,
                                const char *what) {
  const shm_bs_t *s = bs->state;
  if (r >= 0 && (lost || (s->pids[r] > 0 && symm_process_gone(s->pids[r]))))
    return symm_error(SYMM_ERR_PEER_LOST, "bootstrap: rank %d (pid %d) is gone (collective "
                      "#%llu)", r, (int)s->pids[r], (unsigned long long)seq);
  if (r < 0)
    return symm_error(SYMM_ERR_TIMEOUT, "bootstrap: collective #%llu was given up after %d ms "
                      "(every rank had arrived: one came late)", (unsigned long long)seq,
                      bs->timeout_ms);
  return symm_error(SYMM_ERR_TIMEOUT, "bootstrap: rank %d did not %s within %d ms (collective "
                    "#%llu)", r, what, bs->timeout_ms, (unsigned long long)seq);
}

/* Waits until every rank has left round seq - 2, whose buffer and word
 * round seq reuses.  *slow: the peers' left had to be read. */
static symm_result_t gate(symm_bootstrap_t *bs, uint64_t seq, uint64_t deadline_ns, bool *slow) {
  shm_bs_t *s = bs->state;
  *slow = false;
  if (seq <= s->all_left + 2) return SYMM_SUCCESS;
  *slow = true;
  symm_backoff_t b;
  bool started = false;
  for (;;) {
    uint64_t least = seq - 1;
    int late = -1;
    for (int r = 0; r < bs->size; r++) {
      if (r == bs->rank) continue;
      uint64_t l = left_of(s, r);
      if (l >= seq) return late_error(bs, seq);
      if (l < least) least = l, late = r;
    }
    if (least + 2 >= seq) {
      s->all_left = least > s->all_left ? least : s->all_left;
      return SYMM_SUCCESS;
    }
    if (!started) symm_backoff_start_until(&b, deadline_ns, bs->size);
    started = true;
    symm_backoff_watch(&b, s->pids[late]);
    if (symm_backoff_pause(&b)) continue;
    char what[64];
    snprintf(what, sizeof what, "leave collective #%llu", (unsigned long long)least + 1);
    return wait_error(bs, late, b.lost, seq, what);
  }
}

/* Blocks until round seq's word moves, SHM_BLOCK_NS or the deadline;
 * true when the round is no longer waiting. */
static bool block_on_round(symm_round_word_t *word, uint64_t seq, uint32_t all,
                           uint64_t deadline_ns) {
  const uint64_t seen = atomic_load(word), now = symm_now_ns();
  if (symm_round_state(word, seq, all) != SYMM_ROUND_WAIT) return true;
  if (now >= deadline_ns) return false;
  symm_round_block(word, seen, deadline_ns - now < SHM_BLOCK_NS ? deadline_ns - now : SHM_BLOCK_NS);
  return symm_round_state(word, seq, all) != SYMM_ROUND_WAIT;
}

/* Waits until every rank arrived at round seq; at the deadline, or with a
 * peer's process gone, gives the round up unless it completed meanwhile. */
static symm_result_t wait_round(symm_bootstrap_t *bs, symm_round_word_t *word, uint64_t seq,
                                uint64_t deadline_ns) {
  const uint32_t all = (uint32_t)bs->size;
  symm_round_state_t st = symm_round_state(word, seq, all);
  if (st == SYMM_ROUND_WAIT) {
    int r = first_missing(bs, seq);
    symm_backoff_t b;
    symm_backoff_start_until(&b, deadline_ns, bs->size); /* every rank is on this host */
    symm_backoff_watch(&b, r >= 0 ? ((shm_bs_t *)bs->state)->pids[r] : 0);
    unsigned polls = 0;
    while ((st = symm_round_state(word, seq, all)) == SYMM_ROUND_WAIT) {
      /* More ranks than CPUs: sleep in the kernel until the round moves
       * (the last arrival wakes the word), looking at the deadline and
       * the peers every SHM_BLOCK_NS. */
      if (b.crowded && block_on_round(word, seq, all, deadline_ns)) break;
      if (symm_backoff_pause(&b)) {
        if ((++polls & (b.crowded ? 7u : 255u)) == 0 && (r = first_missing(bs, seq)) >= 0)
          symm_backoff_watch(&b, ((shm_bs_t *)bs->state)->pids[r]);
        continue;
      }
      if (!symm_round_give_up(word, seq, all)) return SYMM_SUCCESS; /* completed after all */
      symm_round_wake(word);
      return wait_error(bs, first_missing(bs, seq), b.lost, seq, "arrive");
    }
    st = symm_round_state(word, seq, all);
  }
  if (st == SYMM_ROUND_DONE) return SYMM_SUCCESS;
  /* Given up by a peer while this rank waited: for the ranks still missing. */
  int r = first_missing(bs, seq);
  return r >= 0 ? wait_error(bs, r, false, seq, "arrive") : late_error(bs, seq);
}

/* This rank leaves round seq: says so, and gives the round's word up if a
 * peer took it over for seq and this rank never arrived (the store of
 * left first: a peer taking the word over afterwards reads it). */
static void leave(symm_bootstrap_t *bs, uint64_t seq) {
  shm_bs_t *s = bs->state;
  const int b = (int)(seq & 1);
  atomic_store(&s->seg->slots[bs->rank].left, seq);
  if (!s->arrived[b] && symm_round_give_up(&s->seg->round[b].word, seq, UINT32_MAX))
    symm_round_wake(&s->seg->round[b].word);
}

/* Puts this rank's contribution to round seq in place, then arrives. */
static symm_result_t contribute(symm_bootstrap_t *bs, uint64_t seq, const void *send,
                                size_t len) {
  shm_bs_t *s = bs->state;
  const int b = (int)(seq & 1);
  shm_slot_t *mine = &s->seg->slots[bs->rank];
  s->in_store[b] = len > SHM_BUF_BYTES;
  if (len <= SHM_BUF_BYTES) {
    if (len) memcpy(mine->data[b], send, len);
    mine->len[b] = (uint32_t)len;
  } else {
    char key[192];
    store_key(s, seq, bs->rank, key, sizeof key);
    SYMM_CHECK(symm_store_set_own(s->store, key, send, len));
    mine->len[b] = SHM_IN_STORE;
  }
  atomic_store_explicit(&mine->published, seq, memory_order_release);
  s->arrived[b] = true;
  const symm_round_state_t st = symm_round_arrive(&s->seg->round[b].word, seq,
                                                  (uint32_t)bs->size);
  if (st == SYMM_ROUND_GIVEN_UP) return late_error(bs, seq);
  if (st == SYMM_ROUND_DONE) symm_round_wake(&s->seg->round[b].word); /* the last arrival */
  return SYMM_SUCCESS;
}

/* Copies every rank's contribution to the complete round seq. */
static symm_result_t collect(symm_bootstrap_t *bs, uint64_t seq, void **values, size_t *lens,
                             uint64_t deadline_ns) {
  shm_bs_t *s = bs->state;
  const int b = (int)(seq & 1);
  char key[192];
  for (int i = 0; i < bs->size; i++) {
    int r = (bs->rank + i) % bs->size;
    const shm_slot_t *slot = &s->seg->slots[r];
    uint32_t n = slot->len[b];
    if (n == SHM_IN_STORE) {
      store_key(s, seq, r, key, sizeof key);
      const char *k = key;
      SYMM_CHECK(symm_store_multi_get(s->store, &k, 1, &values[r], &lens[r],
                                      symm_ms_until(deadline_ns)));
      continue;
    }
    if (n > SHM_BUF_BYTES)
      return symm_error(SYMM_ERR_PROTOCOL, "bootstrap: rank %d published %u bytes", r, n);
    if (!(values[r] = malloc(n ? n : 1)))
      return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
    memcpy(values[r], slot->data[b], n);
    lens[r] = n;
  }
  return SYMM_SUCCESS;
}

static symm_result_t shm_gather(symm_bootstrap_t *bs, const void *send, size_t len,
                                void **values, size_t *lens) {
  shm_bs_t *s = bs->state;
  const uint64_t seq = ++s->seq;
  const int b = (int)(seq & 1);
  symm_round_word_t *word = &s->seg->round[b].word;
  /* One timeout for the whole collective, not one per rank waited for. */
  const uint64_t deadline_ns = symm_deadline_after(bs->timeout_ms);
  const bool old_in_store = s->in_store[b];
  symm_result_t res = SYMM_SUCCESS;
  bool slow;
  for (int r = 0; r < bs->size; r++) values[r] = NULL;
  s->arrived[b] = false;
  SYMM_CHECK_GOTO(gate(bs, seq, deadline_ns, &slow), res, fail);
  if (!symm_round_take(word, seq)) {
    res = late_error(bs, seq);
    goto fail;
  }
  for (int r = 0; slow && r < bs->size; r++)
    if (r != bs->rank && left_of(s, r) >= seq) {
      symm_round_give_up(word, seq, UINT32_MAX);
      res = late_error(bs, seq);
      goto fail;
    }
  SYMM_CHECK_GOTO(contribute(bs, seq, send, len), res, fail);
  SYMM_CHECK_GOTO(wait_round(bs, word, seq, deadline_ns), res, fail);
  /* Every rank arrived here, so every rank has left the round before. */
  if (s->all_left < seq - 1) s->all_left = seq - 1;
  SYMM_CHECK_GOTO(collect(bs, seq, values, lens, deadline_ns), res, fail);
  leave(bs, seq);
  /* Every rank has left round seq - 2: its store key, if any, can go. */
  if (seq > 2 && old_in_store) {
    char key[192];
    store_key(s, seq - 2, bs->rank, key, sizeof key);
    if (symm_store_delete_own(s->store, key) != SYMM_SUCCESS) symm_error_clear();
  }
  return SYMM_SUCCESS;
fail:
  leave(bs, seq);
  for (int r = 0; r < bs->size; r++) {
    free(values[r]);
    values[r] = NULL;
  }
  return res;
}

static symm_result_t shm_allgather(symm_bootstrap_t *bs, const void *send, size_t len,
                                   void *recv) {
  void **values = calloc((size_t)bs->size, sizeof *values);
  size_t *lens = calloc((size_t)bs->size, sizeof *lens);
  symm_result_t res = SYMM_ERR_NO_MEMORY;
  if (!values || !lens) {
    symm_error(res, "bootstrap: out of memory");
    goto out;
  }
  SYMM_CHECK_GOTO(shm_gather(bs, send, len, values, lens), res, out);
  for (int r = 0; r < bs->size && res == SYMM_SUCCESS; r++) {
    if (lens[r] != len)
      res = symm_error(SYMM_ERR_MISMATCH, "bootstrap: rank %d contributed %zu bytes to an "
                       "all-gather where rank %d contributed %zu", r, lens[r], bs->rank, len);
    else
      memcpy((char *)recv + (size_t)r * len, values[r], len);
  }
  for (int r = 0; r < bs->size; r++) free(values[r]);
out:
  free(values);
  free(lens);
  return res;
}

static symm_result_t shm_broadcast(symm_bootstrap_t *bs, void *buf, size_t len, int root) {
  void **values = calloc((size_t)bs->size, sizeof *values);
  size_t *lens = calloc((size_t)bs->size, sizeof *lens);
  symm_result_t res = SYMM_ERR_NO_MEMORY;
  if (!values || !lens) {
    symm_error(res, "bootstrap: out of memory");
    goto out;
  }
  uint8_t none = 0;
  SYMM_CHECK_GOTO(bs->rank == root ? shm_gather(bs, buf, len, values, lens)
                                   : shm_gather(bs, &none, 1, values, lens),
                  res, out);
  if (lens[root] != len)
    res = symm_error(SYMM_ERR_MISMATCH, "bootstrap: broadcast of %zu bytes from rank %d, rank %d "
                     "expected %zu", lens[root], root, bs->rank, len);
  else if (bs->rank != root)
    memcpy(buf, values[root], len);
  for (int r = 0; r < bs->size; r++) free(values[r]);
out:
  free(values);
  free(lens);
  return res;
}

static void shm_fini(symm_bootstrap_t *bs) {
  if (!bs) return;
  shm_bs_t *s = bs->state;
  if (s) {
    if (s->seg) munmap(s->seg, s->seg_bytes);
    free(s->pids);
    free(s);
  }
  free(bs);
}

static const symm_bootstrap_ops_t shm_bootstrap_ops = {
    .version = 1,
    .name = "shm",
    .allgather = shm_allgather,
    .broadcast = shm_broadcast,
    .fini = shm_fini,
    .allgatherv = shm_gather,
};

/* The segment has no name anywhere: rank 0 makes it as a memfd, and the
 * other ranks open rank 0's descriptor through /proc/<pid>/fd/<n>, which
 * the kernel allows to processes of the same user only.  Nothing is left
 * behind whoever dies when: the memory goes with the last mapping. */
static symm_result_t create_segment(size_t bytes, int size, int *fd_out, shm_segment_t **out) {
  symm_result_t res = SYMM_SUCCESS;
  int fd;
  SYMM_CHECK(symm_file_size_check(bytes, "bootstrap: the shared-memory segment"));
  SYMM_SYSCHECK(fd = memfd_create("symmem-bootstrap", MFD_CLOEXEC | MFD_ALLOW_SEALING),
                "bootstrap: memfd_create");
  SYMM_SYSCHECK_GOTO(ftruncate(fd, (off_t)bytes), res, fail, "bootstrap: sizing the segment");
  /* Every rank maps it: cut short, it would kill them with SIGBUS. */
  SYMM_SYSCHECK_GOTO(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), res, fail,
                     "bootstrap: sealing the segment");
  shm_segment_t *seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (seg == MAP_FAILED) {
    res = symm_error_errno("bootstrap: mapping the segment");
    goto fail;
  }
  seg->size = (uint32_t)size;
  seg->buf_bytes = SHM_BUF_BYTES;
  seg->magic = SHM_MAGIC;
  *fd_out = fd;
  *out = seg;
  return SYMM_SUCCESS;
fail:
  close(fd);
  return res;
}

/* Rank 0's segment, from its descriptor `fd` in process `pid`. */
static symm_result_t open_segment(int32_t pid, int32_t fd0, size_t bytes, shm_segment_t **out) {
  if (pid <= 0)
    return symm_error(SYMM_ERR_UNSUPPORTED, "bootstrap: rank 0's process is not visible here");
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd0);
  symm_result_t res = SYMM_SUCCESS;
  int fd;
  SYMM_SYSCHECK(fd = open(path, O_RDWR | O_CLOEXEC), "bootstrap: opening rank 0's segment %s",
                path);
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size != bytes || st.st_uid != geteuid()) {
    res = symm_error(SYMM_ERR_PERMISSION, "bootstrap: %s is not this job's segment", path);
    goto out;
  }
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    res = symm_error(SYMM_ERR_PERMISSION, "bootstrap: %s is not sealed against shrinking "
                     "(seals %d); refusing to map what rank 0 could cut short", path, seals);
    goto out;
  }
  shm_segment_t *seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (seg == MAP_FAILED) {
    res = symm_error_errno("bootstrap: mapping %s", path);
    goto out;
  }
  if (seg->magic != SHM_MAGIC) {
    munmap(seg, bytes);
    res = symm_error(SYMM_ERR_PERMISSION, "bootstrap: %s is not this job's segment", path);
    goto out;
  }
  *out = seg;
out:
  close(fd);
  return res;
}

symm_result_t symm_bootstrap_shm_init(symm_bootstrap_t *store_bs, symm_store_t *store,
                                      const char *prefix, const char *job_id, int index,
                                      const int32_t *pids, symm_bootstrap_t **out) {
  (void)job_id, (void)index;
  int rank = store_bs->rank, size = store_bs->size;
  size_t bytes = segment_bytes(size);
  symm_bootstrap_t *bs = calloc(1, sizeof *bs);
  shm_bs_t *s = calloc(1, sizeof *s);
  int32_t *pid_copy = calloc((size_t)size, sizeof *pid_copy);
  symm_result_t res = SYMM_SUCCESS;
  if (!bs || !s || !pid_copy) {
    free(bs);
    free(s);
    free(pid_copy);
    return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  }
  memcpy(pid_copy, pids, (size_t)size * sizeof *pid_copy);
  /* Rank 0 creates before anybody opens; everybody agrees on the outcome, so
   * that all ranks switch to shared memory or none does.  Rank 0 keeps its
   * descriptor open until every rank has had its chance to open it. */
  shm_segment_t *seg = NULL;
  int fd0 = -1;
  int32_t made[2] = {1, -1}; /* rank 0: created, and its descriptor */
  int32_t ok = 1, all_ok = 1;
  if (rank == 0) {
    made[0] = create_segment(bytes, size, &fd0, &seg) == SYMM_SUCCESS;
    made[1] = fd0;
  }
  SYMM_CHECK_GOTO(store_bs->ops->broadcast(store_bs, made, sizeof made, 0), res, fail);
  ok = made[0];
  if (rank != 0 && ok) {
    symm_result_t o = open_segment(pids[0], made[1], bytes, &seg);
    if (o != SYMM_SUCCESS)
      SYMM_INFO(BOOTSTRAP, "bootstrap: %s", symm_last_error());
    ok = o == SYMM_SUCCESS;
  }
  symm_fault_point(SYMM_FAULT_INIT_SHM, rank);
  int32_t *oks = calloc((size_t)size, sizeof *oks);
  if (!oks) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
    goto fail;
  }
  res = store_bs->ops->allgather(store_bs, &ok, sizeof ok, oks);
  for (int r = 0; r < size; r++) all_ok &= oks[r];
  free(oks);
  if (fd0 >= 0) close(fd0); /* mapped everywhere (or given up) */
  fd0 = -1;
  if (res != SYMM_SUCCESS) goto fail;
  if (!all_ok) {
    res = symm_error(SYMM_ERR_UNSUPPORTED, "bootstrap: shared memory segment unavailable on some "
                     "rank; staying with the store");
    goto fail;
  }
  bs->ops = &shm_bootstrap_ops;
  bs->rank = rank;
  bs->size = size;
  bs->timeout_ms = store_bs->timeout_ms;
  bs->state = s;
  s->seg = seg;
  s->seg_bytes = bytes;
  s->store = store;
  s->pids = pid_copy;
  snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
  *out = bs;
  return SYMM_SUCCESS;
fail:
  if (fd0 >= 0) close(fd0);
  if (seg) munmap(seg, bytes);
  free(pid_copy);
  free(s);
  free(bs);
  return res;
}

static bool shm_usable(const symm_bootstrap_env_t *env, char *why, size_t cap) {
  if (env->size < 2) snprintf(why, cap, "a single rank needs no exchange");
  else if (!env->single_host) snprintf(why, cap, "the ranks are on several hosts");
  else if (!symm_settings()->SYMM_BOOTSTRAP_SHM) snprintf(why, cap, "SYMM_BOOTSTRAP_SHM=0");
  else if (!env->over) snprintf(why, cap, "the ranks have not met yet");
  else if (!env->store) snprintf(why, cap, "no store for its large contributions");
  else return true;
  return false;
}

static symm_result_t shm_impl_init(const symm_bootstrap_env_t *env, symm_bootstrap_t **out) {
  return symm_bootstrap_shm_init(env->over, env->store, env->prefix, env->job_id, env->index,
                                 env->pids, out);
}

const symm_bootstrap_impl_t symm_bootstrap_shm_impl = {
    .name = "shm",
    .what = "shared memory",
    .layered = true,
    .usable = shm_usable,
    .init = shm_impl_init,
};
