/* The tests' own backend (arena_backend.c): one memfd arena per rank,
 * mapped by every peer at startup; "arena" local, "arena_coll" with
 * collective alloc, free and registration. */
#ifndef SYMM_TEST_ARENA_BACKEND_H
#define SYMM_TEST_ARENA_BACKEND_H

#include "symmem.h"

#define ARENA_BACKEND_ID (SYMM_BACKEND_COUNT_ + 4)
#define ARENA_COLL_BACKEND_ID (SYMM_BACKEND_COUNT_ + 5)

/* Adds both to the library's backends (once per process; before forking
 * ranks, which inherit it). */
void arena_backends_register(void);
/* Registrations of arena_coll alive on this rank. */
long arena_registered(const symm_comm_t *comm);
/* Collectives arena_coll ran itself (some peer unreachable). */
long arena_provider_calls(const symm_comm_t *comm);

#endif
