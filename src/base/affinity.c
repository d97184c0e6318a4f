/* The CPUs this process runs on, as text (symm_cpu_binding): for the INFO
 * line of init, symmem-info, and benchmark headers. */
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "symm_util.h"

/* "0-3,8,10-11" of the CPUs in set, into out[cap]. */
static void list_cpus(const cpu_set_t *set, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (int c = 0; c < CPU_SETSIZE && n + 24 < cap; c++) {
    if (!CPU_ISSET(c, set)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, set)) end++;
    int k = end > c ? snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", c, end)
                    : snprintf(out + n, cap - n, "%s%d", n ? "," : "", c);
    n += k > 0 ? (size_t)k : 0;
    c = end;
  }
}

const char *symm_cpu_binding(char *out, size_t cap) {
  if (!out || cap == 0) return out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    snprintf(out, cap, "unknown");
    return out;
  }
  char list[200];
  list_cpus(&set, list, sizeof list);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int mine = CPU_COUNT(&set);
  if (online > 0 && mine >= online)
    snprintf(out, cap, "cpus %s (all %d of this host: not bound)", list, mine);
  else
    snprintf(out, cap, "cpus %s (bound: %d of this host's %ld)", list, mine, online);
  return out;
}
