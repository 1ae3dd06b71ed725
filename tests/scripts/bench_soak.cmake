# dpx-bench soak, short, on two ranks, so the memory report and its checked collectives cannot rot.
add_test(NAME bench_soak
  COMMAND bash ${PROJECT_SOURCE_DIR}/bench/run_local.sh 2 --timeout 60 $<TARGET_FILE:dpx-bench>
    soak --backend shm --collectives 200 --max-elements 65536 --report-every 100)
set_tests_properties(bench_soak PROPERTIES LABELS "scripts;bench" TIMEOUT 90)
