# The layer order of docs/architecture.md: no #include goes up it (scripts/check_layers.py).
add_test(NAME layers COMMAND ${DPX_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
  ${PROJECT_SOURCE_DIR})
set_tests_properties(layers PROPERTIES LABELS "unit;scripts" TIMEOUT 60)
