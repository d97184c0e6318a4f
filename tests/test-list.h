/* Every CPU test: TEST_ENTRY(name, timeout_seconds).  ctest reads this file;
 * each test's body is TEST_IMPL(name) in one of the tests/test-*.c files. */
TEST_ENTRY(errors_strerror, 10)
