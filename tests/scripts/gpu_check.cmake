# scripts/gpu_check.sh (the one-call GPU check): its plan fits its deadline, and on a machine
# without a GPU it fails at once, in one line.
add_test(NAME scripts.gpu_check_without_gpu
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gpu_check/no_gpu.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(scripts.gpu_check_without_gpu PROPERTIES LABELS "scripts" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "PASS")

# Every step of the check without a GPU, against this build: each command's program exists, each
# pattern of the gtest filters matches a test (a GPU test renamed out of its filter would otherwise
# drop out of the one call a GPU session makes, unnoticed), the build's targets exist, and the
# summary is written. So the script's own mistakes show in CI, before a GPU is at hand.
add_test(NAME scripts.gpu_check_dry_run
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/gpu_check.sh dry-run ${CMAKE_BINARY_DIR})
set_tests_properties(scripts.gpu_check_dry_run PROPERTIES LABELS "scripts" TIMEOUT 300)

# A step that runs out of time is reported where it hung (scripts/where_stuck.sh) and ended with
# every process below it, the ranks a test forked too.
add_test(NAME scripts.gpu_check_step_out_of_time
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/gpu_check.sh selftest)
set_tests_properties(scripts.gpu_check_step_out_of_time PROPERTIES LABELS "scripts" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "selftest: PASS")
