# The Fashion-MNIST example, tiny (a few steps on a subset), so it cannot rot: a fresh run,
# a resumed run, and the metrics plot.
if(TARGET fashion_mnist)
  add_test(NAME example.fashion_mnist_smoke
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/run.sh $<TARGET_FILE:fashion_mnist>
            ${PROJECT_BINARY_DIR}/example_smoke)
  set_tests_properties(example.fashion_mnist_smoke PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
