# Several "hosts" (network namespaces on one bridge, bench/cluster_netns.sh), one dpxrun agent
# per host: 4 hosts x 4 ranks of the example on the hierarchical backend, and a host lost in the
# middle of training (lost_host.sh), and fault-tolerant training through a lost host and a lost
# coordinator (fault_tolerant.sh, ft_coordinator.sh). They need root and iproute2, and skip without.
if(TARGET fashion_mnist AND TARGET dpxrun)
  foreach(case_timeout IN ITEMS four_by_four:300 lost_host:400 fault_tolerant:300)
    string(REPLACE ":" ";" case_timeout ${case_timeout})
    list(GET case_timeout 0 case)
    list(GET case_timeout 1 timeout)
    add_test(NAME cluster.${case}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster/${case}.sh $<TARGET_FILE:dpxrun>
              $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_${case})
    set_tests_properties(cluster.${case} PROPERTIES LABELS "multiproc;cluster" TIMEOUT ${timeout}
      PASS_REGULAR_EXPRESSION "${case}: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
  endforeach()
  # A host that hangs (SIGSTOP) instead of dying: dropped on its agent's silence.
  add_test(NAME cluster.fault_tolerant_stop
    COMMAND env SIGNAL=STOP HOSTS=3
            bash ${CMAKE_CURRENT_LIST_DIR}/cluster/fault_tolerant.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_fault_tolerant_stop)
  set_tests_properties(cluster.fault_tolerant_stop PROPERTIES LABELS "multiproc;cluster"
    TIMEOUT 300 PASS_REGULAR_EXPRESSION "fault_tolerant: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
  # A hot spare started with the job takes a lost host's place.
  add_test(NAME cluster.fault_tolerant_spare
    COMMAND env SPARE=1 HOSTS=4
            bash ${CMAKE_CURRENT_LIST_DIR}/cluster/fault_tolerant.sh $<TARGET_FILE:dpxrun>
            $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_fault_tolerant_spare)
  set_tests_properties(cluster.fault_tolerant_spare PROPERTIES LABELS "multiproc;cluster"
    TIMEOUT 300 PASS_REGULAR_EXPRESSION "fault_tolerant: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
  foreach(signal IN ITEMS KILL STOP)
    add_test(NAME cluster.ft_coordinator_${signal}
      COMMAND env LOSE_COORDINATOR=${signal} HOSTS=3
              bash ${CMAKE_CURRENT_LIST_DIR}/cluster/fault_tolerant.sh $<TARGET_FILE:dpxrun>
              $<TARGET_FILE:fashion_mnist> ${PROJECT_BINARY_DIR}/cluster_ft_coordinator_${signal})
    set_tests_properties(cluster.ft_coordinator_${signal} PROPERTIES LABELS "multiproc;cluster"
      TIMEOUT 200 PASS_REGULAR_EXPRESSION "fault_tolerant: PASS" SKIP_REGULAR_EXPRESSION "SKIPPED")
  endforeach()
endif()
