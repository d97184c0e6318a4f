/* The tests' bootstrap callbacks over a shared segment (cb_channel.h). */
#include "cb_channel.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define CB_SLOT ((size_t)256 << 10) /* bytes one rank sends in one round */
#define CB_NOTES 16
#define CB_KEY 256
#define CB_VALUE 1024

enum { NOTE_FREE, NOTE_WRITING, NOTE_READY };

typedef struct {
  _Atomic int state;
  char key[CB_KEY];
  char value[CB_VALUE];
} cb_note_t;

/* Per rank, the last round it published and its pid; the data of each
 * round parity; the notes. */
struct cb_region {
  _Atomic uint64_t seq[CB_CHANNEL_MAX_RANKS];
  _Atomic int32_t pid[CB_CHANNEL_MAX_RANKS];
  cb_note_t notes[CB_NOTES];
  unsigned char data[2][CB_CHANNEL_MAX_RANKS][CB_SLOT];
};

static cb_region_t *segment; /* CB_CHANNEL_REGIONS regions, mapped before the fork */

void cb_channel_map(void) {
  if (segment) return;
  segment = mmap(NULL, sizeof(cb_region_t) * CB_CHANNEL_REGIONS, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(segment != MAP_FAILED);
}

static bool pid_gone(int32_t pid);

/* Waits until every rank of ch published round `round`: SYMM_ERR_PEER_LOST
 * when one it waits for is gone, SYMM_ERR_TIMEOUT at the deadline. */
static int wait_round(cb_channel_t *ch, uint64_t round, int timeout_ms) {
  const uint64_t end = test_now_ms() + (uint64_t)timeout_ms;
  for (int r = 0; r < ch->size; r++)
    for (unsigned spins = 0; atomic_load(&ch->r->seq[r]) < round; spins++) {
      if (test_now_ms() >= end) return SYMM_ERR_TIMEOUT;
      if (spins % 1024 == 1023 && pid_gone(atomic_load(&ch->r->pid[r])))
        return SYMM_ERR_PEER_LOST;
      sched_yield();
    }
  return 0;
}

static int cb_allgather(void *ctx, const void *send, void *recv, size_t len, int timeout_ms) {
  cb_channel_t *ch = ctx;
  ch->calls++;
  if (ch->fail_code && ch->rank == ch->fail_rank && ch->round + 1 >= ch->fail_at) {
    if (ch->fail_code == SYMM_ERR_TIMEOUT) usleep((useconds_t)timeout_ms * 1000);
    return ch->fail_code;
  }
  if (len > CB_SLOT) return SYMM_ERR_INVALID_ARG;
  const uint64_t k = ++ch->round;
  /* Round k reuses the data of k - 2: every rank has read it once every
   * rank published k - 1. */
  int rc = k > 1 ? wait_round(ch, k - 1, timeout_ms) : 0;
  if (rc) return rc;
  memcpy(ch->r->data[k & 1][ch->rank], send, len);
  atomic_store(&ch->r->seq[ch->rank], k);
  if ((rc = wait_round(ch, k, timeout_ms))) return rc;
  for (int r = 0; r < ch->size; r++)
    memcpy((char *)recv + (size_t)r * len, ch->r->data[k & 1][r], len);
  return 0;
}

/* The ready note of `key`, NULL if none. */
static const cb_note_t *find_note(const cb_channel_t *ch, const char *key) {
  for (int i = 0; i < CB_NOTES; i++) {
    const cb_note_t *n = &ch->r->notes[i];
    if (atomic_load(&n->state) == NOTE_READY && strcmp(n->key, key) == 0) return n;
  }
  return NULL;
}

static int cb_note_put(void *ctx, const char *key, const char *value) {
  cb_channel_t *ch = ctx;
  if (strlen(key) >= CB_KEY || strlen(value) >= CB_VALUE) return SYMM_ERR_INVALID_ARG;
  if (find_note(ch, key)) return 0; /* the first value stays */
  for (int i = 0; i < CB_NOTES; i++) {
    cb_note_t *n = &ch->r->notes[i];
    int expected = NOTE_FREE;
    if (!atomic_compare_exchange_strong(&n->state, &expected, NOTE_WRITING)) continue;
    snprintf(n->key, sizeof n->key, "%s", key);
    snprintf(n->value, sizeof n->value, "%s", value);
    atomic_store(&n->state, NOTE_READY);
    return 0;
  }
  return SYMM_ERR_NO_MEMORY;
}

static int cb_note_get(void *ctx, const char *key, char *value, size_t cap, int *found) {
  cb_channel_t *ch = ctx;
  ch->note_gets++;
  const cb_note_t *n = find_note(ch, key);
  *found = n != NULL;
  if (n) snprintf(value, cap, "%s", n->value);
  return 0;
}

/* A rank whose recorded pid names no process (reaped) or a zombie. */
static bool pid_gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], state = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  const bool read = fscanf(f, "%*d (%*[^)]) %c", &state) == 1;
  fclose(f);
  return read && state == 'Z';
}

static int cb_lost_rank(void *ctx) {
  cb_channel_t *ch = ctx;
  for (int r = 0; r < ch->size; r++)
    if (r != ch->rank && pid_gone(atomic_load(&ch->r->pid[r]))) return r;
  return -1;
}

/* MPI_Comm_split's contract over the channel: the members of each color,
 * ranked by key, in a region named by the parent's region, its split
 * count and the color (distinct for the few splits a test makes). */
static int cb_split(void *ctx, int color, int key, symm_bootstrap_callbacks_t *child,
                    int timeout_ms) {
  cb_channel_t *ch = ctx;
  int mine[2] = {color, key}, all[2 * CB_CHANNEL_MAX_RANKS];
  int rc = cb_allgather(ch, mine, all, sizeof mine, timeout_ms);
  if (rc) return rc;
  ch->splits++;
  if (color < 0) return 0;
  int rank = 0, size = 0;
  for (int r = 0; r < ch->size; r++) {
    if (all[2 * r] != color) continue;
    size++;
    rank += all[2 * r + 1] < key || (all[2 * r + 1] == key && r < ch->rank);
  }
  const int region = 1 + (ch->region * 7 + ch->splits * 5 + color) % (CB_CHANNEL_REGIONS - 1);
  cb_channel_t *sub = calloc(1, sizeof *sub);
  if (!sub) return SYMM_ERR_NO_MEMORY;
  cb_channel_open(sub, region, rank, size, ch->version, child);
  return 0;
}

static void cb_release(void *ctx) { free(ctx); }

void cb_channel_open(cb_channel_t *ch, int region, int rank, int size, unsigned version,
                     symm_bootstrap_callbacks_t *cb) {
  ASSERT(segment && size <= CB_CHANNEL_MAX_RANKS && region < CB_CHANNEL_REGIONS);
  *ch = (cb_channel_t){.r = &segment[region], .region = region, .rank = rank, .size = size,
                       .version = version};
  atomic_store(&ch->r->pid[rank], (int32_t)getpid());
  *cb = (symm_bootstrap_callbacks_t)SYMM_BOOTSTRAP_CALLBACKS_INIT;
  cb->rank = rank;
  cb->world_size = size;
  cb->ctx = ch;
  cb->allgather = cb_allgather;
  cb->split = cb_split;
  cb->release = cb_release;
  if (version < 2) {
    /* As a caller compiled against the first version would pass it. */
    cb->version = 1;
    cb->size = offsetof(symm_bootstrap_callbacks_t, note_put);
    return;
  }
  cb->note_put = cb_note_put;
  cb->note_get = cb_note_get;
  cb->lost_rank = cb_lost_rank;
}

void cb_channel_forget_store(void) {
  unsetenv("SYMM_STORE_ADDR");
  unsetenv("SYMM_TOKEN");
  unsetenv("MASTER_ADDR");
}

symm_result_t cb_channel_comm_init(symm_bootstrap_callbacks_t *cb, symm_backend_t backend,
                                   int timeout_ms, symm_comm_t **comm) {
  symm_config_t cfg = SYMM_CONFIG_INIT;
  cfg.bootstrap = cb;
  cfg.backend = backend;
  cfg.timeout_ms = timeout_ms;
  return symm_comm_init(&cfg, comm);
}
