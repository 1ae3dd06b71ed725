# Smoke run of `dpx-bench ddp` with tiny sizes, so the benchmark cannot rot (STYLE.md #9).
if(TARGET dpx-bench)
  add_test(NAME dpx_bench_ddp_smoke
    COMMAND dpx-bench ddp --rounds 1 --cnn-steps 1 --mlp-steps 1 --warmup 1 --mlp-width 64
            --no-python)
  set_tests_properties(dpx_bench_ddp_smoke PROPERTIES LABELS "bench" TIMEOUT 180)
endif()
