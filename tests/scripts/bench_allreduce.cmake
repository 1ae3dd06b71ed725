# dpx-bench allreduce at tiny sizes on two ranks, so the benchmark cannot rot.
foreach(backend IN ITEMS shm gloo)
  add_test(NAME bench_allreduce_${backend}
    COMMAND bash ${PROJECT_SOURCE_DIR}/bench/run_local.sh 2 --timeout 60 $<TARGET_FILE:dpx-bench>
      allreduce --backend ${backend} --min-bytes 4 --max-bytes 65536 --iters 5 --warmup 1)
  set_tests_properties(bench_allreduce_${backend} PROPERTIES LABELS "scripts;bench" TIMEOUT 90)
endforeach()
