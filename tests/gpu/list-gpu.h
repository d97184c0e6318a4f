/* The GPU tests of the native backend (gpu_tests.c, symm-gpu-tests), in
 * the order every rank runs them: TEST_ENTRY(name, timeout_seconds).  Each
 * skips where no GPU is (gpu_harness.h); run-gpu-tests.sh runs them. */
TEST_ENTRY(gpu_shared_device_refused, 120)
TEST_ENTRY(gpu_device_choice, 120)
TEST_ENTRY(gpu_neighbor_kernel, 120)
TEST_ENTRY(gpu_device_peer_array, 120)
TEST_ENTRY(gpu_write_value32, 120)
TEST_ENTRY(gpu_remote_view_memcpy, 120)
TEST_ENTRY(gpu_put_get, 120)
TEST_ENTRY(gpu_contiguous_view, 120)
TEST_ENTRY(gpu_mismatch, 120)
TEST_ENTRY(gpu_validate, 120)
TEST_ENTRY(gpu_free_while_mapped, 120)
TEST_ENTRY(gpu_signal_pads, 120)
TEST_ENTRY(gpu_register_user, 120)
TEST_ENTRY(gpu_device_barriers, 180)
TEST_ENTRY(gpu_alloc_cycles, 300)
TEST_ENTRY(gpu_alloc_cycles_long, 600)
