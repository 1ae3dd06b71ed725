# DPX_MPI=AUTO|ON|OFF: whether dpx compiles its mpi backend (src/comm/backends/mpi/) against the
# C library of an MPI found at configure time (CMake's FindMPI, C component only: MPI's C++
# bindings are deprecated and need their own library).
#   AUTO (default)  on when an MPI is found, else the backend is absent (asking for it is an
#                   error that names what to install), never a failed build
#   ON              the same, but no MPI is a configure error
#   OFF             never
# Which MPI: FindMPI's usual hints, e.g. -DMPI_HOME=/opt/mpich or
# -DMPI_C_COMPILER=/usr/bin/mpicc.mpich (Debian installs OpenMPI and MPICH side by side; the
# mpicc alternative picks one otherwise).
# Sets DPX_WITH_MPI (CMakeLists.txt gives mpi.h and the definition to src/comm/backends/mpi/
# only), DPX_MPI_CUDA_QUERY_DEFINITION (the CUDA-awareness query the MPI offers, below) and
# DPX_MPIEXEC / DPX_MPIEXEC_FLAGS, the launcher of that same MPI, for the tests.
set(DPX_MPI AUTO CACHE STRING "Compile dpx's mpi backend: AUTO, ON or OFF")
set_property(CACHE DPX_MPI PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${DPX_MPI}" _dpx_mpi)
if(NOT _dpx_mpi MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "dpx: DPX_MPI is '${DPX_MPI}'; give AUTO, ON or OFF")
endif()

set(DPX_WITH_MPI OFF)
if(NOT _dpx_mpi STREQUAL "OFF")
  # FindMPI's C component compiles a C probe; dpx itself stays C++.
  enable_language(C)
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(DPX_WITH_MPI ON)
  elseif(_dpx_mpi STREQUAL "ON")
    message(FATAL_ERROR "dpx: DPX_MPI=ON, but no MPI C library was found. Install one "
      "(Debian: apt-get install libopenmpi-dev openmpi-bin, or libmpich-dev mpich), point "
      "MPI_HOME or MPI_C_COMPILER at it, or configure with -DDPX_MPI=AUTO or OFF.")
  endif()
endif()

if(DPX_WITH_MPI)
  # The launcher that belongs to the library found, called by its own name: installing MPICH
  # beside OpenMPI can move Debian's plain `mpirun` to the other one.
  string(JOIN " " _dpx_mpi_paths ${MPI_C_LIBRARIES} ${MPI_C_INCLUDE_DIRS})
  if(_dpx_mpi_paths MATCHES "mpich")
    set(DPX_MPI_VENDOR mpich)
    find_program(DPX_MPIEXEC NAMES mpiexec.mpich mpiexec.hydra mpiexec
      HINTS ${MPI_HOME} PATH_SUFFIXES bin)
    set(DPX_MPIEXEC_FLAGS "" CACHE STRING "flags the tests give the MPI launcher")
  else()
    set(DPX_MPI_VENDOR openmpi)
    find_program(DPX_MPIEXEC NAMES mpirun.openmpi mpirun HINTS ${MPI_HOME} PATH_SUFFIXES bin)
    # The tests oversubscribe 2 cores with up to 4 ranks; CI runs as root.
    set(DPX_MPIEXEC_FLAGS "--oversubscribe;--allow-run-as-root" CACHE STRING
      "flags the tests give the MPI launcher")
  endif()
  # Which question "are you CUDA-aware?" this MPI can be asked (Note [CUDA-aware MPI] in
  # src/comm/backends/mpi/cuda_path.h): MPICH 4's MPIX_GPU_query_support in mpi.h, else
  # OpenMPI's MPIX_Query_cuda_support in mpi-ext.h (its cuda extension, which an administrator
  # can leave out). Compiled and linked against the MPI found; an MPI with neither is asked
  # nothing, and dpx stages CUDA tensors through host memory (never a failed build).
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${MPI_C_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_LIBRARIES ${MPI_C_LIBRARIES})
  set(CMAKE_REQUIRED_QUIET ON)
  check_c_source_compiles("#include <mpi.h>
int main(void) { int yes = 0; return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes); }"
    DPX_MPI_HAS_GPU_QUERY)
  check_c_source_compiles("#include <mpi.h>
#include <mpi-ext.h>
#if !defined(OMPI_HAVE_MPI_EXT_CUDA) || !OMPI_HAVE_MPI_EXT_CUDA
#error OpenMPI's cuda extension is absent
#endif
int main(void) { return MPIX_Query_cuda_support(); }" DPX_MPI_HAS_CUDA_QUERY)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_QUIET)
  # DPX_MPI_CUDA_QUERY_DEFINITION: what the mpi backend's sources compile with.
  if(DPX_MPI_HAS_GPU_QUERY)
    set(DPX_MPI_CUDA_QUERY MPIX_GPU_query_support)
    set(DPX_MPI_CUDA_QUERY_DEFINITION DPX_MPI_GPU_QUERY=1)
  elseif(DPX_MPI_HAS_CUDA_QUERY)
    set(DPX_MPI_CUDA_QUERY MPIX_Query_cuda_support)
    set(DPX_MPI_CUDA_QUERY_DEFINITION DPX_MPI_CUDA_QUERY=1)
  else()
    set(DPX_MPI_CUDA_QUERY "none: CUDA tensors are staged")
    set(DPX_MPI_CUDA_QUERY_DEFINITION "")
  endif()
  message(STATUS "dpx: mpi backend on (DPX_MPI=${_dpx_mpi}; ${DPX_MPI_VENDOR}, MPI "
    "${MPI_C_VERSION}, ${MPI_C_LIBRARIES}; launcher ${DPX_MPIEXEC}; CUDA query "
    "${DPX_MPI_CUDA_QUERY})")
elseif(_dpx_mpi STREQUAL "OFF")
  message(STATUS "dpx: mpi backend off (DPX_MPI=OFF)")
else()
  message(STATUS "dpx: mpi backend off (no MPI C library found; install libopenmpi-dev or "
    "libmpich-dev, or set MPI_HOME)")
endif()
