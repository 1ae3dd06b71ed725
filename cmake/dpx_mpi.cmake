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
# only) and DPX_MPIEXEC / DPX_MPIEXEC_FLAGS, the launcher of that same MPI, for the tests.
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
  message(STATUS "dpx: mpi backend on (DPX_MPI=${_dpx_mpi}; ${DPX_MPI_VENDOR}, MPI "
    "${MPI_C_VERSION}, ${MPI_C_LIBRARIES}; launcher ${DPX_MPIEXEC})")
elseif(_dpx_mpi STREQUAL "OFF")
  message(STATUS "dpx: mpi backend off (DPX_MPI=OFF)")
else()
  message(STATUS "dpx: mpi backend off (no MPI C library found; install libopenmpi-dev or "
    "libmpich-dev, or set MPI_HOME)")
endif()
