# Several "hosts" (network namespaces on one bridge, bench/cluster_netns.sh), one dpxrun agent
# per host: 4 hosts x 4 ranks of the example on the hierarchical backend, and a host lost in the
# middle of training (lost_host.sh). They need root and iproute2, and skip without.
if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME cluster.four_by_four
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster/four_by_four.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_four_by_four)
  set_tests_properties(cluster.four_by_four PROPERTIES LABELS "multiproc;cluster" TIMEOUT 300
    PASS_REGULAR_EXPRESSION "four_by_four: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()

if(TARGET fashion_mnist AND TARGET dpxrun)
  add_test(NAME cluster.lost_host
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster/lost_host.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_lost_host)
  set_tests_properties(cluster.lost_host PROPERTIES LABELS "multiproc;cluster" TIMEOUT 400
    PASS_REGULAR_EXPRESSION "lost_host: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
