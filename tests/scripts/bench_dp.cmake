# Smoke run of `dpx-bench dp` with a tiny batch, so the benchmark cannot rot. Its built-in check
# (DataParallel's gradients against the plain module's) fails the run when they disagree.
add_test(NAME bench_dp_smoke
  COMMAND dpx-bench dp --batch 8 --steps 1 --rounds 1 --warmup 0)
set_tests_properties(bench_dp_smoke PROPERTIES LABELS "bench" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "DataParallel, 2 CPU replicas x 1 thread")
