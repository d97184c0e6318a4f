/* A list of integers in text, "1,2,3" or "1, 2]": what the fakes read from
 * their FAKE*_ variables and what tests read in messages that name ranks.
 * Shared by the fake libraries (which do not link the harness) and the
 * tests, so it is a header of static functions. */
#ifndef SYMM_TEST_INT_LIST_H
#define SYMM_TEST_INT_LIST_H

#include <stdbool.h>
#include <stdlib.h>

/* Whether x is among the comma-separated integers at the start of list
 * (NULL: an empty list); the list ends at the first thing not a number. */
static inline bool int_list_contains(const char *list, long x) {
  for (const char *p = list; p && *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    if (v == x) return true;
    p = *end == ',' ? end + 1 : end;
  }
  return false;
}

#endif
