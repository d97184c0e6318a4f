/* Which rank serves a communicator's store, the store this process serves
 * for its communicators (one per process, shared by those on its address),
 * starting it, and stopping it once the other ranks have closed; the
 * communicators' numbers on a store. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_INIT
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

/*
 * A communicator's number on its store: how many this process made before
 * on the same store address.  Every rank of a communicator makes its
 * communicators on that store in the same order (symm_comm_init is
 * collective), so they count alike, whatever else each process makes on
 * other stores or from other threads meanwhile: the number keys the
 * communicator's store keys, its HELLO and its fd server's names.  A lone
 * process's store is its own, and its one communicator is number 0.
 */
static struct {
  pthread_mutex_t lock;
  struct store_count {
    char addr[256];
    int made;
  } *v;
  size_t n, cap;
} store_counts = {.lock = PTHREAD_MUTEX_INITIALIZER};

int symm_store_next_comm_number(const char *addr) {
  if (!addr[0]) return 0;
  int number = -1;
  pthread_mutex_lock(&store_counts.lock);
  size_t i = 0;
  while (i < store_counts.n && strcmp(store_counts.v[i].addr, addr) != 0) i++;
  if (i == store_counts.n && store_counts.n == store_counts.cap) {
    size_t cap = store_counts.cap ? 2 * store_counts.cap : 4;
    struct store_count *v = realloc(store_counts.v, cap * sizeof *v);
    if (!v) goto out;
    store_counts.v = v;
    store_counts.cap = cap;
  }
  if (i == store_counts.n) {
    snprintf(store_counts.v[i].addr, sizeof store_counts.v[i].addr, "%s", addr);
    store_counts.v[i].made = 0;
    store_counts.n++;
  }
  number = store_counts.v[i].made++;
out:
  pthread_mutex_unlock(&store_counts.lock);
  return number;
}

/* ------------------------------------------------------ who serves it */

bool symm_store_serves(int store_server, int rank, bool have_addr) {
  /* A lone process with no address serves itself on an ephemeral port. */
  if (!have_addr) return true;
  if (store_server < 0) return rank == 0 && !symm_settings()->SYMM_STORE_EXTERNAL;
  return store_server != 0;
}

int symm_store_serving_rank(int store_server, bool serves, int rank) {
  if (serves) return rank;
  return store_server < 0 && !symm_settings()->SYMM_STORE_EXTERNAL ? 0 : -1;
}

/* ---------------------------------------------------- the shared store */

/*
 * The store that this process serves on a fixed address, shared by its
 * communicators there, one after the other or several at once: their keys
 * are apart (each communicator's prefix), and each one's destroy waits only
 * for its own ranks' connections (symm_store_server_drain_comm, by the
 * communicator index every rank says in HELLO).  It stops after the last of
 * them, unless ranks of a later communicator are connected already (they
 * destroyed theirs and created the next one first): it serves them on, and
 * this process's next communicator on the same address takes it over.
 * Stopping it there would fail their calls (SYMM_ERR_PEER_LOST).  A store on
 * an ephemeral port (a lone process) is the communicator's own, and so is
 * one on a second address while the first is in use: one address per
 * process is shared.
 */
static struct {
  pthread_mutex_t lock;
  symm_store_server_t *server; /* NULL: none */
  char bind[256];
  int port;
  char *token;
  int users;          /* communicators using it */
  uint32_t max_index; /* the highest communicator index that used it */
} served = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Under served.lock: forgets and stops the shared store. */
static void served_forget(bool stop) {
  if (stop && served.server) symm_store_server_stop(served.server);
  served.server = NULL;
  free(served.token);
  served.token = NULL;
  served.users = 0;
}

/* A fork()ed child gets the lock unlocked (another thread may have held
 * it) and no record: the store's thread is the parent's.  The token's
 * copy is left to the child's exit. */
static void served_atfork_child(void) {
  pthread_mutex_init(&served.lock, NULL);
  served.server = NULL;
  served.token = NULL;
  served.users = 0;
}
static void served_atfork_register(void) { pthread_atfork(NULL, NULL, served_atfork_child); }

/* Starts the store on bind:port for communicator `index`, or joins the
 * shared one there (*shared then). */
static symm_result_t serve_store(const char *bind, int port, const char *token, int rank,
                                 uint32_t index, symm_store_server_t **server, bool *shared) {
  if (port == 0) return symm_store_server_start(bind, port, token, server);
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, served_atfork_register);
  pthread_mutex_lock(&served.lock);
  symm_result_t res = SYMM_SUCCESS;
  if (served.server && served.port == port && strcmp(served.bind, bind) == 0 &&
      strcmp(served.token, token) == 0) {
    served.users++;
    if (index > served.max_index) served.max_index = index;
    *server = served.server;
    *shared = true;
    SYMM_INFO(INIT, "rank %d: serving the store on %s:%d for this communicator too", rank,
              bind, port);
    goto out;
  }
  if (served.server && served.users == 0) served_forget(true); /* left for another address */
  res = symm_store_server_start(bind, port, token, server);
  if (res != SYMM_SUCCESS || served.server) goto out; /* another address in use: its own */
  served.token = strdup(token);
  if (!served.token) goto out; /* no record: the communicator's own store */
  served.server = *server;
  snprintf(served.bind, sizeof served.bind, "%s", bind);
  served.port = port;
  served.users = 1;
  served.max_index = index;
  *shared = true;
out:
  pthread_mutex_unlock(&served.lock);
  return res;
}

symm_result_t symm_store_serve(const symm_store_serve_args_t *a, char *addr, size_t cap,
                               symm_store_server_t **server, bool *shared) {
  const char *bind = addr[0] ? symm_settings()->SYMM_STORE_BIND : "127.0.0.1";
  if (!a->token[0] && a->size > 1)
    SYMM_WARN(INIT, "store served without a token: set SYMM_TOKEN on every rank (symmem-run "
                    "does this for you)");
  symm_result_t res = serve_store(bind, a->port, a->token, a->rank, a->index, server, shared);
  if (res != SYMM_SUCCESS) {
    symm_error_context("rank %d could not serve the store on %s:%d", a->rank, bind, a->port);
    return res;
  }
  if (!addr[0]) snprintf(addr, cap, "127.0.0.1:%d", symm_store_server_port(*server));
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------- stopping it */

/* Milliseconds left for a wait that finishes the calling operation: up to
 * its deadline plus its slack (symm_op_limit), which is destroy's own or,
 * when init fails, what is left of init's. */
static int finishing_ms(void) { return symm_ms_until(symm_op_limit(UINT64_MAX)); }

/* Peers may still be finishing a collective whose answer they have not
 * read; stopping the store under them would turn success into PEER_LOST.
 * So the serving rank waits (within the calling operation's time) until
 * they have all closed. */
void symm_store_stop_serving(symm_store_server_t *server, bool shared, uint32_t index) {
  int wait_ms = finishing_ms();
  if (!shared) {
    if (symm_store_server_drain(server, wait_ms) != SYMM_SUCCESS)
      SYMM_INFO(INIT, "store stopped with ranks still connected");
    symm_store_server_stop(server);
    return;
  }
  /* A fork()ed child has no record (served_atfork_child): the store's
   * thread is not here. */
  pthread_mutex_lock(&served.lock);
  const bool here = served.server == server;
  pthread_mutex_unlock(&served.lock);
  if (!here) return;
  if (symm_store_server_drain_comm(server, index, wait_ms) != SYMM_SUCCESS)
    SYMM_INFO(INIT, "store: ranks of this communicator still connected after %d ms", wait_ms);
  pthread_mutex_lock(&served.lock);
  if (served.server == server && --served.users == 0) {
    /* Stragglers of this process's communicators (after a drain's timeout)
     * do not keep it; those of a later one (a higher index: indices grow
     * alike on every rank) do. */
    if (symm_store_server_stop_if_idle(served.server, served.max_index))
      served_forget(false); /* stopped */
    else
      SYMM_INFO(INIT, "store: ranks of a later communicator are connected; serving on");
  }
  pthread_mutex_unlock(&served.lock);
}
