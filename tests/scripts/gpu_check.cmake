# scripts/gpu_check.sh (the one-call GPU check): its plan fits its deadline, and on a machine
# without a GPU it fails at once, in one line.
add_test(NAME scripts.gpu_check_without_gpu
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gpu_check/no_gpu.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(scripts.gpu_check_without_gpu PROPERTIES LABELS "scripts" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "PASS")

# Each pattern of the check's gtest filters matches a test of this build: a GPU test renamed out of
# its filter would otherwise drop out of the one call a GPU session makes, unnoticed.
add_test(NAME scripts.gpu_check_filters
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/gpu_check.sh filters ${CMAKE_BINARY_DIR})
set_tests_properties(scripts.gpu_check_filters PROPERTIES LABELS "scripts" TIMEOUT 60)
