/* The GPU tests of the collectives (gpu_coll_tests.c, symm-gpu-coll-tests),
 * in the order every rank runs them: TEST_ENTRY(name, timeout_seconds).
 * Each skips where no GPU is (gpu_harness.h); run-gpu-tests.sh runs them. */
TEST_ENTRY(gpu_coll_ops, 600)
TEST_ENTRY(gpu_coll_ops_large, 600)
TEST_ENTRY(gpu_coll_graph, 300)
TEST_ENTRY(gpu_coll_mismatch, 300)
TEST_ENTRY(gpu_coll_zero_copy, 300)
TEST_ENTRY(gpu_coll_signals, 300)
TEST_ENTRY(gpu_coll_a2av_host, 300)
TEST_ENTRY(gpu_coll_a2av_dev, 300)
TEST_ENTRY(gpu_coll_a2av_errors, 120)
TEST_ENTRY(gpu_coll_a2av_graph, 120)
TEST_ENTRY(gpu_coll_ce, 600)
TEST_ENTRY(gpu_coll_ce_graph, 120)
TEST_ENTRY(gpu_coll_ce_mismatch, 120)
TEST_ENTRY(gpu_coll_ce_direct, 300)
TEST_ENTRY(gpu_coll_ce_direct_mismatch, 120)
TEST_ENTRY(gpu_coll_rank_never_calls, 120)
