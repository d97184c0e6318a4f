/* Bootstrap callbacks over the launcher's PMIx server (Open MPI's mpirun,
 * srun --mpi=pmix), libpmix loaded at run time, never linked.
 *
 * An all-gather is one round: every member puts its bytes under a key of
 * the round ("symm.<channel>.<round>", PMIX_GLOBAL), commits, fences with
 * the channel's members (collecting the data, bounded by PMIX_TIMEOUT),
 * then gets every member's value.  A channel is the job's ranks (the
 * wildcard) or a group made by split: its members' job ranks and an id
 * that every member derives alike (parent id, split number, color), so
 * keys of different groups and rounds never meet.
 *
 * Notes go through the same store without a fence: note_put puts and
 * commits "symm.<channel>.note.<key>"; note_get asks for it from each
 * member in turn with PMIX_IMMEDIATE, which makes the server answer from
 * what it holds now (not found, at once) instead of holding the request
 * until the value comes.  A server holds at once what the clients of its
 * own node commit; what a rank on another node commits after the last
 * fence it fetches only on request from that node, which IMMEDIATE
 * forbids, so a note reaches the ranks of the putter's node and the
 * others learn at their deadline.  PMIx keeps the last value put under a
 * key and the members' values differ, so each channel remembers the
 * notes it put or read, and the first one of a key stays.  No lost_rank:
 * Open MPI's launcher ends the whole job when a rank exits early, and
 * tells the others no event before it does.  The structs below are the
 * PMIx ABI's (v3 and later: pmix_value_t of 32 bytes). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_BOOTSTRAP
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symm_settings.h"
#include "store.h"

#define PX_NSLEN 256
#define PX_KEYLEN 512
#define PX_RANK_WILDCARD (UINT32_MAX - 1)
#define PX_BOOL 1
#define PX_UINT16 13
#define PX_UINT32 14
#define PX_INT 6
#define PX_STRING 3
#define PX_BYTE_OBJECT 27
#define PX_GLOBAL 3
#define PX_ERR_TIMEOUT (-24)
#define PX_ERR_UNREACH (-25)
#define PX_ERR_LOST_CONNECTION (-61)

typedef struct {
  char nspace[PX_NSLEN];
  uint32_t rank;
} px_proc_t;

typedef struct {
  uint16_t type;
  union {
    bool flag;
    int integer;
    char *string;
    uint16_t uint16;
    uint32_t uint32;
    struct {
      char *bytes;
      size_t size;
    } bo;
    char pad[24];
  } data;
} px_value_t;

typedef struct {
  char key[PX_KEYLEN];
  uint32_t flags;
  px_value_t value;
} px_info_t;

_Static_assert(sizeof(px_value_t) == 32, "pmix_value_t of PMIx v3 and later");
_Static_assert(sizeof(px_info_t) == 552, "pmix_info_t of PMIx v3 and later");

typedef struct {
  int (*init)(px_proc_t *, px_info_t *, size_t);
  int (*finalize)(const px_info_t *, size_t);
  int (*put)(uint8_t, const char *, px_value_t *);
  int (*commit)(void);
  int (*fence)(const px_proc_t *, size_t, const px_info_t *, size_t);
  int (*get)(const px_proc_t *, const char *, const px_info_t *, size_t, px_value_t **);
} px_lib_t;

/* The process's PMIx: loaded and initialised once, at its first channel,
 * and finalized when the process exits (or libsymmem is unloaded), not
 * with its last channel, since a process may make communicators one after
 * another and PMIx does not serve a client well that initialises again
 * after PMIx_Finalize (Open MPI 4.1's PMIx 4.2 then loses, now and then,
 * what peers on other hosts put: "not found" after the fence). */
static struct {
  pthread_mutex_t lock;
  px_lib_t lib;
  void *handle;
  px_proc_t me;
  uint32_t size;
  int local_rank, local_size;
  bool up;        /* PMIx_Init succeeded and was not finalized yet */
  pid_t pid;      /* the process that initialised it (not a fork()ed child) */
  bool exit_hook; /* px_finalize_at_exit is registered */
} px = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A note this channel put or read: "key\0value\0". */
typedef struct px_note {
  struct px_note *next;
  char text[];
} px_note_t;

typedef struct {
  uint64_t id, round;
  int splits;
  int rank, size;
  uint32_t *members; /* [size] job ranks; NULL: the whole job */
  px_note_t *notes;  /* the first value of each key, as this rank knows it */
} px_chan_t;

static symm_result_t px_load(char *why, size_t cap) {
  const char *named = symm_settings()->SYMM_PMIX_LIBRARY;
  const char *names[] = {named ? named : "libpmix.so.2", named ? NULL : "libpmix.so", NULL};
  for (int i = 0; names[i] && !px.handle; i++) px.handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!px.handle) {
    snprintf(why, cap, "libpmix not loadable (%s)", named ? named : "libpmix.so.2, libpmix.so");
    return SYMM_ERR_BACKEND_UNAVAILABLE;
  }
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&px.lib.init, "PMIx_Init"},     {(void **)&px.lib.finalize, "PMIx_Finalize"},
      {(void **)&px.lib.put, "PMIx_Put"},       {(void **)&px.lib.commit, "PMIx_Commit"},
      {(void **)&px.lib.fence, "PMIx_Fence"},   {(void **)&px.lib.get, "PMIx_Get"}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
    if (!(*syms[i].slot = dlsym(px.handle, syms[i].name))) {
      snprintf(why, cap, "libpmix lacks %s", syms[i].name);
      dlclose(px.handle);
      px.handle = NULL;
      return SYMM_ERR_BACKEND_UNAVAILABLE;
    }
  return SYMM_SUCCESS;
}

/* A job-level value of proc `rank` (wildcard: the job's) as uint32. */
static bool px_get_u32(uint32_t rank, const char *key, uint32_t *out) {
  px_proc_t p = px.me;
  p.rank = rank;
  px_value_t *v = NULL;
  if (px.lib.get(&p, key, NULL, 0, &v) != 0 || !v) return false;
  bool ok = v->type == PX_UINT32 || v->type == PX_UINT16;
  if (ok) *out = v->type == PX_UINT32 ? v->data.uint32 : v->data.uint16;
  free(v);
  return ok;
}

/* At exit (atexit, which runs at libsymmem's unloading too): the process
 * that initialised PMIx finalizes it, unless another thread is inside
 * px_start then. */
static void px_finalize_at_exit(void) {
  if (pthread_mutex_trylock(&px.lock) != 0) return;
  if (px.up && px.pid == getpid()) px.lib.finalize(NULL, 0);
  px.up = false;
  pthread_mutex_unlock(&px.lock);
}

static symm_result_t px_start(char *why, size_t cap) {
  symm_result_t res = SYMM_SUCCESS;
  pthread_mutex_lock(&px.lock);
  if (!px.up) {
    res = px.handle ? SYMM_SUCCESS : px_load(why, cap);
    int rc = res == SYMM_SUCCESS ? px.lib.init(&px.me, NULL, 0) : 0;
    uint32_t size = 0, lr = 0, ls = 0;
    if (res == SYMM_SUCCESS && rc != 0) {
      snprintf(why, cap, "PMIx_Init failed (status %d): no PMIx server reachable", rc);
      res = SYMM_ERR_BACKEND_UNAVAILABLE;
    } else if (res == SYMM_SUCCESS && !px_get_u32(PX_RANK_WILDCARD, "pmix.job.size", &size)) {
      snprintf(why, cap, "the PMIx server gave no job size");
      px.lib.finalize(NULL, 0);
      res = SYMM_ERR_BACKEND_UNAVAILABLE;
    }
    if (res == SYMM_SUCCESS) {
      px.size = size;
      px.local_rank = px_get_u32(px.me.rank, "pmix.lrank", &lr) ? (int)lr : -1;
      px.local_size = px_get_u32(PX_RANK_WILDCARD, "pmix.local.size", &ls) ? (int)ls : -1;
      px.up = true;
      px.pid = getpid();
      if (!px.exit_hook) px.exit_hook = atexit(px_finalize_at_exit) == 0;
    }
  }
  pthread_mutex_unlock(&px.lock);
  return res;
}

static int px_status(int rc) {
  if (rc == 0) return 0;
  if (rc == PX_ERR_TIMEOUT) return SYMM_ERR_TIMEOUT;
  if (rc == PX_ERR_UNREACH || rc == PX_ERR_LOST_CONNECTION) return SYMM_ERR_PEER_LOST;
  return SYMM_ERR_BACKEND;
}

static px_proc_t px_member(const px_chan_t *ch, int r) {
  px_proc_t p = px.me;
  p.rank = ch->members ? ch->members[r] : (uint32_t)r;
  return p;
}

/* The fence of ch's members, collecting their data, within timeout_ms. */
static int px_fence(const px_chan_t *ch, int timeout_ms) {
  px_info_t info[2];
  memset(info, 0, sizeof info);
  snprintf(info[0].key, sizeof info[0].key, "pmix.collect");
  info[0].value.type = PX_BOOL;
  info[0].value.data.flag = true;
  snprintf(info[1].key, sizeof info[1].key, "pmix.timeout");
  info[1].value.type = PX_INT;
  info[1].value.data.integer = (timeout_ms + 999) / 1000;
  if (!ch->members) {
    px_proc_t all = px.me;
    all.rank = PX_RANK_WILDCARD;
    return px.lib.fence(&all, 1, info, 2);
  }
  px_proc_t *procs = malloc(sizeof *procs * (size_t)ch->size);
  if (!procs) return SYMM_ERR_NO_MEMORY;
  for (int r = 0; r < ch->size; r++) procs[r] = px_member(ch, r);
  int rc = px.lib.fence(procs, (size_t)ch->size, info, 2);
  free(procs);
  return rc;
}

static int px_allgather(void *ctx, const void *send, void *recv, size_t len, int timeout_ms) {
  px_chan_t *ch = ctx;
  char key[96];
  snprintf(key, sizeof key, "symm.%016llx.%llu", (unsigned long long)ch->id,
           (unsigned long long)ch->round++);
  px_value_t v;
  memset(&v, 0, sizeof v);
  v.type = PX_BYTE_OBJECT;
  v.data.bo.bytes = (char *)send;
  v.data.bo.size = len;
  int rc = px_status(px.lib.put(PX_GLOBAL, key, &v));
  if (!rc) rc = px_status(px.lib.commit());
  if (!rc) rc = px_status(px_fence(ch, timeout_ms));
  for (int r = 0; !rc && r < ch->size; r++) {
    px_proc_t p = px_member(ch, r);
    px_value_t *got = NULL;
    rc = px_status(px.lib.get(&p, key, NULL, 0, &got));
    if (!rc && (!got || got->type != PX_BYTE_OBJECT || got->data.bo.size != len))
      rc = SYMM_ERR_PROTOCOL;
    if (!rc && len) memcpy((char *)recv + (size_t)r * len, got->data.bo.bytes, len);
    if (got && got->type == PX_BYTE_OBJECT) free(got->data.bo.bytes);
    free(got);
  }
  return rc;
}

static px_note_t *px_note_find(const px_chan_t *ch, const char *key) {
  for (px_note_t *n = ch->notes; n; n = n->next)
    if (strcmp(n->text, key) == 0) return n;
  return NULL;
}

static void px_note_keep(px_chan_t *ch, const char *key, const char *value) {
  const size_t kl = strlen(key) + 1, vl = strlen(value) + 1;
  px_note_t *n = malloc(sizeof *n + kl + vl);
  if (!n) return; /* a reader asks again; a putter may put again */
  memcpy(n->text, key, kl);
  memcpy(n->text + kl, value, vl);
  n->next = ch->notes;
  ch->notes = n;
}

static void px_note_key(const px_chan_t *ch, const char *key, char *out, size_t cap) {
  snprintf(out, cap, "symm.%016llx.note.%s", (unsigned long long)ch->id, key);
}

static int px_note_put(void *ctx, const char *key, const char *value) {
  px_chan_t *ch = ctx;
  if (px_note_find(ch, key)) return 0; /* the first value stays */
  char pkey[PX_KEYLEN];
  px_note_key(ch, key, pkey, sizeof pkey);
  px_value_t v;
  memset(&v, 0, sizeof v);
  v.type = PX_STRING;
  v.data.string = (char *)value;
  int rc = px_status(px.lib.put(PX_GLOBAL, pkey, &v));
  if (!rc) rc = px_status(px.lib.commit());
  if (!rc) px_note_keep(ch, key, value);
  return rc;
}

/* Member r's value of the note, if its node's server holds it now. */
static bool px_note_ask(const px_chan_t *ch, int r, const char *pkey, char *value, size_t cap) {
  px_info_t now;
  memset(&now, 0, sizeof now);
  snprintf(now.key, sizeof now.key, "pmix.immediate");
  now.value.type = PX_BOOL;
  now.value.data.flag = true;
  px_proc_t p = px_member(ch, r);
  px_value_t *got = NULL;
  const bool found = px.lib.get(&p, pkey, &now, 1, &got) == 0 && got &&
                     got->type == PX_STRING && got->data.string;
  if (found) snprintf(value, cap, "%s", got->data.string);
  if (got && got->type == PX_STRING) free(got->data.string);
  free(got);
  return found;
}

static int px_note_get(void *ctx, const char *key, char *value, size_t cap, int *found) {
  px_chan_t *ch = ctx;
  const px_note_t *n = px_note_find(ch, key);
  *found = n != NULL;
  if (n) {
    snprintf(value, cap, "%s", n->text + strlen(n->text) + 1);
    return 0;
  }
  char pkey[PX_KEYLEN], text[1024];
  px_note_key(ch, key, pkey, sizeof pkey);
  for (int r = 0; r < ch->size && !*found; r++)
    if (r != ch->rank && px_note_ask(ch, r, pkey, text, sizeof text)) {
      px_note_keep(ch, key, text);
      snprintf(value, cap, "%s", text);
      *found = 1;
    }
  return 0;
}

static void px_release(void *ctx) {
  px_chan_t *ch = ctx;
  for (px_note_t *n = ch->notes, *next; n; n = next) {
    next = n->next;
    free(n);
  }
  free(ch->members);
  free(ch);
}

static void px_fill(px_chan_t *ch, symm_bootstrap_callbacks_t *cb);

/* ch's members of `color` in (key, rank) order: their indices in *idx. */
static int px_group(const px_chan_t *ch, const int32_t *all, int color, int *idx) {
  int n = 0;
  for (int r = 0; r < ch->size; r++) {
    if (all[2 * r] != color) continue;
    int at = n++;
    while (at > 0 && all[2 * idx[at - 1] + 1] > all[2 * r + 1]) idx[at] = idx[at - 1], at--;
    idx[at] = r; /* equal keys keep rank order */
  }
  return n;
}

/* MPI_Comm_split's contract: the members of each color ranked by key. */
static int px_split(void *ctx, int color, int key, symm_bootstrap_callbacks_t *child,
                    int timeout_ms) {
  px_chan_t *ch = ctx;
  int32_t mine[2] = {color, key}, *all = malloc(sizeof mine * (size_t)ch->size);
  int *idx = malloc(sizeof *idx * (size_t)ch->size);
  int rc = all && idx ? px_allgather(ch, mine, all, sizeof mine, timeout_ms) : SYMM_ERR_NO_MEMORY;
  const int split = ++ch->splits;
  px_chan_t *sub = NULL;
  if (!rc && color >= 0) {
    sub = calloc(1, sizeof *sub);
    if (!sub || !(sub->members = malloc(sizeof(uint32_t) * (size_t)ch->size))) rc = SYMM_ERR_NO_MEMORY;
  }
  if (!rc && sub) {
    sub->size = px_group(ch, all, color, idx);
    for (int i = 0; i < sub->size; i++) {
      sub->members[i] = px_member(ch, idx[i]).rank;
      if (idx[i] == ch->rank) sub->rank = i;
    }
    uint64_t f[3] = {ch->id, (uint64_t)split, (uint64_t)(uint32_t)color};
    sub->id = symm_hash64(f, sizeof f, 0x706d6978ull);
    px_fill(sub, child);
  } else if (sub) {
    free(sub->members);
    free(sub);
  }
  free(all);
  free(idx);
  return rc;
}

static void px_fill(px_chan_t *ch, symm_bootstrap_callbacks_t *cb) {
  *cb = (symm_bootstrap_callbacks_t)SYMM_BOOTSTRAP_CALLBACKS_INIT;
  cb->rank = ch->rank;
  cb->world_size = ch->size;
  cb->local_rank = ch->members ? -1 : px.local_rank;
  cb->local_size = ch->members ? -1 : px.local_size;
  cb->ctx = ch;
  cb->allgather = px_allgather;
  cb->split = px_split;
  cb->release = px_release;
  cb->note_put = px_note_put;
  cb->note_get = px_note_get;
}

bool symm_pmix_present(void) {
  const char *ns = getenv("PMIX_NAMESPACE"), *rank = getenv("PMIX_RANK");
  return ns && *ns && rank && *rank;
}

symm_result_t symm_pmix_bootstrap(symm_bootstrap_callbacks_t **out) {
  char why[256] = "";
  *out = NULL;
  if (!symm_pmix_present())
    return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "SYMM_BOOTSTRAP=pmix: no PMIx server in the "
                      "environment (PMIX_NAMESPACE, PMIX_RANK unset): launch under a PMIx "
                      "launcher (mpirun, srun --mpi=pmix)");
  symm_result_t res = px_start(why, sizeof why);
  if (res != SYMM_SUCCESS) return symm_error(res, "SYMM_BOOTSTRAP=pmix: %s", why);
  px_chan_t *ch = calloc(1, sizeof *ch);
  symm_bootstrap_callbacks_t *cb = malloc(sizeof *cb);
  if (!ch || !cb) {
    free(ch), free(cb);
    return symm_error(SYMM_ERR_NO_MEMORY, "bootstrap: out of memory");
  }
  ch->rank = (int)px.me.rank;
  ch->size = (int)px.size;
  /* Each communicator its own keys: the ranks make them in the same order. */
  static _Atomic uint64_t made;
  uint64_t f[2] = {symm_hash64(px.me.nspace, strnlen(px.me.nspace, PX_NSLEN), 0), made++};
  ch->id = symm_hash64(f, sizeof f, 0x706d6978ull);
  px_fill(ch, cb);
  *out = cb;
  return SYMM_SUCCESS;
}
