/* All-to-all-v on the host backend (tests/test-coll-v.c). */
TEST_ENTRY(coll_a2av_2, 60)
TEST_ENTRY(coll_a2av_3, 60)
TEST_ENTRY(coll_a2av_5, 90)
TEST_ENTRY(coll_a2av_8, 120)
TEST_ENTRY(coll_a2av_faults, 60)
TEST_ENTRY(coll_a2av_host_faults, 60)
TEST_ENTRY(coll_a2av_grow, 60)
TEST_ENTRY(coll_a2av_zero_copy, 60)
