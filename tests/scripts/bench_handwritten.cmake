# `dpx-bench handwritten` (dist-mnist.cpp's per-parameter all-reduce against DDP), tiny, on two
# ranks over each host group it is recorded for, so the benchmark cannot rot: the run must print
# its ratio line.
if(TARGET dpx-bench)
  foreach(backend IN ITEMS shm gloo)
    add_test(NAME bench_handwritten_${backend}_smoke
      COMMAND bash -c "set -o pipefail; bash \"$0\" 2 --timeout 60 \"$1\" handwritten --backend ${backend} --rounds 1 --steps 1 | tee /dev/stderr | grep -q 'hand-written [0-9.]* ms, DDP [0-9.]* ms, ratio [0-9.]*$'"
              ${PROJECT_SOURCE_DIR}/bench/run_local.sh $<TARGET_FILE:dpx-bench>)
    set_tests_properties(bench_handwritten_${backend}_smoke PROPERTIES LABELS "scripts;bench"
      TIMEOUT 90)
  endforeach()
endif()
