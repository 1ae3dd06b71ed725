# The Fashion-MNIST example, tiny (a few steps on a subset), so it cannot rot: a fresh run,
# a resumed run, the final model loaded by Python, and the metrics plot.
if(TARGET fashion_mnist)
  add_test(NAME example.fashion_mnist_smoke
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/run.sh $<TARGET_FILE:fashion_mnist>
            ${PROJECT_BINARY_DIR}/example_smoke)
  set_tests_properties(example.fashion_mnist_smoke PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED" ENVIRONMENT "DPX_PYTHON=${DPX_PYTHON}")
endif()

# Elastic: a worker SIGKILLed mid-epoch under dpxrun --max-restarts 1; the run resumes from the
# last checkpoint and finishes with the accuracy of a run without the fault.
if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME example.fashion_mnist_elastic
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/elastic.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/example_elastic)
  set_tests_properties(example.fashion_mnist_elastic PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()

# The timeline, the step report and the picture: dpxrun --timeline with the example, 2 ranks.
if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME example.fashion_mnist_timeline
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/timeline.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/example_timeline)
  set_tests_properties(example.fashion_mnist_timeline PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()

# --sharding full: fully_shard trains the same model as DDP, and resumes from its sharded
# checkpoint.
if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME example.fashion_mnist_sharded
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/sharded.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/example_sharded)
  set_tests_properties(example.fashion_mnist_sharded PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED" ENVIRONMENT "DPX_PYTHON=${DPX_PYTHON}")
endif()

# --checkpoint-format dcp: under DDP and fully_shard, a stopped run resumes from its DCP
# checkpoint; Python's dcp.load reads the last one.
if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME example.fashion_mnist_dcp
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/dcp.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/example_dcp)
  set_tests_properties(example.fashion_mnist_dcp PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED" ENVIRONMENT "DPX_PYTHON=${DPX_PYTHON}")
endif()
