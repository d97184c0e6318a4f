/* Where errors are logged (tests/test-errors.c). */
TEST_ENTRY(errors_origin_trail, 20)
TEST_ENTRY(errors_syscheck_origin, 10)
TEST_ENTRY(errors_comm_init_origin, 10)
TEST_ENTRY(errors_subsystem, 10)
