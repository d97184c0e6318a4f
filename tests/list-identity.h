/* Identity tests (tests/test-identity.c): TEST_ENTRY(name, timeout_seconds). */
TEST_ENTRY(identity_threads_own_stores, 120)
TEST_ENTRY(identity_two_groups_two_stores, 60)
TEST_ENTRY(identity_settings_differ_bootstrap_shm, 60)
TEST_ENTRY(identity_settings_differ_job_id, 60)
TEST_ENTRY(identity_settings_differ_world_size, 60)
TEST_ENTRY(identity_dead_rank_pid_reused, 60)
TEST_ENTRY(identity_dead_rank_pid_reused_no_pidfd, 60)
TEST_ENTRY(identity_peer_watch_start_time, 30)
