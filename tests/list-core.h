TEST_ENTRY(errors_strerror, 10)
