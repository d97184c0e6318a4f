/* The user's memory made symmetric (tests/test-register.c). */
TEST_ENTRY(register_host_memfd, 60)
TEST_ENTRY(register_host_file, 60)
TEST_ENTRY(register_host_refusals, 60)
