/* One-sided puts and gets (tests/test-put.c). */
TEST_ENTRY(ranks_put_get, 60)
TEST_ENTRY(put_signal_order, 60)
TEST_ENTRY(put_get_placements, 60)
