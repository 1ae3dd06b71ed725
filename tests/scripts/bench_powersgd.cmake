# dpx-bench powersgd on two ranks with a tiny model, so the benchmark cannot rot; it must print
# both of its ratios.
if(TARGET dpx-bench)
  add_test(NAME bench_powersgd_smoke
    COMMAND bash -c "set -o pipefail; bash \"$0\" 2 --timeout 60 \"$1\" powersgd --backend shm --width 64 --rounds 1 --steps 1 | tee /dev/stderr | grep -c 'ratio [0-9.]*$' | grep -qx 2"
            ${PROJECT_SOURCE_DIR}/bench/run_local.sh $<TARGET_FILE:dpx-bench>)
  set_tests_properties(bench_powersgd_smoke PROPERTIES LABELS "scripts;bench" TIMEOUT 90)
endif()
