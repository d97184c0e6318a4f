/* Groups: symm_comm_split and symm_comm_split_2d (tests/test-split.c). */
TEST_ENTRY(ranks_split_groups, 120)
TEST_ENTRY(ranks_split_nested, 90)
TEST_ENTRY(ranks_split_mismatch, 60)
TEST_ENTRY(ranks_split_parent_destroyed_first, 60)
TEST_ENTRY(split_isolation, 60)
