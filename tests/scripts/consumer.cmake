# cmake --install, then an outside project finds dpx and runs a 2-process all-reduce.
add_test(NAME install.consumer_project
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.sh ${PROJECT_BINARY_DIR})
set_tests_properties(install.consumer_project PROPERTIES LABELS "install" TIMEOUT 600)
