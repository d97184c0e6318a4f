/* symmem-run --bind-to: cores from /sys (a core is the hardware threads
 * that share its package and core id), NUMA nodes from /sys, both within
 * the launcher's own affinity (a cgroup or taskset limit is kept). */
#include "symmem_run_bind.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int run_bind_parse(const char *text, run_bind_t *out) {
  static const struct { const char *name; run_bind_t how; } names[] = {
      {"core", RUN_BIND_CORE}, {"numa", RUN_BIND_NUMA}, {"none", RUN_BIND_NONE}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(text, names[i].name) == 0) return *out = names[i].how, 0;
  return -1;
}

static int read_int(const char *fmt, int cpu) {
  char path[128];
  snprintf(path, sizeof path, fmt, cpu);
  FILE *f = fopen(path, "r");
  int v = -1;
  if (f && fscanf(f, "%d", &v) != 1) v = -1;
  if (f) fclose(f);
  return v;
}

/* The cores among `allowed`: *cores sets, one per core, in CPU order. */
static int find_cores(const cpu_set_t *allowed, cpu_set_t *cores, int cap) {
  int n = 0, key[CPU_SETSIZE];
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, allowed)) continue;
    const int pkg = read_int("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
    const int id = read_int("/sys/devices/system/cpu/cpu%d/topology/core_id", c);
    const int k = id < 0 ? -1 - c : pkg * 65536 + id; /* unknown: a core of its own */
    int i = 0;
    while (i < n && key[i] != k) i++;
    if (i == n) {
      if (n == cap) break;
      key[n] = k;
      CPU_ZERO(&cores[n++]);
    }
    CPU_SET(c, &cores[i]);
  }
  return n;
}

/* The NUMA nodes' CPUs among `allowed` (one node of them all when /sys has
 * none). */
static int find_nodes(const cpu_set_t *allowed, cpu_set_t *nodes, int cap) {
  int n = 0;
  for (int node = 0; node < 1024 && n < cap; node++) {
    char path[96], list[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    const bool got = fgets(list, sizeof list, f) != NULL;
    fclose(f);
    if (!got) continue;
    CPU_ZERO(&nodes[n]);
    for (char *p = list; *p && *p != '\n';) {
      char *end;
      long lo = strtol(p, &end, 10), hi = lo;
      if (*end == '-') hi = strtol(end + 1, &end, 10);
      for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
        if (c >= 0 && CPU_ISSET((int)c, allowed)) CPU_SET((int)c, &nodes[n]);
      p = *end == ',' ? end + 1 : end;
    }
    if (CPU_COUNT(&nodes[n])) n++;
  }
  if (n == 0 && cap > 0) nodes[n++] = *allowed;
  return n;
}

int run_bind_plan(run_bind_t asked, int np, run_binding_t *out, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  out->np = np;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    out->how = RUN_BIND_NONE;
    snprintf(out->why, sizeof out->why, "this process's CPUs are unknown");
    return asked == RUN_BIND_CORE || asked == RUN_BIND_NUMA
               ? (snprintf(err, cap, "--bind-to: cannot read this process's CPUs"), -1)
               : 0;
  }
  cpu_set_t *units = malloc(sizeof *units * CPU_SETSIZE);
  if (!units) return snprintf(err, cap, "out of memory"), -1;
  const bool numa = asked == RUN_BIND_NUMA;
  const int n = numa ? find_nodes(&allowed, units, CPU_SETSIZE)
                     : find_cores(&allowed, units, CPU_SETSIZE);
  out->how = asked == RUN_BIND_DEFAULT ? (np <= n ? RUN_BIND_CORE : RUN_BIND_NONE) : asked;
  snprintf(out->why, sizeof out->why, "%s: %d rank%s, %d %s%s%s", out->how == RUN_BIND_CORE ? "core"
           : out->how == RUN_BIND_NUMA ? "numa" : "none", np, np == 1 ? "" : "s", n,
           numa ? "NUMA node" : "core", n == 1 ? "" : "s",
           asked != RUN_BIND_DEFAULT ? "" : np <= n ? " (default: a core per rank)"
                                                    : " (default: more ranks than cores)");
  if (out->how == RUN_BIND_CORE && np > n) {
    snprintf(err, cap, "--bind-to core needs a core per rank: %d ranks, %d cores here (use "
             "--bind-to none or numa)", np, n);
    free(units);
    return -1;
  }
  if (out->how != RUN_BIND_NONE && (out->sets = malloc(sizeof *out->sets * (size_t)np)))
    for (int r = 0; r < np; r++) out->sets[r] = units[r % n];
  free(units);
  if (out->how != RUN_BIND_NONE && !out->sets) return snprintf(err, cap, "out of memory"), -1;
  return 0;
}

void run_bind_apply(const run_binding_t *b, int rank) {
  if (b->sets) sched_setaffinity(0, sizeof b->sets[rank], &b->sets[rank]);
}

void run_bind_describe(const run_binding_t *b, int rank, char *out, size_t cap) {
  if (!b->sets) {
    snprintf(out, cap, "not bound");
    return;
  }
  size_t n = (size_t)snprintf(out, cap, "cpus ");
  for (int c = 0, first = 1; c < CPU_SETSIZE && n + 8 < cap; c++)
    if (CPU_ISSET(c, &b->sets[rank])) {
      n += (size_t)snprintf(out + n, cap - n, "%s%d", first ? "" : ",", c);
      first = 0;
    }
}

void run_bind_free(run_binding_t *b) {
  free(b->sets);
  b->sets = NULL;
}
