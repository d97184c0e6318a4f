/* Ranks on several hosts made of network and UTS namespaces
 * (tests/test-hosts.c, tests/ns_hosts.h): TEST_ENTRY(name, timeout_seconds). */
TEST_ENTRY(hosts_store_2, 60)
TEST_ENTRY(hosts_store_3, 60)
TEST_ENTRY(hosts_store_4x2, 90)
TEST_ENTRY(hosts_wrong_token, 60)
TEST_ENTRY(hosts_host_backend_refused, 60)
TEST_ENTRY(hosts_fd_exchange_refused, 60)
TEST_ENTRY(hosts_native_fd_handles_refused, 60)
TEST_ENTRY(hosts_native_fabric_handles, 60)
TEST_ENTRY(hosts_callbacks, 60)
TEST_ENTRY(hosts_pmix, 90)
