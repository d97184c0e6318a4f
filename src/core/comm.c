/* Communicator lifecycle: identity from config or launcher environment,
 * store connection (serving it on rank 0 when nobody else does, by the
 * bootstrap's store_serving.c), bootstrap, backend choice agreed by all
 * ranks, backend init/startup, teardown. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_INIT
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "internal.h"
#include "symm_fault.h"
#include "symm_peer_watch.h"

/* ---------------------------------------------------- identity resolution */

/* First variable in `names` that is set to an integer; -1 if none. */
static int env_first_int(const char *const *names) {
  for (; *names; names++) {
    const char *v = getenv(*names);
    if (!v || !*v) continue;
    char *end;
    long x = strtol(v, &end, 10);
    if (end != v && *end == 0 && x >= 0 && x <= 1 << 24) return (int)x;
  }
  return -1;
}

static const char *const rank_vars[] = {"SYMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
                                        "PMI_RANK", "SLURM_PROCID", NULL};
static const char *const size_vars[] = {"SYMM_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                        "PMI_SIZE", "SLURM_NTASKS", NULL};
static const char *const local_rank_vars[] = {"SYMM_LOCAL_RANK", "LOCAL_RANK",
                                              "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                              "SLURM_LOCALID", NULL};
static const char *const local_size_vars[] = {"SYMM_LOCAL_SIZE", "LOCAL_WORLD_SIZE",
                                              "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                              NULL};

typedef struct {
  symm_config_t cfg;       /* caller's config, fields filled from env */
  char store_addr[256];
  const char *token;
  char own_token[33];      /* made here for a lone process's own store */
  bool serve;
  bool job_ranks;          /* rank and world size are the launcher's (environment) */
  symm_bootstrap_callbacks_t *owned; /* cfg.bootstrap when a split made it */
  void *split_handle;      /* a group's: what the parent's ops->split made for it; on
                              return, what its backend's init did not take */
} resolved_config_t;

static symm_result_t resolve_common(resolved_config_t *rc);

/* The identity a config with callbacks takes from them; no store. */
static symm_result_t resolve_callbacks(resolved_config_t *rc) {
  symm_config_t *c = &rc->cfg;
  const symm_bootstrap_callbacks_t *cb = c->bootstrap;
  static const char fn[] = "symm_comm_init";
  if (cb->size < offsetof(symm_bootstrap_callbacks_t, abort) || cb->version < 1)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: bootstrap callbacks not initialised with "
                      "SYMM_BOOTSTRAP_CALLBACKS_INIT (size %zu, version %u)", fn, cb->size,
                      cb->version);
  if (!cb->allgather)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the bootstrap callbacks have no allgather", fn);
  if (cb->world_size < 1 || cb->rank < 0 || cb->rank >= cb->world_size)
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the bootstrap callbacks give rank %d of %d", fn,
                      cb->rank, cb->world_size);
  if ((c->rank >= 0 && c->rank != cb->rank) ||
      (c->world_size >= 0 && c->world_size != cb->world_size))
    return symm_error(SYMM_ERR_INVALID_ARG, "%s: the config says rank %d of %d, its bootstrap "
                      "callbacks rank %d of %d", fn, c->rank, c->world_size, cb->rank,
                      cb->world_size);
  c->rank = cb->rank;
  c->world_size = cb->world_size;
  c->local_rank = cb->local_rank >= 0 ? cb->local_rank : c->local_rank;
  c->local_size = cb->local_size >= 0 ? cb->local_size : c->local_size;
  rc->serve = false;
  return resolve_common(rc);
}

static symm_result_t resolve_store(resolved_config_t *rc);

/* Whether a store address is configured anywhere (config, SYMM_STORE_ADDR,
 * MASTER_ADDR). */
static bool store_configured(const symm_config_t *c) {
  const char *addr = c->store_addr ? c->store_addr : symm_settings()->SYMM_STORE_ADDR;
  const char *master = getenv("MASTER_ADDR");
  return (addr && *addr) || (master && *master);
}

/* SYMM_BOOTSTRAP: pmix when asked, or under auto where a PMIx server is in
 * the environment and no store is configured (and libpmix loads); the
 * callbacks made are the communicator's (rc->owned). */
static symm_result_t choose_pmix(resolved_config_t *rc) {
  enum { AUTO = 0, STORE = 1, PMIX = 2 };
  const int how = (int)symm_settings()->SYMM_BOOTSTRAP.index;
  if (how == STORE || (how == AUTO && (!symm_pmix_present() || store_configured(&rc->cfg))))
    return SYMM_SUCCESS;
  symm_bootstrap_callbacks_t *cb = NULL;
  symm_result_t res = symm_pmix_bootstrap(&cb);
  if (res != SYMM_SUCCESS) {
    if (how == PMIX) return res;
    SYMM_INFO(INIT, "bootstrap: not through PMIx (%s); through the store", symm_last_error());
    symm_error_clear();
    return SYMM_SUCCESS;
  }
  SYMM_INFO(INIT, "bootstrap: through the launcher's PMIx server (rank %d of %d)", cb->rank,
            cb->world_size);
  rc->cfg.bootstrap = cb;
  rc->owned = cb;
  return SYMM_SUCCESS;
}

static symm_result_t resolve_config(const symm_config_t *user, resolved_config_t *rc) {
  symm_config_t defaults = SYMM_CONFIG_INIT;
  rc->cfg = defaults;
  if (user) {
    if (user->size < offsetof(symm_config_t, store_server) + sizeof(int) || user->version < 1)
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "symm_comm_init: config not initialised with SYMM_CONFIG_INIT "
                        "(size %zu, version %u)", user->size, user->version);
    if (user->version > SYMM_CONFIG_VERSION)
      return symm_error(SYMM_ERR_INVALID_ARG,
                        "symm_comm_init: config version %u is newer than this library's (%u): "
                        "the program was built against a newer symmem.h", user->version,
                        (unsigned)SYMM_CONFIG_VERSION);
    /* Copy only what the caller's struct has. */
    memcpy(&rc->cfg, user, user->size < sizeof rc->cfg ? user->size : sizeof rc->cfg);
    if (user->version < 2 || user->size < offsetof(symm_config_t, signal_pad_bytes) +
                                               sizeof user->signal_pad_bytes)
      rc->cfg.signal_pad_bytes = 0;
    if (user->version < 3 ||
        user->size < offsetof(symm_config_t, bootstrap) + sizeof user->bootstrap)
      rc->cfg.bootstrap = NULL;
  }
  symm_config_t *c = &rc->cfg;
  if (!c->bootstrap) SYMM_CHECK(choose_pmix(rc));
  if (c->bootstrap) return resolve_callbacks(rc);
  const int env_rank = env_first_int(rank_vars), env_size = env_first_int(size_vars);
  if (c->rank < 0) c->rank = env_rank;
  if (c->world_size < 0) c->world_size = env_size;
  /* Then this process has this rank in every communicator numbered so,
   * which lets the store report it lost in one it never joined. */
  rc->job_ranks = env_rank >= 0 && c->rank == env_rank && c->world_size == env_size;
  if (c->rank < 0 && c->world_size < 0) {
    c->rank = 0;
    c->world_size = 1;
  }
  if (c->world_size < 1 || c->rank < 0 || c->rank >= c->world_size)
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "symm_comm_init: rank %d out of range for world size %d (set both in the "
                      "config or in the environment, e.g. with symmem-run)", c->rank, c->world_size);
  if (c->local_rank < 0) c->local_rank = env_first_int(local_rank_vars);
  if (c->local_size < 0) c->local_size = env_first_int(local_size_vars);
  SYMM_CHECK(resolve_common(rc));
  return resolve_store(rc);
}

/* Backend, timeout, device and pad size, whatever the ranks meet through. */
static symm_result_t resolve_common(resolved_config_t *rc) {
  symm_config_t *c = &rc->cfg;
  if (c->backend == SYMM_BACKEND_AUTO) {
    const char *name = symm_settings()->SYMM_BACKEND;
    symm_backend_t b;
    SYMM_CHECK(symm_backend_from_name(name, &b));
    c->backend = b;
  } else if (!symm_backend_find(c->backend)) {
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_init: backend value %d out of range",
                      (int)c->backend);
  }
  if (c->timeout_ms < 0)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_init: timeout_ms %d is negative (0: "
                      "SYMM_TIMEOUT_MS)", c->timeout_ms);
  if (c->timeout_ms == 0) c->timeout_ms = (int)symm_settings()->SYMM_TIMEOUT_MS;
  if (c->timeout_ms <= 0) c->timeout_ms = 60000;
  if (c->device < 0) c->device = (int)symm_settings()->SYMM_DEVICE;
  if (c->signal_pad_bytes == 0) c->signal_pad_bytes = symm_settings()->SYMM_SIGNAL_PAD_BYTES;
  if (c->signal_pad_bytes % SYMM_SIGNAL_PAD_MIN_BYTES || c->signal_pad_bytes > (1u << 20))
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_init: signal_pad_bytes %zu is not a "
                      "multiple of %d in [%d, 1 MiB]", c->signal_pad_bytes,
                      SYMM_SIGNAL_PAD_MIN_BYTES, SYMM_SIGNAL_PAD_MIN_BYTES);
  return SYMM_SUCCESS;
}

/* The store's address and token, and whether this rank serves it. */
static symm_result_t resolve_store(resolved_config_t *rc) {
  symm_config_t *c = &rc->cfg;
  /* Store address: config, SYMM_STORE_ADDR, MASTER_ADDR + SYMM_STORE_PORT. */
  const char *addr = c->store_addr ? c->store_addr : symm_settings()->SYMM_STORE_ADDR;
  const char *master = getenv("MASTER_ADDR");
  if (addr && *addr) {
    snprintf(rc->store_addr, sizeof rc->store_addr, "%s", addr);
  } else if (master && *master) {
    snprintf(rc->store_addr, sizeof rc->store_addr, "%s:%d", master,
             (int)symm_settings()->SYMM_STORE_PORT);
  } else if (c->world_size > 1) {
    return symm_error(SYMM_ERR_INVALID_ARG,
                      "symm_comm_init: %d ranks but no store address: launch with symmem-run, "
                      "or set SYMM_STORE_ADDR=host:port (or MASTER_ADDR and SYMM_STORE_PORT)",
                      c->world_size);
  }
  rc->token = c->token ? c->token : symm_settings()->SYMM_TOKEN;
  if (!rc->token) rc->token = "";
  rc->serve = symm_store_serves(c->store_server, c->rank, rc->store_addr[0] != 0);
  /* A lone process with no address serves itself on an ephemeral port,
   * with a token of its own: nobody else needs to reach that store, and any
   * local user could otherwise. */
  if (!rc->store_addr[0] && !rc->token[0]) {
    symm_random_hex(rc->own_token, 16);
    rc->token = rc->own_token;
  }
  return SYMM_SUCCESS;
}

/* -------------------------------------------------------- store + bootstrap */

static symm_result_t connect_store(symm_comm_t *comm, resolved_config_t *rc) {
  char host[256];
  int port = 0;
  if (rc->store_addr[0])
    SYMM_CHECK(symm_store_parse_addr(rc->store_addr, host, sizeof host, &port));
  if (rc->serve) {
    const symm_store_serve_args_t serve = {.port = port, .token = rc->token,
                                           .rank = comm->rank, .size = comm->size,
                                           .index = (uint32_t)comm->index};
    symm_result_t res = symm_store_serve(&serve, rc->store_addr, sizeof rc->store_addr,
                                         &comm->server, &comm->server_shared);
    if (res != SYMM_SUCCESS) return res;
  }
  symm_result_t res = symm_store_connect_rank(rc->store_addr, rc->token, comm->rank,
                                              (uint32_t)comm->index, rc->job_ranks,
                                              comm->timeout_ms, &comm->store);
  const int server_rank = symm_store_serving_rank(rc->cfg.store_server, rc->serve, comm->rank);
  if (res != SYMM_SUCCESS) {
    char by[40] = "";
    if (server_rank >= 0) snprintf(by, sizeof by, " (served by rank %d)", server_rank);
    symm_error_context("rank %d connecting to the store at %s%s", comm->rank, rc->store_addr,
                       by);
    return res;
  }
  symm_store_set_timeout(comm->store, comm->timeout_ms);
  symm_store_set_server_rank(comm->store, server_rank);
  symm_store_set_size(comm->store, comm->size);
  /* Where its groups (symm_comm_split) meet: the same store. */
  snprintf(comm->store_addr, sizeof comm->store_addr, "%s", rc->store_addr);
  snprintf(comm->token, sizeof comm->token, "%s", rc->token);
  return SYMM_SUCCESS;
}

/* ------------------------------------------------ settings ranks share */

/* What each rank publishes first: the settings that must agree
 * (SYMM_SETTING_AGREE) as text, after this header. */
typedef struct {
  uint32_t magic, abi;
  int32_t rank, size;
  uint64_t digest; /* of the text */
  uint32_t text_len;
  uint32_t reserved; /* 0: no padding goes out unwritten */
} agree_hdr_t;

#define AGREE_MAGIC 0x53594d41u /* "SYMA" */

/* The values in force for this communicator: the settings, with what the
 * config chose in place of the variables it overrides. */
static size_t agreed_text(const symm_comm_t *comm, const resolved_config_t *rc, char *out,
                          size_t cap) {
  symm_settings_t eff = *symm_settings();
  eff.SYMM_WORLD_SIZE = comm->size;
  if (rc->cfg.job_id) eff.SYMM_JOB_ID = rc->cfg.job_id;
  eff.SYMM_BACKEND = symm_backend_name(rc->cfg.backend);
  return symm_settings_agreed_text(&eff, out, cap);
}

/* A peer's message, checked where it is read; NULL text if malformed. */
static const char *agree_text_of(const void *value, size_t len, agree_hdr_t *h) {
  if (len < sizeof *h) return NULL;
  memcpy(h, value, sizeof *h);
  if (h->magic != AGREE_MAGIC || h->text_len != len - sizeof *h || h->text_len == 0) return NULL;
  const char *text = (const char *)value + sizeof *h;
  if (text[h->text_len - 1] != 0) return NULL;
  return text;
}

/* Compares this rank's settings with rank `peer`'s message; SYMM_SUCCESS
 * if they agree, else SYMM_ERR_MISMATCH with the message in why. */
static symm_result_t agree_compare(int me, const agree_hdr_t *mine, const char *my_text,
                                   int peer, const void *value, size_t len, char *why,
                                   size_t cap) {
  agree_hdr_t h;
  const char *text = agree_text_of(value, len, &h);
  if (!text) {
    snprintf(why, cap, "init: rank %d sent a malformed settings message (%zu bytes): not "
             "symmem, or another version", peer, len);
    return SYMM_ERR_PROTOCOL;
  }
  if (h.abi != mine->abi) {
    snprintf(why, cap, "init: rank %d runs symmem ABI %u, rank %d ABI %u", peer, h.abi, me,
             mine->abi);
    return SYMM_ERR_MISMATCH;
  }
  if (h.digest == mine->digest && strcmp(text, my_text) == 0) return SYMM_SUCCESS;
  char name[128], a[256], b[256];
  if (!symm_settings_first_difference(my_text, text, name, a, b, sizeof a))
    snprintf(name, sizeof name, "(none)"); /* same text, other digest: a peer's bug */
  const int lo = me < peer ? me : peer, hi = me < peer ? peer : me;
  snprintf(why, cap, "init: ranks disagree on %s, which must be the same on every rank: "
           "rank %d has %s, rank %d has %s", name, lo, lo == me ? a : b, hi, hi == me ? a : b);
  return SYMM_ERR_MISMATCH;
}

/* The error for ranks whose settings did not come within the timeout:
 * those of keys[from..n) the store lacks (absent, from its TIMEOUT answer,
 * else asked now).  A store that did not answer keeps its own message. */
static symm_result_t agree_missing(symm_comm_t *comm, const char *const *keys, int from,
                                   const uint8_t *absent) {
  char missing[256] = "", saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  bool told = false;
  for (int r = from; absent && r < comm->size; r++) told |= absent[r - from] != 0;
  size_t n = 0;
  for (int r = from; r < comm->size && n + 16 < sizeof missing; r++) {
    int present = told && !absent[r - from];
    if (!told && symm_store_check(comm->store, &keys[r], 1, &present) != SYMM_SUCCESS) {
      symm_error_restore(saved);
      return SYMM_ERR_TIMEOUT;
    }
    if (!present) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? "," : "", r);
  }
  if (!n) {
    symm_error_restore(saved);
    return SYMM_ERR_TIMEOUT;
  }
  return symm_error(SYMM_ERR_TIMEOUT, "init: ranks [%s] did not arrive within %d ms", missing,
                    comm->timeout_ms);
}

/* Publishes this rank's message (again: the same value) and waits for
 * those of ranks [from, from + n); values[i] malloc'd. */
static symm_result_t agree_exchange(symm_comm_t *comm, const char *const *keys, const void *msg,
                                    size_t msg_len, int from, int n, void **values, size_t *lens,
                                    uint8_t *absent) {
  symm_result_t res = symm_store_exchange(comm->store, NULL, keys[comm->rank], msg, msg_len,
                                          keys + from, (size_t)n, values, lens, comm->timeout_ms,
                                          absent);
  if (res == SYMM_ERR_TIMEOUT) return agree_missing(comm, keys, from, absent);
  return res;
}

/*
 * The first exchange of init: every rank publishes the settings that must
 * agree and compares them with rank 0's as soon as rank 0's are there;
 * then the ranks that agree with rank 0 compare with every rank's, rank 0
 * reading them in rank order and the others all at once.  So a rank that
 * differs fails as soon as it and rank 0 have published, and every other
 * rank as soon as its own comparison reaches it: whatever differs (a world
 * size too, where the ranks would otherwise wait for a rank that does not
 * exist, or never hear of one that does), every rank returns
 * SYMM_ERR_MISMATCH naming the setting, both values and both ranks.
 */
static symm_result_t agree_settings(symm_comm_t *comm, const resolved_config_t *rc) {
  if (comm->size < 2 || !comm->store) return SYMM_SUCCESS;
  const int n = comm->size;
  char why[1024] = "";
  const size_t need = agreed_text(comm, rc, NULL, 0) + 1;
  agree_hdr_t me = {AGREE_MAGIC, SYMM_VERSION_CODE, comm->rank, n, 0, (uint32_t)need, 0};
  char *msg = malloc(sizeof me + need);
  char **keys = calloc((size_t)n, sizeof *keys);
  char *key_text = malloc((size_t)n * 112);
  void **values = calloc((size_t)n, sizeof *values);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  uint8_t *absent = calloc((size_t)n, 1);
  symm_result_t res = SYMM_SUCCESS;
  if (!msg || !keys || !key_text || !values || !lens || !absent) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
    goto out;
  }
  char *my_text = msg + sizeof me;
  agreed_text(comm, rc, my_text, need);
  me.digest = symm_hash64(my_text, need, 0);
  memcpy(msg, &me, sizeof me);
  for (int r = 0; r < n; r++) {
    keys[r] = key_text + (size_t)r * 112;
    snprintf(keys[r], 112, "%ssettings/%d", comm->prefix, r);
  }
  const size_t msg_len = sizeof me + need;
  const char *const *k = (const char *const *)keys;
  if (comm->rank == 0) {
    for (int r = 1; r < n && res == SYMM_SUCCESS; r++) {
      SYMM_CHECK_GOTO(agree_exchange(comm, k, msg, msg_len, r, 1, values, lens, absent), res, out);
      res = agree_compare(comm->rank, &me, my_text, r, values[0], lens[0], why, sizeof why);
      free(values[0]);
      values[0] = NULL;
    }
  } else {
    SYMM_CHECK_GOTO(agree_exchange(comm, k, msg, msg_len, 0, 1, values, lens, absent), res, out);
    res = agree_compare(comm->rank, &me, my_text, 0, values[0], lens[0], why, sizeof why);
    free(values[0]);
    values[0] = NULL;
    if (res != SYMM_SUCCESS) goto fail;
    SYMM_CHECK_GOTO(agree_exchange(comm, k, msg, msg_len, 0, n, values, lens, absent), res, out);
    for (int r = 1; r < n && res == SYMM_SUCCESS; r++)
      res = agree_compare(comm->rank, &me, my_text, r, values[r], lens[r], why, sizeof why);
  }
  if (res == SYMM_SUCCESS) goto out;
fail:
  res = symm_error(res, "%s", why);
out:
  for (int r = 0; values && r < n; r++) free(values[r]);
  free(values);
  free(lens);
  free(absent);
  free(keys);
  free(key_text);
  free(msg);
  return res;
}

/* agree_settings through the bootstrap (callbacks: no store): every rank
 * gathers every rank's message and compares each with rank 0's, so every
 * rank names the same first rank that differs. */
static symm_result_t agree_settings_over(symm_comm_t *comm, const resolved_config_t *rc) {
  if (comm->size < 2) return SYMM_SUCCESS;
  const size_t need = agreed_text(comm, rc, NULL, 0) + 1, n = (size_t)comm->size;
  char *msg = malloc(sizeof(agree_hdr_t) + need), why[1024] = "";
  void **values = calloc(n, sizeof *values);
  size_t *lens = calloc(n, sizeof *lens);
  symm_result_t res = msg && values && lens ? SYMM_SUCCESS
                                            : symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
  if (res == SYMM_SUCCESS) {
    agree_hdr_t me = {AGREE_MAGIC, SYMM_VERSION_CODE, comm->rank, comm->size, 0,
                      (uint32_t)need, 0};
    agreed_text(comm, rc, msg + sizeof me, need);
    me.digest = symm_hash64(msg + sizeof me, need, 0);
    memcpy(msg, &me, sizeof me);
    res = comm->bootstrap->ops->allgatherv(comm->bootstrap, msg, sizeof me + need, values, lens);
  }
  agree_hdr_t h0;
  const char *text0 = res == SYMM_SUCCESS ? agree_text_of(values[0], lens[0], &h0) : NULL;
  if (res == SYMM_SUCCESS && !text0)
    res = symm_error(SYMM_ERR_PROTOCOL, "init: rank 0 sent a malformed settings message");
  for (int r = 1; res == SYMM_SUCCESS && r < comm->size; r++)
    if ((res = agree_compare(0, &h0, text0, r, values[r], lens[r], why, sizeof why)))
      res = symm_error(res, "%s", why);
  for (size_t r = 0; values && r < n; r++) free(values[r]);
  free(values), free(lens), free(msg);
  return res;
}

/* What each rank tells the others at init. */
typedef struct {
  uint32_t magic, abi;
  int32_t rank, size;
  int32_t backend_requested;
  uint32_t usable_mask;   /* bit b: backend b probed usable here */
  uint64_t host_hash;
  int32_t pid;
  uint8_t nonce[16];
  int32_t local_rank, local_size;
  uint64_t pidns_ino, pidns_dev; /* PID namespace (/proc/self/ns/pid); 0: unknown */
  uint64_t start_time;  /* of this process (symm_process_start_time); 0: unknown */
  uint64_t pad_bytes;   /* its communicator's signal pads */
  char host[SYMM_HOST_NAME_BYTES]; /* its host name, for messages (host_hash tells hosts apart) */
} init_info_t;

#define INIT_MAGIC 0x53594d49u /* "SYMI" */

static uint32_t probe_usable(symm_backend_t wanted, char *why, size_t why_len) {
  uint32_t mask = 0;
  size_t n;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  for (size_t i = 0; i < n; i++) {
    /* Only probe what may be chosen: loading GPU libraries costs time. */
    if (wanted != SYMM_BACKEND_AUTO && list[i]->id != wanted) continue;
    if (wanted == SYMM_BACKEND_AUTO && list[i]->by_name_only) continue;
    char reason[512] = "";
    if (list[i]->probe(reason, sizeof reason) == SYMM_SUCCESS)
      mask |= 1u << list[i]->id;
    else if (list[i]->id == wanted)
      snprintf(why, why_len, "%s", reason);
  }
  return mask;
}

/* Whether this process can tell from o's pid that o is gone: same host and
 * same PID namespace, both known (containers may share a host name and IPC
 * but not PIDs, where the pid would name another process or none). */
static bool watchable(const init_info_t *me, const init_info_t *o) {
  return o->host_hash == me->host_hash && me->pidns_ino != 0 && o->pidns_ino == me->pidns_ino &&
         o->pidns_dev == me->pidns_dev && o->pid > 0;
}

/* The error of a requested backend that some ranks cannot use, the same
 * on every rank: the ranks and the first one's reason.  Every rank
 * reaches it alike (the ranks' masks are the same table everywhere), so
 * the reasons travel in one more round, paid only on this failure. */
static symm_result_t unusable_error(symm_comm_t *comm, const init_info_t *all,
                                    symm_backend_t backend, const char *why) {
  const uint32_t bit = 1u << backend;
  const bool mine = !(all[comm->rank].usable_mask & bit);
  char ranks[128] = "";
  size_t n = 0;
  int first = -1, count = 0;
  for (int r = 0; r < comm->size; r++) {
    if (all[r].usable_mask & bit) continue;
    if (first < 0) first = r;
    if (count++ < 8 && n + 16 < sizeof ranks)
      n += (size_t)snprintf(ranks + n, sizeof ranks - n, "%s%d", n ? ", " : "", r);
  }
  if (count > 8 && n < sizeof ranks) snprintf(ranks + n, sizeof ranks - n, " and %d more", count - 8);
  char reason[512] = "";
  void **values = calloc((size_t)comm->size, sizeof *values);
  size_t *lens = calloc((size_t)comm->size, sizeof *lens);
  if (values && lens &&
      comm->bootstrap->ops->allgatherv(comm->bootstrap, why, mine ? strlen(why) : 0, values,
                                       lens) == SYMM_SUCCESS) {
    size_t len = lens[first] < sizeof reason ? lens[first] : sizeof reason - 1;
    if (values[first]) memcpy(reason, values[first], len);
    reason[len] = 0;
  } else {
    symm_error_clear(); /* the reason stays unknown; the verdict does not change */
  }
  for (int r = 0; values && r < comm->size; r++) free(values[r]);
  free(values);
  free(lens);
  if (!reason[0]) snprintf(reason, sizeof reason, "%s", "its reason did not reach this rank");
  if (count == 1)
    return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "backend %s is not usable on rank %d%s: %s",
                      symm_backend_name(backend), first, mine ? " (this rank)" : "", reason);
  return symm_error(SYMM_ERR_BACKEND_UNAVAILABLE, "backend %s is not usable on ranks %s%s; on "
                    "rank %d: %s", symm_backend_name(backend), ranks,
                    mine ? " (this rank among them)" : "", first, reason);
}

/* Every rank's start-up record against this rank's: the same ABI, world
 * and requested backend; *common: the backends every rank can use. */
static symm_result_t check_identities(symm_comm_t *comm, const init_info_t *me,
                                      const init_info_t *all, uint32_t *common) {
  *common = ~0u;
  for (int r = 0; r < comm->size; r++) {
    const init_info_t *o = &all[r];
    if (o->magic != INIT_MAGIC || o->abi != SYMM_VERSION_CODE)
      return symm_error(SYMM_ERR_MISMATCH, "init: rank %d runs symmem ABI %u, this rank %u", r,
                        o->abi, (unsigned)SYMM_VERSION_CODE);
    if (o->rank != r || o->size != comm->size)
      return symm_error(SYMM_ERR_MISMATCH,
                        "init: rank %d believes it is rank %d of %d, this rank sees world size %d",
                        r, o->rank, o->size, comm->size);
    if (o->backend_requested != me->backend_requested)
      return symm_error(SYMM_ERR_MISMATCH, "init: rank %d asked for backend %s, rank %d for %s",
                        r, symm_backend_name((symm_backend_t)o->backend_requested), comm->rank,
                        symm_backend_name((symm_backend_t)me->backend_requested));
    if (o->pad_bytes != me->pad_bytes)
      return symm_error(SYMM_ERR_MISMATCH, "init: rank %d's signal pads are %llu bytes, rank "
                        "%d's %llu (signal_pad_bytes / SYMM_SIGNAL_PAD_BYTES)", r,
                        (unsigned long long)o->pad_bytes, comm->rank,
                        (unsigned long long)me->pad_bytes);
    *common &= o->usable_mask;
  }
  return SYMM_SUCCESS;
}

/* The backend every rank can use: the one asked for, or auto's first. */
static symm_result_t choose_backend(symm_comm_t *comm, symm_backend_t asked,
                                    const init_info_t *all, uint32_t common, const char *why) {
  if (asked != SYMM_BACKEND_AUTO) {
    if (!(common & (1u << asked))) return unusable_error(comm, all, asked, why);
    comm->backend = asked;
    return SYMM_SUCCESS;
  }
  size_t n;
  const symm_backend_ops_t *const *list = symm_backend_list(&n);
  comm->backend = SYMM_BACKEND_AUTO;
  for (size_t i = 0; i < n && comm->backend == SYMM_BACKEND_AUTO; i++)
    if (common & (1u << list[i]->id)) comm->backend = list[i]->id;
  if (comm->backend == SYMM_BACKEND_AUTO)
    return symm_error(SYMM_ERR_UNSUPPORTED, "init: no backend is usable on every rank");
  return SYMM_SUCCESS;
}

/* The peers' processes (watched where this process can tell that one is
 * gone), hosts and local rank and size, from every rank's record. */
static symm_result_t learn_peers(symm_comm_t *comm, const init_info_t *me,
                                 const init_info_t *all) {
  comm->pids = calloc((size_t)comm->size, sizeof *comm->pids);
  comm->host_ids = calloc((size_t)comm->size, sizeof *comm->host_ids);
  comm->pid_starts = calloc((size_t)comm->size, sizeof *comm->pid_starts);
  comm->host_names = calloc((size_t)comm->size, sizeof *comm->host_names);
  if (!comm->pids || !comm->host_ids || !comm->pid_starts || !comm->host_names)
    return symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
  comm->single_host = true;
  int unwatched = 0;
  for (int r = 0; r < comm->size; r++) {
    comm->host_ids[r] = all[r].host_hash;
    /* A peer's name is only printed: cut to its buffer, terminated here. */
    memcpy(comm->host_names[r], all[r].host, SYMM_HOST_NAME_BYTES - 1);
    comm->pids[r] = watchable(me, &all[r]) ? all[r].pid : 0;
    unwatched += comm->pids[r] == 0;
    /* Watched from now by what a reused pid cannot fake: the waits that
     * look at pids[r] (symm_process_gone) see this rank gone even when its
     * pid names another process by then. */
    if (comm->pids[r] && r != comm->rank) {
      if (symm_peer_watch_add(comm->pids[r], all[r].start_time))
        comm->pid_starts[r] = all[r].start_time;
      else
        comm->pids[r] = 0; /* out of memory: no watch to remove; the store still tells */
    }
    comm->single_host &= all[r].host_hash == me->host_hash;
  }
  if (unwatched)
    SYMM_INFO(INIT, "%d rank%s in another PID namespace or on another host: their loss shows as "
              "a timeout or through the store", unwatched, unwatched > 1 ? "s are" : " is");
  /* Local rank/size: from the launcher, else from the hosts' names. */
  if (comm->local_rank < 0 || comm->local_size < 0) {
    int lr = 0, ls = 0;
    for (int r = 0; r < comm->size; r++)
      if (all[r].host_hash == me->host_hash) {
        if (r < comm->rank) lr++;
        ls++;
      }
    if (comm->local_rank < 0) comm->local_rank = lr;
    if (comm->local_size < 0) comm->local_size = ls;
  }
  return SYMM_SUCCESS;
}

/* Picks the backend every rank can use, and local rank/size if unknown. */
static symm_result_t agree_identity(symm_comm_t *comm, const resolved_config_t *rc) {
  init_info_t me = {INIT_MAGIC, SYMM_VERSION_CODE, comm->rank, comm->size,
                    (int32_t)rc->cfg.backend, 0, 0, (int32_t)getpid(),
                    {0}, rc->cfg.local_rank, rc->cfg.local_size};
  me.pad_bytes = rc->cfg.signal_pad_bytes;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  me.host_hash = symm_hash64(host, strlen(host), 0);
  snprintf(me.host, sizeof me.host, "%s", host);
  symm_random_bytes(me.nonce, sizeof me.nonce);
  symm_pid_namespace(&me.pidns_ino, &me.pidns_dev);
  me.start_time = symm_process_start_time(0);
  char why[512] = "";
  me.usable_mask = probe_usable(rc->cfg.backend, why, sizeof why);

  init_info_t *all = calloc((size_t)comm->size, sizeof *all);
  if (!all) return symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
  uint32_t common = 0;
  symm_result_t res = comm->bootstrap->ops->allgather(comm->bootstrap, &me, sizeof me, all);
  SYMM_CHECK_GOTO(res, res, out);
  SYMM_CHECK_GOTO(check_identities(comm, &me, all, &common), res, out);
  SYMM_CHECK_GOTO(choose_backend(comm, rc->cfg.backend, all, common, why), res, out);
  SYMM_CHECK_GOTO(learn_peers(comm, &me, all), res, out);
  /* Job id: configured, else from rank 0's nonce, identical on all ranks. */
  const char *job = rc->cfg.job_id ? rc->cfg.job_id : symm_settings()->SYMM_JOB_ID;
  if (job && *job) {
    snprintf(comm->job_id, sizeof comm->job_id, "%s", job);
  } else {
    symm_hex(comm->job_id, all[0].nonce, 8);
  }
  /* The other half of rank 0's nonce names this communicator's sockets:
   * unknown before the communicator exists (a job id is not secret), so
   * nobody can take the names first. */
  symm_hex(comm->name_nonce, all[0].nonce + 8, 8);
out:
  free(all);
  return res;
}

/* What the bootstrap table chooses from (src/bootstrap/bootstrap.c). */
static symm_bootstrap_env_t bootstrap_env(const symm_comm_t *comm) {
  return (symm_bootstrap_env_t){.store = comm->store, .callbacks = comm->callbacks,
                                .prefix = comm->prefix,
                                .rank = comm->rank, .size = comm->size,
                                .timeout_ms = comm->timeout_ms, .over = comm->bootstrap,
                                .job_id = comm->job_id, .index = comm->index,
                                .pids = comm->pids, .single_host = comm->single_host};
}

/* The bootstrap the ranks first meet through (the store). */
static symm_result_t open_bootstrap(symm_comm_t *comm) {
  symm_bootstrap_env_t env = bootstrap_env(comm);
  return symm_bootstrap_open(&env, &comm->bootstrap);
}

/* Once the ranks know each other, a layered bootstrap (shared memory when
 * every rank is on this host) may take over; the first is kept under it.
 * Failing to set one up is not an error; a rank that died or timed out
 * meanwhile is. */
static symm_result_t upgrade_bootstrap(symm_comm_t *comm) {
  symm_bootstrap_env_t env = bootstrap_env(comm);
  symm_bootstrap_t *layered = NULL;
  SYMM_CHECK(symm_bootstrap_upgrade(&env, &layered));
  if (layered) {
    comm->store_bootstrap = comm->bootstrap;
    comm->bootstrap = layered;
  }
  return SYMM_SUCCESS;
}

/* ---------------------------------------------------- engine + backend */

/* One rank's contribution to init's round: its status and message, then
 * the engine's and the backend's blobs. */
typedef struct {
  int32_t status;
  uint32_t engine_len, backend_len, why_len;
} startup_hdr_t;

/* Packs this rank's status, message and blobs for the round. */
static void *pack_startup(symm_result_t status, const char *why, const symm_blob_t *eb,
                          const symm_blob_t *bb, size_t *len) {
  startup_hdr_t h = {(int32_t)status, (uint32_t)eb->len, (uint32_t)bb->len,
                     status != SYMM_SUCCESS ? (uint32_t)strlen(why) : 0};
  *len = sizeof h + eb->len + bb->len + h.why_len;
  char *p = malloc(*len);
  if (!p) return NULL;
  memcpy(p, &h, sizeof h);
  if (eb->len) memcpy(p + sizeof h, eb->data, eb->len);
  if (bb->len) memcpy(p + sizeof h + eb->len, bb->data, bb->len);
  if (h.why_len) memcpy(p + sizeof h + eb->len + bb->len, why, h.why_len);
  return p;
}

/* Splits every rank's contribution into its blobs (pointing into values),
 * or returns the first failure: this rank's own, else another rank's with
 * its message. */
static symm_result_t unpack_startup(symm_comm_t *comm, void **values, const size_t *lens,
                                    symm_blob_t *eblobs, symm_blob_t *bblobs) {
  for (int r = 0; r < comm->size; r++) {
    startup_hdr_t h;
    if (lens[r] < sizeof h) goto malformed;
    memcpy(&h, values[r], sizeof h);
    if (lens[r] != sizeof h + (size_t)h.engine_len + h.backend_len + h.why_len) goto malformed;
    char *p = (char *)values[r] + sizeof h;
    eblobs[r] = (symm_blob_t){h.engine_len ? p : NULL, h.engine_len};
    bblobs[r] = (symm_blob_t){h.backend_len ? p + h.engine_len : NULL, h.backend_len};
    if (h.status != SYMM_SUCCESS && r != comm->rank)
      return symm_error((symm_result_t)h.status, "%s init failed on rank %d: %.*s",
                        comm->ops->name, r, (int)h.why_len, p + h.engine_len + h.backend_len);
    continue;
  malformed:
    return symm_error(SYMM_ERR_PROTOCOL, "init: rank %d sent a malformed start-up message", r);
  }
  return SYMM_SUCCESS;
}

/* The engine of comm's memory, then the backend: each inits locally and
 * publishes a blob, one round gathers every rank's (so every rank fails
 * together, with the failing rank's message), then each starts up on all
 * ranks' blobs and the ranks agree on that.  On failure everything is
 * undone (fini of both). */
static symm_result_t start_engine_and_backend(symm_comm_t *comm) {
  symm_blob_t eb = {NULL, 0}, bb = {NULL, 0};
  void **values = calloc((size_t)comm->size, sizeof *values);
  size_t *lens = calloc((size_t)comm->size, sizeof *lens);
  symm_blob_t *eblobs = calloc((size_t)comm->size, sizeof *eblobs);
  symm_blob_t *bblobs = calloc((size_t)comm->size, sizeof *bblobs);
  void *mine = NULL;
  bool engine_up = false, backend_up = false;
  symm_result_t res;
  if (!values || !lens || !eblobs || !bblobs) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
    goto out;
  }
  res = comm->engine->init(comm, &eb);
  engine_up = true; /* fini undoes a partial init too */
  if (res == SYMM_SUCCESS) {
    comm->caps = comm->ops->caps;
    res = comm->ops->init(comm, &comm->caps, &bb);
    backend_up = true;
  }
  char why[1024];
  snprintf(why, sizeof why, "%s", res != SYMM_SUCCESS ? symm_last_error() : "");
  size_t len = 0;
  mine = pack_startup(res, why, &eb, &bb, &len);
  if (!mine) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "init: out of memory");
    goto out; /* the peers time out in the round: a rank out of memory cannot tell them */
  }
  symm_result_t gres = symm_comm_allgatherv_op(comm, SYMM_TAG_STARTUP, mine, len, values, lens);
  if (res != SYMM_SUCCESS) {
    symm_error_restore(why);
    goto out;
  }
  if ((res = gres) != SYMM_SUCCESS) goto out;
  SYMM_CHECK_GOTO(unpack_startup(comm, values, lens, eblobs, bblobs), res, out);
  res = comm->engine->startup ? comm->engine->startup(comm, eblobs) : SYMM_SUCCESS;
  if (res == SYMM_SUCCESS && SYMM_OPS_HAS(comm->ops, 1, startup))
    res = comm->ops->startup(comm, bblobs);
  res = symm_comm_agree(comm, res, "start-up");
  for (int r = 0; res == SYMM_SUCCESS && r < comm->size; r++)
    comm->unreachable += SYMM_OPS_HAS(comm->ops, 2, peer_reachable) &&
                         !comm->ops->peer_reachable(comm, r);
out:
  if (res != SYMM_SUCCESS) {
    if (backend_up) comm->ops->fini(comm);
    if (engine_up) comm->engine->fini(comm);
    comm->engine = NULL;
  }
  for (int r = 0; values && r < comm->size; r++) free(values[r]);
  free(values);
  free(lens);
  free(eblobs);
  free(bblobs);
  free(mine);
  free(eb.data);
  free(bb.data);
  return res;
}

/* The engine that serves a backend's memory. */
static const symm_engine_ops_t *engine_for(const symm_backend_ops_t *ops) {
  return ops->mem_kind == SYMM_MEM_DEVICE ? &symm_gpu_engine : &symm_cpu_engine;
}

/* ------------------------------------------------------------------ init */

static void teardown(symm_comm_t *comm);

/* The ranks meet and agree on their settings: through the caller's
 * callbacks, or through the store (connected, served here if need be). */
static symm_result_t meet(symm_comm_t *comm, resolved_config_t *rc) {
  if (comm->callbacks) {
    SYMM_CHECK(open_bootstrap(comm));
    symm_fault_point(SYMM_FAULT_INIT_HELLO, comm->rank);
    return agree_settings_over(comm, rc);
  }
  SYMM_CHECK(connect_store(comm, rc));
  symm_fault_point(SYMM_FAULT_INIT_HELLO, comm->rank);
  SYMM_CHECK(agree_settings(comm, rc));
  return open_bootstrap(comm);
}

/* Init failed here: a caller's channel is told (its abort callback) when
 * its peers may still wait in it for this rank. */
static void abort_channel(symm_comm_t *comm, symm_result_t res) {
  if (comm->bootstrap && (res == SYMM_ERR_TIMEOUT || res == SYMM_ERR_NO_MEMORY ||
                          res == SYMM_ERR_SYSTEM || res == SYMM_ERR_INTERNAL))
    symm_bootstrap_cb_abort(comm->bootstrap, res, symm_last_error());
}

/* symm_comm_init once the config is resolved; `index`: its number on the
 * store, the same on every rank. */
static symm_result_t comm_create(resolved_config_t *rc, int index, symm_comm_t **out) {
  symm_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) {
    symm_release_channel(rc->owned);
    return symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_init: out of memory");
  }
  pthread_mutex_init(&comm->lock, NULL);
  comm->rank = rc->cfg.rank;
  comm->size = rc->cfg.world_size;
  comm->local_rank = rc->cfg.local_rank;
  comm->local_size = rc->cfg.local_size;
  comm->timeout_ms = rc->cfg.timeout_ms;
  comm->pad_bytes = rc->cfg.signal_pad_bytes;
  comm->index = index;
  comm->callbacks = rc->cfg.bootstrap;
  comm->owned_callbacks = rc->owned;
  comm->device = -1;
  comm->backend = SYMM_BACKEND_AUTO;
  int64_t pool = (int64_t)symm_settings()->SYMM_POOL_BYTES;
  comm->pool_limit = pool > 0 ? (size_t)pool : 0;
  snprintf(comm->prefix, sizeof comm->prefix, "symm/c%d/", comm->index);
  comm->split_handle = rc->split_handle; /* rc's again on return, if not taken */
  rc->split_handle = NULL;

  symm_result_t res;
  if (comm->index < 0) {
    res = symm_error(SYMM_ERR_NO_MEMORY, "symm_comm_init: out of memory");
    goto fail;
  }
  symm_algo_t algo = SYMM_ALGO_AUTO;
  SYMM_CHECK_GOTO(symm_algo_from_name(symm_settings()->SYMM_ALLREDUCE_ALGO.name, &algo), res, fail);
  comm->allreduce_algo = algo;
  SYMM_CHECK_GOTO(symm_algo_from_name(symm_settings()->SYMM_COPY_ALGO.name, &algo), res, fail);
  comm->copy_algo = algo;
  comm->map_on_use = symm_settings()->SYMM_MAP_PEERS.index == 0;
  SYMM_CHECK_GOTO(meet(comm, rc), res, fail);
  SYMM_CHECK_GOTO(agree_identity(comm, rc), res, fail);
  SYMM_CHECK_GOTO(upgrade_bootstrap(comm), res, fail);
  comm->ops = symm_backend_find(comm->backend);
  if (comm->ops->version < 1 || !comm->ops->init || !comm->ops->fini || !comm->ops->alloc ||
      !comm->ops->free || !comm->ops->map_peer || !comm->ops->unmap_peer ||
      !comm->ops->granularity || !comm->ops->mem_kind) {
    res = symm_error(SYMM_ERR_INTERNAL, "backend %s lacks required operations", comm->ops->name);
    goto fail;
  }
  comm->engine = engine_for(comm->ops);
  comm->requested_device = rc->cfg.device;
  SYMM_CHECK_GOTO(start_engine_and_backend(comm), res, fail);
  char cpus[256] = "";
  if (symm_log_level() >= SYMM_LOG_INFO) symm_cpu_binding(cpus, sizeof cpus);
  SYMM_INFO(INIT, "comm %d: rank %d/%d local %d/%d backend %s device %d job %s, %s", comm->index,
            comm->rank, comm->size, comm->local_rank, comm->local_size, comm->ops->name,
            comm->device, comm->job_id, cpus);
  comm->ready = true;
  rc->split_handle = symm_comm_take_split_handle(comm);
  *out = comm;
  return SYMM_SUCCESS;
fail:
  abort_channel(comm, res);
  rc->split_handle = symm_comm_take_split_handle(comm);
  comm->engine = NULL;
  /* Within init's deadline and slack (symm_op_limit): the peers failing
   * it too get the slack to read their answers, not another timeout. */
  teardown(comm);
  return res;
}

/* One deadline for the whole of init, failure's cleanup included: every
 * wait inside takes what is left of it (symm_deadline_after). */
symm_result_t symm_comm_init(const symm_config_t *config, symm_comm_t **out) {
  if (!out) return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_init: comm is NULL");
  *out = NULL;
  SYMM_CHECK(symm_settings_load());
  resolved_config_t rc;
  memset(&rc, 0, sizeof rc);
  symm_result_t resolved = resolve_config(config, &rc);
  if (resolved != SYMM_SUCCESS) symm_release_channel(rc.owned);
  SYMM_CHECK(resolved);
  symm_fault_arm(symm_settings()->SYMM_FAULT);
  uint64_t outer = symm_op_deadline_begin(rc.cfg.timeout_ms);
  /* Callbacks: numbered in this process, as the ranks make them in order. */
  const char *numbering = rc.cfg.bootstrap ? "(callbacks)" : rc.store_addr;
  symm_result_t res = comm_create(&rc, symm_store_next_comm_number(numbering), out);
  symm_op_deadline_end(outer);
  return res;
}

static symm_result_t create_child(symm_comm_t *parent, resolved_config_t *rc, int index,
                                  symm_comm_t **out);

symm_result_t symm_comm_create_child(symm_comm_t *parent, int rank, int size, int index,
                                     void *split_handle, symm_comm_t **out) {
  resolved_config_t rc;
  memset(&rc, 0, sizeof rc);
  rc.cfg = (symm_config_t)SYMM_CONFIG_INIT;
  rc.cfg.rank = rank;
  rc.cfg.world_size = size;
  rc.cfg.device = parent->device;
  rc.cfg.backend = parent->backend;
  rc.cfg.timeout_ms = parent->timeout_ms;
  rc.cfg.signal_pad_bytes = parent->pad_bytes;
  rc.cfg.job_id = parent->job_id;
  rc.cfg.store_server = 0;
  snprintf(rc.store_addr, sizeof rc.store_addr, "%s", parent->store_addr);
  rc.token = parent->token;
  rc.split_handle = split_handle;
  return create_child(parent, &rc, index, out);
}

void symm_release_channel(symm_bootstrap_callbacks_t *channel) {
  if (!channel) return;
  if (channel->release) channel->release(channel->ctx);
  free(channel);
}

/* Makes parent's group from rc and counts it (the child keeps its parent
 * alive); a split handle its backend's init did not take (a failure
 * before it, or a backend that made its own) goes back to the parent's
 * backend. */
static symm_result_t create_child(symm_comm_t *parent, resolved_config_t *rc, int index,
                                  symm_comm_t **out) {
  symm_result_t res = comm_create(rc, index, out);
  if (rc->split_handle) parent->ops->split_release(parent, rc->split_handle, false);
  if (res != SYMM_SUCCESS) return res;
  (*out)->parent = parent;
  pthread_mutex_lock(&parent->lock);
  parent->live_children++;
  pthread_mutex_unlock(&parent->lock);
  return SYMM_SUCCESS;
}

symm_result_t symm_comm_create_child_on(symm_comm_t *parent, symm_bootstrap_callbacks_t *channel,
                                        int index, void *split_handle, symm_comm_t **out) {
  resolved_config_t rc;
  memset(&rc, 0, sizeof rc);
  rc.cfg = (symm_config_t)SYMM_CONFIG_INIT;
  rc.cfg.rank = channel->rank;
  rc.cfg.world_size = channel->world_size;
  rc.cfg.local_rank = channel->local_rank;
  rc.cfg.local_size = channel->local_size;
  rc.cfg.device = parent->device;
  rc.cfg.backend = parent->backend;
  rc.cfg.timeout_ms = parent->timeout_ms;
  rc.cfg.signal_pad_bytes = parent->pad_bytes;
  rc.cfg.job_id = parent->job_id;
  rc.cfg.bootstrap = channel;
  rc.owned = channel; /* teardown gives it back, also when comm_create fails */
  rc.split_handle = split_handle;
  return create_child(parent, &rc, index, out);
}

/* Releases comm, then its parent if the parent was destroyed while this
 * was its last live child. */
static void release(symm_comm_t *comm) {
  symm_comm_t *parent = comm->parent;
  teardown(comm);
  if (!parent) return;
  pthread_mutex_lock(&parent->lock);
  const bool last = --parent->live_children == 0 && parent->destroy_deferred;
  pthread_mutex_unlock(&parent->lock);
  if (last) release(parent);
}

void symm_comm_destroy(symm_comm_t *comm) {
  if (!comm) return;
  symm_fault_point(SYMM_FAULT_DESTROY, comm->rank);
  symm_mempool_forget_comm(comm);
  pthread_mutex_lock(&comm->lock);
  const bool keep = comm->live_children > 0;
  comm->destroy_deferred = keep;
  pthread_mutex_unlock(&comm->lock);
  if (!keep) release(comm);
}

/* Releases everything; a serving rank waits, within the calling
 * operation's time (destroy's own, or what is left of a failed init's),
 * for the other ranks to close their store connections first. */
static void teardown(symm_comm_t *comm) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  /* Its waits (BYE, the drain of a serving rank) share one deadline. */
  uint64_t outer = symm_op_deadline_begin(comm->timeout_ms < 10000 ? comm->timeout_ms : 10000);
  if (comm->engine) { /* set once engine and backend are both up */
    symm_comm_release_tensors(comm);
    comm->ops->fini(comm);
    comm->engine->fini(comm);
  }
  if (comm->bootstrap) comm->bootstrap->ops->fini(comm->bootstrap);
  if (comm->store_bootstrap) comm->store_bootstrap->ops->fini(comm->store_bootstrap);
  for (int r = 0; comm->pids && comm->pid_starts && r < comm->size; r++)
    if (comm->pids[r] && r != comm->rank)
      symm_peer_watch_remove(comm->pids[r], comm->pid_starts[r]);
  free(comm->pids);
  free(comm->pid_starts);
  free(comm->host_ids);
  free(comm->host_names);
  symm_store_close(comm->store);
  symm_release_channel(comm->owned_callbacks);
  if (comm->server)
    symm_store_stop_serving(comm->server, comm->server_shared, (uint32_t)comm->index);
  symm_op_deadline_end(outer);
  pthread_mutex_destroy(&comm->lock);
  free(comm);
  /* Destroy must not clobber the error of the call that failed. */
  symm_error_restore(saved);
}

/* ------------------------------------------------------------- accessors */

int symm_comm_rank(const symm_comm_t *c) { return c ? c->rank : -1; }
int symm_comm_size(const symm_comm_t *c) { return c ? c->size : -1; }
int symm_comm_local_rank(const symm_comm_t *c) { return c ? c->local_rank : -1; }
int symm_comm_local_size(const symm_comm_t *c) { return c ? c->local_size : -1; }
int symm_comm_device(const symm_comm_t *c) { return c ? c->device : -1; }
symm_backend_t symm_comm_backend(const symm_comm_t *c) { return c ? c->backend : SYMM_BACKEND_AUTO; }
int symm_comm_timeout_ms(const symm_comm_t *c) { return c ? c->timeout_ms : -1; }
symm_store_t *symm_comm_store(symm_comm_t *c) { return c ? c->store : NULL; }

symm_result_t symm_comm_backend_handle(symm_comm_t *comm, void **handle) {
  if (!comm || !handle)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_backend_handle: NULL argument");
  if (SYMM_OPS_HAS(comm->ops, 1, backend_handle))
    return comm->ops->backend_handle(comm, handle);
  char who[128];
  symm_backend_names_with(offsetof(symm_backend_caps_t, backend_handle), who, sizeof who);
  return symm_error(SYMM_ERR_UNSUPPORTED, "the %s backend has no provider communicator to hand "
                    "out (%s backend has one)", comm->ops->name, who);
}

symm_result_t symm_comm_native_handle(symm_comm_t *comm, void **handle) {
  return symm_comm_backend_handle(comm, handle);
}
