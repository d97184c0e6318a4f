/* Resource limits and local failures inside collective steps
 * (tests/test-limits.c). */
TEST_ENTRY(limits_fsize_alloc, 60)
TEST_ENTRY(limits_fsize_bootstrap, 60)
TEST_ENTRY(limits_scratch_growth_fails_on_one_rank, 90)
TEST_ENTRY(limits_export_fails_on_one_rank, 90)
TEST_ENTRY(limits_cgroup_room_parser, 20)
TEST_ENTRY(limits_cgroup_alloc, 60)
