/* Wire formats and parsers: regression tests for what the fuzzers of
 * tests/fuzz found (make fuzz), each on the input that showed it (also in
 * that fuzzer's corpus).  In-process, no ranks. */
#include <stdlib.h>
#include <string.h>

#include "symm_test_access.h"
#include "harness.h"

/* n copies of name joined by commas, then tail (may be ""); malloc'd. */
static char *repeat_list(const char *name, int n, const char *tail) {
  size_t len = (strlen(name) + 1) * (size_t)n + strlen(tail) + 1;
  char *s = malloc(len);
  size_t at = 0;
  for (int i = 0; i < n; i++) at += (size_t)snprintf(s + at, len - at, "%s%s", i ? "," : "", name);
  snprintf(s + at, len - at, "%s", tail);
  return s;
}

/* SYMM_DEBUG_SUBSYS is read to its end however long it is: an unknown
 * name past the first 255 characters is refused (it was cut off unread,
 * so "INIT,...,STOREX" passed), and a long list of known names is taken
 * (a name cut in two at that point was refused). */
TEST_IMPL(wire_subsys_list_read_whole) {
  char why[512];
  char *bad = repeat_list("INIT", 51, ",STOREX"); /* STOREX starts at 255 */
  ASSERT_EQ(symm_log_subsys_check(bad, why, sizeof why), false);
  ASSERT_STR_CONTAINS(why, "STOREX");
  char *good = repeat_list("STORE", 50, ""); /* a comma or name at every 6th byte */
  ASSERT_EQ(symm_log_subsys_check(good, why, sizeof why), true);
  char *inverted = repeat_list("^COLL", 1, "");
  ASSERT_EQ(symm_log_subsys_check(inverted, why, sizeof why), true);
  ASSERT_EQ(symm_log_subsys_check("INIT,,STORE", why, sizeof why), true);
  ASSERT_EQ(symm_log_subsys_check("INIT,STOR", why, sizeof why), false);
  ASSERT_STR_CONTAINS(why, "\"STOR\"");
  /* What symm_comm_init would say, through the public listing. */
  setenv("SYMM_DEBUG_SUBSYS", bad, 1);
  for (size_t i = 0; i < symm_setting_count(); i++) {
    symm_setting_info_t info;
    ASSERT_OK(symm_setting_get(i, &info));
    if (strcmp(info.name, "SYMM_DEBUG_SUBSYS") != 0) continue;
    ASSERT_PTR_EQ(info.problem != NULL ? (void *)1 : NULL, (void *)1);
    ASSERT_STR_CONTAINS(info.problem, "STOREX");
  }
  unsetenv("SYMM_DEBUG_SUBSYS");
  free(bad);
  free(good);
  free(inverted);
  return 0;
}
