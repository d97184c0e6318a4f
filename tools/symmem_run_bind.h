/* symmem-run --bind-to: which CPUs each rank runs on (symmem_run_bind.c). */
#ifndef SYMMEM_RUN_BIND_H
#define SYMMEM_RUN_BIND_H

#include <sched.h>
#include <stddef.h>

typedef enum { RUN_BIND_DEFAULT, RUN_BIND_NONE, RUN_BIND_CORE, RUN_BIND_NUMA } run_bind_t;

typedef struct {
  run_bind_t how;   /* what runs: never RUN_BIND_DEFAULT */
  int np;
  cpu_set_t *sets;  /* [np], NULL for none */
  char why[160];    /* the choice, for -v ("4 ranks on 8 cores") */
} run_binding_t;

/* Parses "core", "numa", "none"; -1 for anything else. */
int run_bind_parse(const char *text, run_bind_t *out);
/* The binding of np ranks over this process's CPUs (its affinity): core,
 * one core (all its hardware threads) per rank, which needs np cores;
 * numa, the ranks round-robin over the NUMA nodes; none; default, core
 * when there are np cores, else none.  0, or -1 with the reason in err. */
int run_bind_plan(run_bind_t asked, int np, run_binding_t *out, char *err, size_t cap);
/* In rank `rank`'s child before exec: its CPUs (nothing for none). */
void run_bind_apply(const run_binding_t *b, int rank);
/* "cpus 2,6" (or "not bound") for rank `rank`. */
void run_bind_describe(const run_binding_t *b, int rank, char *out, size_t cap);
void run_bind_free(run_binding_t *b);

#endif /* SYMMEM_RUN_BIND_H */
