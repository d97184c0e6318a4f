/* The fault matrix (tests/test-faults.c): one test per phase, each running
 * 16 cells (kill/stop x rank 0/last x 2/4 ranks x by hand/symmem-run). */
TEST_ENTRY(faults_setting, 30)
TEST_ENTRY(faults_before_init, 300)
TEST_ENTRY(faults_before_second_init, 300)
TEST_ENTRY(faults_init_hello, 300)
TEST_ENTRY(faults_init_shm, 300)
TEST_ENTRY(faults_alloc, 300)
TEST_ENTRY(faults_rendezvous, 300)
TEST_ENTRY(faults_barrier, 300)
TEST_ENTRY(faults_collective, 300)
TEST_ENTRY(faults_signal_wait, 300)
TEST_ENTRY(faults_free, 300)
TEST_ENTRY(faults_destroy, 300)
