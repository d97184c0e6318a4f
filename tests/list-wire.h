TEST_ENTRY(wire_subsys_list_read_whole, 10)
