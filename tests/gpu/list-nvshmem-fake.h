/* Tests of the nvshmem backend over the fake libnvshmem_host
 * (fake_nvshmem.c) and the fake CUDA driver, run on machines without a GPU,
 * and of the real library where a wheel provides it:
 * TEST_ENTRY(name, timeout_seconds).  ctest reads this list
 * (tests/gpu/CMakeLists.txt); the bodies are in nvshmem_fake_tests.c. */
TEST_ENTRY(nvshmem_fake_probe_no_library, 20)
TEST_ENTRY(nvshmem_fake_forced_unavailable, 60)
TEST_ENTRY(nvshmem_fake_found_in_python_env, 20)
TEST_ENTRY(nvshmem_fake_missing_symbol, 20)
TEST_ENTRY(nvshmem_fake_old_version, 20)
TEST_ENTRY(nvshmem_fake_auto_skips, 60)
TEST_ENTRY(nvshmem_fake_describe, 20)
TEST_ENTRY(nvshmem_fake_full_path_2, 60)
TEST_ENTRY(nvshmem_fake_full_path_4, 60)
TEST_ENTRY(nvshmem_fake_init_fails_one_rank, 60)
TEST_ENTRY(nvshmem_fake_alloc_mismatch, 60)
TEST_ENTRY(nvshmem_fake_alloc_refused_one_rank, 60)
TEST_ENTRY(nvshmem_fake_alloc_one_rank_only, 60)
TEST_ENTRY(nvshmem_fake_free_out_of_order, 60)
TEST_ENTRY(nvshmem_fake_second_comm_refused, 60)
TEST_ENTRY(nvshmem_fake_second_comm_shared, 60)
TEST_ENTRY(nvshmem_fake_unreachable_views, 60)
TEST_ENTRY(nvshmem_fake_unreachable_collectives, 60)
TEST_ENTRY(nvshmem_fake_unreachable_no_provider_coll, 60)
TEST_ENTRY(nvshmem_fake_a2av_launch, 60)
TEST_ENTRY(nvshmem_real_library_entry_points, 30)
