#include "harness.h"

TEST_IMPL(errors_strerror) {
  ASSERT_STR_CONTAINS(symm_strerror(SYMM_SUCCESS), "success");
  ASSERT_STR_CONTAINS(symm_strerror(SYMM_ERR_MISMATCH), "mismatch");
  ASSERT_STR_CONTAINS(symm_strerror((symm_result_t)999), "unknown");
  ASSERT_EQ(symm_version(), SYMM_VERSION_CODE);
  return 0;
}
