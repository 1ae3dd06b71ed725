# Smoke run of `dpx-bench ddp` with tiny sizes, so the benchmark cannot rot (STYLE.md #9).
if(TARGET dpx-bench)
  add_test(NAME dpx_bench_ddp_smoke
    COMMAND dpx-bench ddp --rounds 1 --cnn-steps 1 --mlp-steps 1 --warmup 1 --mlp-width 64
            --no-python)
  # The ratio against the retained-memory ceiling needs both configurations to have run.
  set_tests_properties(dpx_bench_ddp_smoke PROPERTIES LABELS "bench" TIMEOUT 180
    PASS_REGULAR_EXPRESSION "2 independent processes, retained memory: [0-9.]+ throughput")
endif()
