/* A call its peers gave up on never succeeds late nor pairs with their
 * later calls (tests/test-soak.c). */
TEST_ENTRY(soak_late_barrier, 30)
TEST_ENTRY(soak_late_barrier_store, 30)
TEST_ENTRY(soak_late_small, 30)
TEST_ENTRY(soak_late_one_shot, 30)
TEST_ENTRY(soak_late_two_shot, 30)
TEST_ENTRY(soak_late_zero_copy, 30)
TEST_ENTRY(soak_late_small_store, 30)
TEST_ENTRY(soak_freeze_2, 90)
TEST_ENTRY(soak_freeze_4, 90)
TEST_ENTRY(soak_freeze_long, 3600)
