# bench/example_vs_python.sh (the example end to end against its Python DDP twin), tiny, so the
# benchmark and the twin cannot rot: one round of 20 steps must print its median ratio line.
# Not on LibTorch 1.13: Debian's torchrun of that version fails under its Python 3.11 before
# starting a worker (AttributeError in its redirects' handling), whatever the script.
if(TARGET fashion_mnist AND TARGET dpxrun AND DPX_PYTHON AND
   DPX_TORCH_VERSION VERSION_GREATER_EQUAL 2.0)
  add_test(NAME bench_example_vs_python_smoke
    COMMAND bash -c "set -o pipefail; ROUNDS=1 MAX_STEPS=20 PYTHON=\"$0\" bash \"$1/bench/example_vs_python.sh\" \"$2\" | tee /dev/stderr | grep -q '^median python/dpx end to end: [0-9.]*'"
            ${DPX_PYTHON} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  set_tests_properties(bench_example_vs_python_smoke PROPERTIES LABELS "scripts;bench"
    TIMEOUT 180)
endif()
