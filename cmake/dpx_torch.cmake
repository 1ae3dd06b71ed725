# Finds the LibTorch dpx builds against and derives what depends on its version.
#
# Which Torch: the one CMake finds through Torch_DIR or CMAKE_PREFIX_PATH (docs/install.md), e.g.
#   -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
#   -DCMAKE_PREFIX_PATH=/opt/libtorch              (the pytorch.org zip)
#   nothing                                         (Debian's libtorch-dev)
# Sets DPX_TORCH_VERSION, DPX_CXX_STANDARD (20 from LibTorch 2.13 on, else 17) and DPX_PYTHON
# (the interpreter whose `torch` is this LibTorch: the tests' oracle), and fixes TORCH_LIBRARIES.

# TorchConfig.cmake finds its Caffe2 half with find_dependency(Caffe2 PATHS <beside it>), which
# looks in the system's folders first: given only Torch_DIR, a pip LibTorch would pick up
# Debian's Caffe2 targets (LibTorch 1.13's libraries). The Caffe2 beside Torch_DIR goes first.
if(Torch_DIR AND NOT Caffe2_DIR AND EXISTS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake")
  get_filename_component(Caffe2_DIR "${Torch_DIR}/../Caffe2" ABSOLUTE)
  set(Caffe2_DIR "${Caffe2_DIR}" CACHE PATH "Caffe2's CMake folder, beside Torch_DIR")
endif()
find_package(Torch REQUIRED)
get_filename_component(_dpx_torch_root "${Torch_DIR}/.." ABSOLUTE)
get_filename_component(_dpx_caffe2_root "${Caffe2_DIR}/.." ABSOLUTE)
if(NOT _dpx_torch_root STREQUAL _dpx_caffe2_root)
  message(FATAL_ERROR "dpx: Torch (${Torch_DIR}) and its Caffe2 half (${Caffe2_DIR}) come from "
    "two different LibTorch installations; clear the build folder and give one of them with "
    "-DCMAKE_PREFIX_PATH=<LibTorch> or -DTorch_DIR=<LibTorch>/share/cmake/Torch")
endif()

set(DPX_TORCH_VERSION "${Torch_VERSION}")
if(NOT DPX_TORCH_VERSION)
  message(FATAL_ERROR "dpx: the Torch found at ${Torch_DIR} does not say its version "
    "(no TorchConfigVersion.cmake); point Torch_DIR at a LibTorch 1.13 to 2.15")
endif()
if(DPX_TORCH_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "dpx: LibTorch ${DPX_TORCH_VERSION} at ${Torch_DIR} is too old; "
    "dpx supports 1.13 to 2.15")
endif()
if(DPX_TORCH_VERSION VERSION_GREATER_EQUAL 2.16)
  message(WARNING "dpx: LibTorch ${DPX_TORCH_VERSION} is newer than any dpx was tested with "
    "(1.13 to 2.15); src/runtime/compat/ is where a difference would go")
endif()
if(DPX_TORCH_VERSION VERSION_GREATER_EQUAL 2.13)
  set(DPX_CXX_STANDARD 20)  # ATen's headers need C++20 from 2.13 on
else()
  set(DPX_CXX_STANDARD 17)
endif()

# Note [Two LibTorches on one machine]
# TorchConfig.cmake finds c10 (and a few others) with find_library(... PATHS <torch>/lib), which
# searches the system's directories before <torch>/lib. On a machine that also has Debian's
# libtorch-dev, a pip or zip LibTorch then links Debian's libc10.so beside its own libtorch:
# two c10s in one process. Every library TorchConfig found outside the Torch's own lib/ folder is
# replaced by the file of the same name inside it, where there is one.
get_filename_component(_dpx_torch_lib "${TORCH_INSTALL_PREFIX}/lib" ABSOLUTE)
set(_dpx_fixed)
foreach(_lib IN LISTS TORCH_LIBRARIES)
  if(IS_ABSOLUTE "${_lib}" AND EXISTS "${_dpx_torch_lib}")
    get_filename_component(_dir "${_lib}" DIRECTORY)
    get_filename_component(_name "${_lib}" NAME)
    if(NOT _dir STREQUAL _dpx_torch_lib AND EXISTS "${_dpx_torch_lib}/${_name}")
      message(STATUS "dpx: using ${_dpx_torch_lib}/${_name} instead of ${_lib}")
      set(_lib "${_dpx_torch_lib}/${_name}")
    endif()
  endif()
  list(APPEND _dpx_fixed "${_lib}")
endforeach()
set(TORCH_LIBRARIES ${_dpx_fixed})

# The installed libdpx and tools find this LibTorch through their RUNPATH (DPX_TORCH_RPATH): a
# library's RUNPATH serves its own dependencies only, so libdpx cannot count on the program's to
# find, say, libc10_cuda.so for it. A LibTorch in the system's directories needs none.
set(DPX_TORCH_RPATH "")
if(NOT _dpx_torch_lib MATCHES "^/(usr/)?lib(64)?(/|$)")
  set(DPX_TORCH_RPATH "${_dpx_torch_lib}")
endif()

# A pip LibTorch loads the CUDA libraries of the nvidia-* wheels beside it (its RPATH says
# $ORIGIN/../../nvidia/*/lib), but the linker does not expand $ORIGIN when it checks a program's
# indirect dependencies, and would take a system NCCL or cuDNN of another version instead. The
# wheels' folders are named to the linker (-rpath-link: a link-time path, nothing is run from it).
file(GLOB _dpx_nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
set(DPX_TORCH_LINK_OPTIONS)
if(_dpx_nvidia_libs)
  list(JOIN _dpx_nvidia_libs ":" _dpx_nvidia_path)
  set(DPX_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${_dpx_nvidia_path}")
endif()

# The Python oracle: a Torch inside .../site-packages/torch belongs to the Python of that tree
# (a virtual environment's bin/python); any other Torch is compared with the system's python3.
set(_dpx_python_guess /usr/bin/python3)
if(TORCH_INSTALL_PREFIX MATCHES "^(.*)/lib/python[0-9.]+/site-packages/torch/?$")
  if(EXISTS "${CMAKE_MATCH_1}/bin/python")
    set(_dpx_python_guess "${CMAKE_MATCH_1}/bin/python")
  endif()
endif()
set(DPX_PYTHON "${_dpx_python_guess}" CACHE FILEPATH
  "Python whose torch matches the LibTorch dpx builds against (the tests' oracle)")
message(STATUS "dpx: LibTorch ${DPX_TORCH_VERSION} at ${TORCH_INSTALL_PREFIX}, C++${DPX_CXX_STANDARD}, "
  "oracle ${DPX_PYTHON}")
