/* Tests of the cuda backend (cuMemAlloc + CUDA IPC) over the fake CUDA
 * driver (fake_cuda.c), run on machines without a GPU:
 * TEST_ENTRY(name, timeout_seconds).  ctest reads this list
 * (tests/gpu/CMakeLists.txt); the bodies are in cuda_fake_tests.c. */
TEST_ENTRY(cuda_fake_probe_no_library, 20)
TEST_ENTRY(cuda_fake_probe_no_device, 20)
TEST_ENTRY(cuda_fake_probe_no_unified_addressing, 20)
TEST_ENTRY(cuda_fake_init_no_ipc, 60)
TEST_ENTRY(cuda_fake_auto_order, 60)
TEST_ENTRY(cuda_fake_full_path_3, 60)
TEST_ENTRY(cuda_fake_pid_namespace_peer, 60)
TEST_ENTRY(cuda_fake_open_fails, 60)
TEST_ENTRY(cuda_fake_handles_closed, 60)
TEST_ENTRY(cuda_fake_killed_owner_swept, 60)
TEST_ENTRY(cuda_fake_describe, 20)
TEST_ENTRY(cuda_fake_a2av_launch, 60)
TEST_ENTRY(cuda_fake_ce_collectives, 120)
TEST_ENTRY(cuda_fake_register_user, 60)
