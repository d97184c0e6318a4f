/*
 * What the library's own tests may reach inside it, and nothing more: the
 * seams of src/include/ and the ground floor, the few core functions a
 * test calls directly, and accessors for the communicator's fields a test
 * reads or replaces (struct symm_comm and struct symm_tensor stay private
 * to the core).  Not installed; included by tests/ only, never by the
 * library's layers (tests/check-layers.py checks both).  Defined in
 * src/core/test_access.c, which also includes core/internal.h, so that the
 * compiler checks every declaration below against the core's own.
 */
#ifndef SYMM_TEST_ACCESS_H
#define SYMM_TEST_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_backend.h"
#include "symm_bootstrap.h"
#include "symm_engine.h"

/* ---------------------------------------------------- core, as it is */
const symm_backend_ops_t *symm_backend_find(symm_backend_t id);
symm_result_t symm_registry_add(const void *base, size_t len, symm_tensor_t *tensor, int rank);
size_t symm_registry_count(void);

/* ------------------------------------------- a communicator of a test's */
/* What symm_test_comm_new fills in; every other field is zero.  Pointers
 * are borrowed: the caller keeps them alive as long as the communicator. */
typedef struct {
  int rank, size;
  int timeout_ms;
  int index;              /* its number on its store */
  const char *job_id;     /* at most 63 characters; NULL: "" */
  const char *name_nonce; /* at most 16 characters; NULL: "" */
  int32_t *pids;          /* [size], or NULL: no peer watched */
  symm_store_t *store;    /* or NULL; asked about lost ranks through a store
                             bootstrap the communicator makes and frees */
  symm_bootstrap_t *bootstrap; /* or NULL: the bootstrap for notes and lost ranks */
  const char *prefix;     /* its key prefix; NULL: "" */
} symm_test_comm_opts_t;

/* A communicator that was never initialised, with only opts' fields set:
 * enough for a layer below the core (the fd exchange) that reads the
 * communicator through symm_backend.h's accessors.  NULL on no memory.
 * Free it with symm_test_comm_free, never symm_comm_destroy. */
symm_comm_t *symm_test_comm_new(const symm_test_comm_opts_t *opts);
void symm_test_comm_free(symm_comm_t *comm);

/* ---------------------------------- fields of a live communicator */
/* Its backend's table; a test may put a copy with members changed in its
 * place (the table must outlive the communicator). */
const symm_backend_ops_t *symm_test_comm_ops(const symm_comm_t *comm);
void symm_test_comm_set_ops(symm_comm_t *comm, const symm_backend_ops_t *ops);
/* Whether every rank runs on this host (the hosts' names, at init). */
bool symm_test_comm_single_host(const symm_comm_t *comm);
/* The store server this rank runs for the communicator, NULL if none. */
struct symm_store_server *symm_test_comm_store_server(const symm_comm_t *comm);
/* The bootstrap the core uses (shared memory where it can), and the store's
 * kept beside it (NULL when the core uses the store's). */
symm_bootstrap_t *symm_test_comm_bootstrap(const symm_comm_t *comm);
symm_bootstrap_t *symm_test_comm_store_bootstrap(const symm_comm_t *comm);

/* ---------------------------------------- fields of a live tensor */
/* Rank `peer`'s allocation as this process maps it, and as the peer
 * described it at the last rendezvous (NULL before the first). */
const symm_peer_map_t *symm_test_tensor_peer_map(const symm_tensor_t *t, int peer);
const symm_exchange_info_t *symm_test_tensor_peer_info(const symm_tensor_t *t, int peer);

#endif /* SYMM_TEST_ACCESS_H */
