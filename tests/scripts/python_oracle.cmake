# The sampler's golden file against the Python oracle of this build's LibTorch (DPX_PYTHON):
# a PyTorch whose DistributedSampler changed order would fail here, not in users' jobs.
add_test(NAME sampler_golden.python
  COMMAND bash -c "out=$(mktemp) && trap 'rm -f $out' EXIT && \"$0\" \"$1/tests/python/gen_sampler_golden.py\" $out && diff -q \"$1/tests/data/sampler_golden.txt\" $out"
          ${DPX_PYTHON} ${PROJECT_SOURCE_DIR})
set_tests_properties(sampler_golden.python PROPERTIES LABELS "unit;python" TIMEOUT 120)
