/* Tests of the nccl backend over the fake libnccl (fake_nccl.c) on the fake
 * CUDA driver, and one of the real library where a wheel is installed:
 * TEST_ENTRY(name, timeout_seconds).  ctest reads this list
 * (tests/gpu/CMakeLists.txt); the bodies are in nccl_fake_tests.c. */
TEST_ENTRY(nccl_fake_version_codes, 20)
TEST_ENTRY(nccl_fake_probe_no_library, 20)
TEST_ENTRY(nccl_fake_probe_missing_symbol, 20)
TEST_ENTRY(nccl_fake_probe_wheel, 20)
TEST_ENTRY(nccl_fake_newest_found, 30)
TEST_ENTRY(nccl_fake_not_auto, 60)
TEST_ENTRY(nccl_fake_full_path_2, 60)
TEST_ENTRY(nccl_fake_full_path_4, 60)
TEST_ENTRY(nccl_fake_blocking_init, 60)
TEST_ENTRY(nccl_fake_register_once, 60)
TEST_ENTRY(nccl_fake_handle_mixes, 60)
TEST_ENTRY(nccl_fake_old_version, 60)
TEST_ENTRY(nccl_fake_alltoall_by_p2p, 60)
TEST_ENTRY(nccl_fake_unreachable_peer, 60)
TEST_ENTRY(nccl_fake_null_window_startup, 60)
TEST_ENTRY(nccl_fake_null_window_alloc, 60)
TEST_ENTRY(nccl_fake_init_fails_on_one_rank, 60)
TEST_ENTRY(nccl_fake_peer_lost_in_register, 60)
TEST_ENTRY(nccl_fake_timeout_in_register, 60)
TEST_ENTRY(nccl_real_library, 30)
