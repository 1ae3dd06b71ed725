# tests/multiproc/cli_test.cpp runs dpx-bench and the example: build them first.
foreach(program IN ITEMS dpx-bench fashion_mnist)
  if(TARGET dpx_multiproc_tests AND TARGET ${program})
    add_dependencies(dpx_multiproc_tests ${program})
  endif()
endforeach()
