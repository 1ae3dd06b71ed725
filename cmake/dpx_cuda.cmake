# DPX_CUDA=AUTO|ON|OFF: whether dpx compiles its CUDA code (src/runtime/cuda/,
# src/comm/backends/nccl/).
#   AUTO (default)  on when the Torch found was built with CUDA and c10d's NCCL, else off
#   ON              the same, but a Torch without CUDA is a configure error
#   OFF             never, even against a CUDA Torch
# Sets DPX_WITH_CUDA (ON/OFF) and DPX_NCCL_INCLUDE_DIR. Needs dpx_torch.cmake first.
set(DPX_CUDA AUTO CACHE STRING "Compile dpx's CUDA support: AUTO, ON or OFF")
set_property(CACHE DPX_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${DPX_CUDA}" _dpx_cuda)
if(NOT _dpx_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "dpx: DPX_CUDA is '${DPX_CUDA}'; give AUTO, ON or OFF")
endif()

# What the Torch found offers: its Caffe2 half says whether it was built with CUDA, and the
# torch_cuda target carries USE_C10D_NCCL when c10d's ProcessGroupNCCL is inside it.
set(_dpx_torch_cuda_why "")
if(NOT CAFFE2_USE_CUDA OR NOT TARGET torch_cuda)
  set(_dpx_torch_cuda_why "it was built without CUDA")
else()
  get_target_property(_dpx_cuda_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  if(NOT "USE_C10D_NCCL" IN_LIST _dpx_cuda_defs)
    set(_dpx_torch_cuda_why "it was built without c10d's NCCL process group (USE_C10D_NCCL)")
  endif()
endif()
# nccl.h: the one of the NCCL wheel beside a pip Torch (the library it loads) first, then the
# CUDA toolkit's.
if(NOT _dpx_torch_cuda_why)
  find_path(DPX_NCCL_INCLUDE_DIR nccl.h
    HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" "${CUDAToolkit_INCLUDE_DIRS}"
          /usr/local/cuda/include)
  if(NOT DPX_NCCL_INCLUDE_DIR)
    set(_dpx_torch_cuda_why "nccl.h was not found (set DPX_NCCL_INCLUDE_DIR to its folder)")
  endif()
endif()

if(_dpx_cuda STREQUAL "OFF")
  set(DPX_WITH_CUDA OFF)
elseif(NOT _dpx_torch_cuda_why)
  set(DPX_WITH_CUDA ON)
elseif(_dpx_cuda STREQUAL "ON")
  message(FATAL_ERROR "dpx: DPX_CUDA=ON, but the LibTorch ${DPX_TORCH_VERSION} at "
    "${TORCH_INSTALL_PREFIX} cannot give CUDA support: ${_dpx_torch_cuda_why}. Point "
    "CMAKE_PREFIX_PATH at a CUDA-enabled LibTorch (e.g. pip's torch, docs/install.md), or "
    "configure with -DDPX_CUDA=AUTO or OFF to build without CUDA.")
else()
  set(DPX_WITH_CUDA OFF)
endif()
if(DPX_WITH_CUDA)
  message(STATUS "dpx: CUDA support on (DPX_CUDA=${_dpx_cuda}; nccl.h in ${DPX_NCCL_INCLUDE_DIR})")
elseif(_dpx_torch_cuda_why)
  message(STATUS "dpx: CUDA support off (DPX_CUDA=${_dpx_cuda}; this LibTorch: ${_dpx_torch_cuda_why})")
else()
  message(STATUS "dpx: CUDA support off (DPX_CUDA=${_dpx_cuda})")
endif()
