/* Communicators on the caller's bootstrap callbacks (tests/test-callbacks.c). */
TEST_ENTRY(callbacks_works_2, 60)
TEST_ENTRY(callbacks_works_4, 90)
TEST_ENTRY(callbacks_fail, 30)
TEST_ENTRY(callbacks_stall, 30)
TEST_ENTRY(callbacks_refused, 60)
TEST_ENTRY(callbacks_fdx_peer_lost, 60)
