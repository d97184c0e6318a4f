/* Stream-ordered signals on the host backend (tests/test-signal.c). */
TEST_ENTRY(signal_ping_pong, 60)
TEST_ENTRY(signal_write_value32, 60)
TEST_ENTRY(signal_barrier_3, 60)
TEST_ENTRY(signal_barrier_8, 120)
TEST_ENTRY(signal_large_pad, 60)
TEST_ENTRY(signal_timeout, 30)
TEST_ENTRY(signal_peer_killed, 40)
TEST_ENTRY(signal_bad_args, 30)
