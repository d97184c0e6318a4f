/* Notes and lost ranks through the communicator's bootstrap
 * (symm_backend.h): what backends tell each other, and ask about peers,
 * while the ranks wait outside the bootstrap's rounds.  Every bootstrap
 * that keeps notes serves them (the store's keys, the caller's note
 * callbacks); the shared-memory bootstrap keeps none, so the one beneath
 * it (the store) does.  Best effort: a note that cannot be left or read
 * leaves the caller's error message as it was, and its peers learn at
 * their deadline instead. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_INIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define LOST_NOTE "lost"

/* The first of comm's bootstraps (the one in use, then the one beneath
 * it) whose table has the member at `offset`, NULL if none. */
static symm_bootstrap_t *keeper(const symm_comm_t *comm, size_t offset) {
  symm_bootstrap_t *const mine[2] = {comm->bootstrap, comm->store_bootstrap};
  for (int i = 0; i < 2; i++) {
    if (!mine[i] || mine[i]->ops->version < 2) continue;
    if (*(void *const *)((const char *)mine[i]->ops + offset)) return mine[i];
  }
  return NULL;
}

static void note_key(const symm_comm_t *comm, const char *name, char *key, size_t cap) {
  snprintf(key, cap, "%snote/%s", comm->prefix, name);
}

bool symm_comm_note_put(symm_comm_t *comm, const char *name, const char *value) {
  symm_bootstrap_t *bs = comm ? keeper(comm, offsetof(symm_bootstrap_ops_t, note_put)) : NULL;
  if (!bs) return false;
  char key[256], saved[1024];
  note_key(comm, name, key, sizeof key);
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  const bool left = bs->ops->note_put(bs, key, value) == SYMM_SUCCESS;
  if (!left) SYMM_INFO(INIT, "rank %d could not leave note %s: %s", comm->rank, name,
                       symm_last_error());
  symm_error_restore(saved);
  return left;
}

bool symm_comm_note_get(symm_comm_t *comm, const char *name, char *value, size_t cap) {
  symm_bootstrap_t *bs = comm ? keeper(comm, offsetof(symm_bootstrap_ops_t, note_get)) : NULL;
  if (!bs || cap == 0) return false;
  char key[256], saved[1024];
  note_key(comm, name, key, sizeof key);
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  bool found = false;
  if (bs->ops->note_get(bs, key, value, cap, &found) != SYMM_SUCCESS) found = false;
  symm_error_restore(saved);
  return found;
}

/* A rank noted lost by a peer that watched it, or -1. */
static int noted_lost(symm_comm_t *comm) {
  char text[32];
  if (!symm_comm_note_get(comm, LOST_NOTE, text, sizeof text)) return -1;
  char *end = NULL;
  const long r = strtol(text, &end, 10);
  return end != text && r >= 0 && r < comm->size && r != comm->rank ? (int)r : -1;
}

int symm_comm_lost_rank(symm_comm_t *comm) {
  if (!comm) return -1;
  const int gone = symm_comm_first_gone(comm);
  if (gone >= 0) {
    /* Peers on other hosts or in other PID namespaces cannot see it. */
    if (!comm->lost_noted) {
      char text[32];
      snprintf(text, sizeof text, "%d", gone);
      comm->lost_noted = symm_comm_note_put(comm, LOST_NOTE, text);
    }
    return gone;
  }
  symm_bootstrap_t *bs = keeper(comm, offsetof(symm_bootstrap_ops_t, lost_rank));
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", symm_last_error());
  const int marked = bs ? bs->ops->lost_rank(bs) : -1;
  symm_error_restore(saved);
  if (marked >= 0 && marked < comm->size && marked != comm->rank) return marked;
  return noted_lost(comm);
}
