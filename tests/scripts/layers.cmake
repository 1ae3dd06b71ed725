# The layer order of docs/architecture.md: no #include goes against it (scripts/check_layers.py),
# and the check itself fails on each kind of violation planted in a copy of the tree.
add_test(NAME layers COMMAND ${DPX_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
  ${PROJECT_SOURCE_DIR})
add_test(NAME layers_planted
  COMMAND ${DPX_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_layers_test.py ${PROJECT_SOURCE_DIR})
set_tests_properties(layers layers_planted PROPERTIES LABELS "unit;scripts" TIMEOUT 120)
# Named notes: one definition each, names never split over lines (scripts/check_notes.py).
add_test(NAME notes COMMAND ${DPX_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_notes.py
  ${PROJECT_SOURCE_DIR})
set_tests_properties(notes PROPERTIES LABELS "unit;scripts" TIMEOUT 60)
