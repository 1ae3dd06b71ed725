# No dpx binary imports a std::filesystem operation that LibTorch defines
# (Note [LibTorch's std::filesystem], dpx/runtime/files.h): LibTorch 2.11's copies crash.
set(_dpx_fs_binaries $<TARGET_FILE:dpx>)
foreach(_t IN ITEMS dpxrun dpx-bench fashion_mnist dist_mnist dpx_test_worker dpx_unit_tests
        dpx_multirank_tests dpx_multiproc_tests dpx_isolated_tests)
  if(TARGET ${_t})
    list(APPEND _dpx_fs_binaries $<TARGET_FILE:${_t}>)
  endif()
endforeach()
add_test(NAME filesystem_imports COMMAND ${DPX_PYTHON}
  ${PROJECT_SOURCE_DIR}/scripts/check_filesystem_imports.py ${_dpx_fs_binaries})
set_tests_properties(filesystem_imports PROPERTIES LABELS "unit;scripts" TIMEOUT 120)
