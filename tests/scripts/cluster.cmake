# Several "hosts" (network namespaces on one bridge, bench/cluster_netns.sh), one dpxrun agent
# per host: 4 hosts x 4 ranks of the example on the hierarchical backend, and a host lost in the
# middle of training (lost_host.sh). They need root and iproute2, and skip without.
if(TARGET fashion_mnist AND TARGET dpxrun)
  foreach(case_timeout IN ITEMS four_by_four:300 lost_host:400)
    string(REPLACE ":" ";" case_timeout ${case_timeout})
    list(GET case_timeout 0 case)
    list(GET case_timeout 1 timeout)
    add_test(NAME cluster.${case}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster/${case}.sh $<TARGET_FILE:dpxrun>
              $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_${case})
    set_tests_properties(cluster.${case} PROPERTIES LABELS "multiproc;cluster" TIMEOUT ${timeout}
      PASS_REGULAR_EXPRESSION "${case}: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
  endforeach()
endif()
