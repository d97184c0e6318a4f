/* Many ranks (tests/test-scale.c): TEST_ENTRY(name, timeout_seconds). */
TEST_ENTRY(scale_store_messages_linear, 240)
TEST_ENTRY(scale_map_on_use_dead_peer, 60)
TEST_ENTRY(scale_map_on_use_maps_what_is_used, 60)
TEST_ENTRY(scale_map_on_use_threads, 60)
TEST_ENTRY(scale_map_on_use_after_rendezvous, 60)
