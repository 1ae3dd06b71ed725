# The ported dist-mnist example (examples/dist_mnist) under both launchers its users have: mpirun
# -np 2 and dpxrun --nproc-per-node 2, 300 steps each; both must train, and alike.
if(TARGET dist_mnist AND TARGET dpxrun)
  add_test(NAME example.dist_mnist_mpirun_and_dpxrun
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example/dist_mnist.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:dist_mnist> ${PROJECT_BINARY_DIR}/example_dist_mnist)
  set_tests_properties(example.dist_mnist_mpirun_and_dpxrun PROPERTIES LABELS "example" TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
