# dpxrun's tests (tests/multiproc/launcher_*_test.cpp) run dpxrun on this worker program.
add_executable(dpx_test_worker ${CMAKE_CURRENT_SOURCE_DIR}/workers/test_worker.cpp)
target_link_libraries(dpx_test_worker PRIVATE dpx_test_support)
set_target_properties(dpx_test_worker PROPERTIES POSITION_INDEPENDENT_CODE OFF)  # as the PCH
target_precompile_headers(dpx_test_worker REUSE_FROM dpx_test_support)
if(TARGET dpx_multiproc_tests AND TARGET dpxrun)
  add_dependencies(dpx_multiproc_tests dpx_test_worker dpxrun)
endif()
