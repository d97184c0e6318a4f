/*
 * A rank for the launcher tests: checks, from inside a job started by
 * symmem-run, that the store it announced is reachable with the token it
 * handed out.
 *
 *   symm-store-check               every rank sets check/<rank>, reads every
 *                                  other rank's key, prints "store ok ..."
 *   symm-store-check --wrong-token connecting with another token must be
 *                                  refused (SYMM_ERR_PERMISSION)
 *   symm-store-check --peer-lost   rank 1 leaves the store politely (BYE) and
 *                                  exits 3; rank 0 waits for a key nobody sets
 *                                  and must get SYMM_ERR_PEER_LOST well before
 *                                  its timeout: only symmem-run's
 *                                  mark_lost can tell it rank 1 is gone.
 * Exit status 0 on success, 1 with a message otherwise.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/store.h"

#define CHECK_TIMEOUT_MS 20000

static int fail(int rank, const char *what, symm_result_t res) {
  printf("rank %d: %s: %s (%s)\n", rank, what, symm_strerror(res), symm_last_error());
  fflush(stdout);
  return 1;
}

static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int check_exchange(symm_store_t *store, int rank, int size) {
  char key[64], want[64], got[64];
  snprintf(key, sizeof key, "check/%d", rank);
  snprintf(want, sizeof want, "hello from %d", rank);
  symm_result_t res = symm_store_set(store, key, want, strlen(want));
  if (res != SYMM_SUCCESS) return fail(rank, "set", res);
  for (int peer = 0; peer < size; peer++) {
    size_t len = 0;
    snprintf(key, sizeof key, "check/%d", peer);
    snprintf(want, sizeof want, "hello from %d", peer);
    res = symm_store_get(store, key, got, sizeof got - 1, &len, CHECK_TIMEOUT_MS);
    if (res != SYMM_SUCCESS) return fail(rank, key, res);
    got[len] = 0;
    if (strcmp(got, want) != 0) {
      printf("rank %d: %s holds \"%s\", expected \"%s\"\n", rank, key, got, want);
      return 1;
    }
  }
  printf("store ok rank %d of %d\n", rank, size);
  return 0;
}

static int check_wrong_token(const char *addr, int rank) {
  symm_store_t *store = NULL;
  symm_result_t res = symm_store_connect(addr, "not-the-job-token", rank, 5000, &store);
  if (res == SYMM_SUCCESS) {
    symm_store_close(store);
    printf("rank %d: a wrong token was accepted\n", rank);
    return 1;
  }
  if (res != SYMM_ERR_PERMISSION) return fail(rank, "connect with a wrong token", res);
  printf("token refused ok rank %d\n", rank);
  return 0;
}

static int check_peer_lost(symm_store_t *store, int rank) {
  char buf[16];
  size_t len = 0;
  if (rank == 1) {
    /* Leave only after rank 0 is ready for the news. */
    symm_result_t res = symm_store_get(store, "ready/0", buf, sizeof buf, &len, CHECK_TIMEOUT_MS);
    if (res != SYMM_SUCCESS) return fail(rank, "get ready/0", res);
    symm_store_close(store);
    exit(3);
  }
  if (rank != 0) return 0;
  uint64_t start = ms_now();
  symm_result_t res = symm_store_set(store, "ready/0", "1", 1);
  if (res != SYMM_SUCCESS) return fail(rank, "set ready/0", res);
  res = symm_store_get(store, "never/set", buf, sizeof buf, &len, CHECK_TIMEOUT_MS);
  if (res != SYMM_ERR_PEER_LOST) return fail(rank, "get never/set (expected peer lost)", res);
  printf("peer lost ok after %llu ms: %s\n", (unsigned long long)(ms_now() - start),
         symm_last_error());
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const char *addr = getenv("SYMM_STORE_ADDR"), *token = getenv("SYMM_TOKEN");
  const char *rank_s = getenv("SYMM_RANK"), *size_s = getenv("SYMM_WORLD_SIZE");
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!addr || !token || !rank_s || !size_s) {
    printf("SYMM_STORE_ADDR, SYMM_TOKEN, SYMM_RANK or SYMM_WORLD_SIZE missing\n");
    return 1;
  }
  int rank = atoi(rank_s), size = atoi(size_s);
  /* Rank 0 must outlive symmem-run's SIGTERM long enough to report. */
  if (!strcmp(mode, "--peer-lost") && rank == 0) signal(SIGTERM, SIG_IGN);
  if (!strcmp(mode, "--wrong-token")) return check_wrong_token(addr, rank);

  symm_store_t *store = NULL;
  symm_result_t res = symm_store_connect(addr, token, rank, CHECK_TIMEOUT_MS, &store);
  if (res != SYMM_SUCCESS) return fail(rank, "connect", res);
  int rc = !strcmp(mode, "--peer-lost") ? check_peer_lost(store, rank)
                                        : check_exchange(store, rank, size);
  symm_store_close(store);
  return rc;
}
