# DPX_CUDA: a bad value, and ON against a LibTorch without CUDA, stop the configure with a
# message that says what to do (cmake/dpx_cuda.cmake). Each configures a scratch build folder.
set(_dpx_cuda_cases "bogus")
if(NOT DPX_WITH_CUDA)
  list(APPEND _dpx_cuda_cases "ON")
endif()
foreach(value IN LISTS _dpx_cuda_cases)
  add_test(NAME cmake.dpx_cuda_${value}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cuda_option/configure.sh ${PROJECT_SOURCE_DIR}
            ${CMAKE_CURRENT_BINARY_DIR}/dpx_cuda_${value} ${Torch_DIR} ${value})
  set_tests_properties(cmake.dpx_cuda_${value} PROPERTIES LABELS "cmake" TIMEOUT 300)
endforeach()
set_tests_properties(cmake.dpx_cuda_bogus PROPERTIES
  PASS_REGULAR_EXPRESSION "configure failed:.*DPX_CUDA is 'bogus'. give AUTO, ON or OFF")
if(NOT DPX_WITH_CUDA)
  set_tests_properties(cmake.dpx_cuda_ON PROPERTIES
    PASS_REGULAR_EXPRESSION "configure failed:.*DPX_CUDA=ON, but the LibTorch .* cannot give CUDA support.*-DDPX_CUDA=AUTO or OFF")
endif()
