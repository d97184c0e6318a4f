/* Bootstrap collectives through shared memory, for communicators whose ranks
 * all run on one host: a round costs a few cache-line transfers instead of a
 * TCP round trip to the store.
 *
 * Segment: a memfd of rank 0 that the others open through /proc (no name
 * in /dev/shm at any time); a header, then one slot per rank.  A slot holds `published` (the
 * number of the last collective whose contribution is in place) and two
 * data buffers; collective k uses buffer k & 1.  A rank enters collective
 * k + 1 only after every rank published k, hence after every rank finished
 * k - 1: nobody can still be reading the buffer that k + 1 overwrites.
 *
 * Contributions larger than a buffer go through the store under a per-round
 * key, and the slot carries a marker instead.  Waits back off as the host
 * backend's do (symm_backoff_*: spin, yield, sleep) and are bounded by the
 * timeout; a rank whose process is gone is reported as lost (all ranks
 * share the host, so its pid says). */
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

#include "backends/util/backoff.h"
#include "store.h"
#include "symm_fault.h"

#define SHM_MAGIC 0x53594d42534d4831ull /* "SYMBSMH1" */
#define SHM_BUF_BYTES (16u << 10)
#define SHM_IN_STORE UINT32_MAX          /* len marker: the data is in the store */

typedef struct {
  _Alignas(64) _Atomic uint64_t published;
  uint32_t len[2];
  _Alignas(64) uint8_t data[2][SHM_BUF_BYTES];
} shm_slot_t;

typedef struct {
  uint64_t magic;
  uint32_t size, buf_bytes;
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
} shm_bs_t;

static size_t segment_bytes(int size) {
  return sizeof(shm_segment_t) + (size_t)size * sizeof(shm_slot_t);
}

static void store_key(const shm_bs_t *s, uint64_t seq, int rank, char *out, size_t cap) {
  snprintf(out, cap, "%sshm/%llu/%d", s->prefix, (unsigned long long)seq, rank);
}

/* Waits for rank r's contribution to collective seq until deadline_ns,
 * which all the waits of one collective share. */
static symm_result_t wait_published(symm_bootstrap_t *bs, int r, uint64_t seq,
                                    uint64_t deadline_ns) {
  shm_bs_t *s = bs->state;
  _Atomic uint64_t *flag = &s->seg->slots[r].published;
  if (atomic_load_explicit(flag, memory_order_acquire) >= seq) return SYMM_SUCCESS;
  symm_backoff_t b;
  symm_backoff_start_until(&b, deadline_ns, bs->size); /* every rank is on this host */
  symm_backoff_watch(&b, s->pids[r]);
  while (atomic_load_explicit(flag, memory_order_acquire) < seq) {
    if (symm_backoff_pause(&b)) continue;
    if (b.lost)
      return symm_error(SYMM_ERR_PEER_LOST, "bootstrap: rank %d (pid %d) is gone (collective "
                        "#%llu)", r, (int)s->pids[r], (unsigned long long)seq);
    return symm_error(SYMM_ERR_TIMEOUT, "bootstrap: rank %d did not arrive within %d ms "
                      "(collective #%llu)", r, bs->timeout_ms, (unsigned long long)seq);
  }
  return SYMM_SUCCESS;
}

static symm_result_t shm_gather(symm_bootstrap_t *bs, const void *send, size_t len,
                                void **values, size_t *lens) {
  shm_bs_t *s = bs->state;
  uint64_t seq = ++s->seq;
  int b = (int)(seq & 1);
  shm_slot_t *mine = &s->seg->slots[bs->rank];
  char key[192];
  symm_result_t res = SYMM_SUCCESS;
  for (int r = 0; r < bs->size; r++) values[r] = NULL;
  bool old_in_store = s->in_store[b];
  s->in_store[b] = len > SHM_BUF_BYTES;
  if (len <= SHM_BUF_BYTES) {
    if (len) memcpy(mine->data[b], send, len);
    mine->len[b] = (uint32_t)len;
  } else {
    store_key(s, seq, bs->rank, key, sizeof key);
    SYMM_CHECK(symm_store_set_own(s->store, key, send, len));
    mine->len[b] = SHM_IN_STORE;
  }
  atomic_store_explicit(&mine->published, seq, memory_order_release);
  /* One timeout for the whole collective, not one per rank waited for. */
  const uint64_t deadline_ns = symm_deadline_after(bs->timeout_ms);
  for (int i = 0; i < bs->size && res == SYMM_SUCCESS; i++) {
    int r = (bs->rank + i) % bs->size;
    SYMM_CHECK_GOTO(wait_published(bs, r, seq, deadline_ns), res, fail);
    const shm_slot_t *slot = &s->seg->slots[r];
    uint32_t n = slot->len[b];
    if (n == SHM_IN_STORE) {
      store_key(s, seq, r, key, sizeof key);
      const char *k = key;
      SYMM_CHECK_GOTO(symm_store_multi_get(s->store, &k, 1, &values[r], &lens[r],
                                           symm_ms_until(deadline_ns)), res, fail);
      continue;
    }
    if (n > SHM_BUF_BYTES) {
      res = symm_error(SYMM_ERR_PROTOCOL, "bootstrap: rank %d published %u bytes", r, n);
      goto fail;
    }
    values[r] = malloc(n ? n : 1);
    if (!values[r]) {
      res = symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
      goto fail;
    }
    memcpy(values[r], slot->data[b], n);
    lens[r] = n;
  }
  /* Every rank has published this round, so all have finished reading the
   * one two rounds ago: its store key, if any, can go. */
  if (seq > 2 && old_in_store) {
    store_key(s, seq - 2, bs->rank, key, sizeof key);
    if (symm_store_delete_own(s->store, key) != SYMM_SUCCESS) symm_error_clear();
  }
  return SYMM_SUCCESS;
fail:
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
  SYMM_SYSCHECK(fd = memfd_create("symmem-bootstrap", MFD_CLOEXEC), "bootstrap: memfd_create");
  SYMM_SYSCHECK_GOTO(ftruncate(fd, (off_t)bytes), res, fail, "bootstrap: sizing the segment");
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
