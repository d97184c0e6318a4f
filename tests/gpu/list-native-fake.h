/* Tests of the native backend over the fake CUDA driver (fake_cuda.c), run
 * on machines without a GPU: TEST_ENTRY(name, timeout_seconds).  ctest
 * reads this list (tests/gpu/CMakeLists.txt); the bodies are in
 * native_fake_tests.c. */
TEST_ENTRY(native_fake_probe_no_library, 20)
TEST_ENTRY(native_fake_probe_no_device, 20)
TEST_ENTRY(native_fake_probe_no_vmm, 20)
TEST_ENTRY(native_fake_full_path_2, 60)
TEST_ENTRY(native_fake_full_path_4_shared, 60)
TEST_ENTRY(native_fake_access_per_mapping, 60)
TEST_ENTRY(native_fake_shared_refused, 60)
TEST_ENTRY(native_fake_mismatch, 60)
TEST_ENTRY(native_fake_pool_reset_pad, 60)
TEST_ENTRY(native_fake_free_while_mapped, 60)
TEST_ENTRY(native_fake_cycles_pool, 180)
TEST_ENTRY(native_fake_cycles_nopool, 180)
TEST_ENTRY(native_fake_destroy_releases_all, 60)
TEST_ENTRY(native_fake_fabric_falls_back, 60)
TEST_ENTRY(native_fake_fabric_forced_fails, 60)
TEST_ENTRY(native_fake_fabric_works, 60)
TEST_ENTRY(native_fake_bad_handle_setting, 60)
TEST_ENTRY(native_fake_multicast_refused, 60)
TEST_ENTRY(native_fake_context_restored, 60)
