# Smoke run of `dpx-bench ddp` with tiny sizes, so the benchmark cannot rot. It must
# exit 0 and print the ratio against the retained-memory ceiling (both configurations ran).
# grep reads all of it (no -q): output past its first match would end tee with SIGPIPE.
if(TARGET dpx-bench)
  add_test(NAME dpx_bench_ddp_smoke
    COMMAND bash -c "set -o pipefail; \"$0\" ddp --rounds 1 --cnn-steps 1 --mlp-steps 1 --warmup 1 --mlp-width 64 --no-python | tee /dev/stderr | grep '2 independent processes, retained memory: [0-9.]* throughput' >/dev/null"
            $<TARGET_FILE:dpx-bench>)
  set_tests_properties(dpx_bench_ddp_smoke PROPERTIES LABELS "bench" TIMEOUT 180)
  # The opt-in Python pair (pyplain, python1) on the CNN alone: two Python starts, ~10 s. Without
  # a Python that imports torch the benchmark says SKIPPED and prints no ratio.
  add_test(NAME dpx_bench_ddp_python1_smoke
    COMMAND bash -c "set -o pipefail; \"$0\" ddp --rounds 1 --cnn-steps 1 --warmup 1 --models cnn --configs pyplain,python1 | tee /dev/stderr | grep 'Python DDP 1 rank / Python plain: [0-9.]* throughput' >/dev/null"
            $<TARGET_FILE:dpx-bench>)
  set_tests_properties(dpx_bench_ddp_python1_smoke PROPERTIES LABELS "bench" TIMEOUT 180
    SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
