# The pickle reader's fuzzer (tests/fuzz/pickle_fuzz.cpp): a short run in CI, seeded with this
# build's Python oracle's files; the long run's command and result are in docs/checkpoint.md.
add_executable(dpx_pickle_fuzz ${PROJECT_SOURCE_DIR}/tests/fuzz/pickle_fuzz.cpp
  ${PROJECT_SOURCE_DIR}/tests/fuzz/pickle_seeds.cpp)
target_link_libraries(dpx_pickle_fuzz PRIVATE dpx_test_support)
set_target_properties(dpx_pickle_fuzz PROPERTIES POSITION_INDEPENDENT_CODE OFF)
target_precompile_headers(dpx_pickle_fuzz REUSE_FROM dpx_test_support)
add_test(NAME pickle_fuzz COMMAND dpx_pickle_fuzz --files 500 --seed 1 --python ${DPX_PYTHON})
set_tests_properties(pickle_fuzz PROPERTIES LABELS "unit" TIMEOUT 240)
# The same for DCP's .metadata, read by dpx::dcp_read_tensors beside its seeds' .distcp files.
add_test(NAME dcp_metadata_fuzz COMMAND dpx_pickle_fuzz --dcp --files 400 --seed 1 --python ${DPX_PYTHON})
set_tests_properties(dcp_metadata_fuzz PROPERTIES LABELS "unit" TIMEOUT 300)
