// The world's mpi group, as every test under mpirun makes it (tests/mpi/mpi_test.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "dpx/dpx.h"

namespace dpx::mpi_test {

// No ProcessOptions: the test process keeps its own process-wide settings.
inline std::shared_ptr<ProcessGroup> mpi_group(
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  InitOptions o;
  o.backend = "mpi";
  o.timeout = timeout;
  o.process = std::nullopt;
  return init_process_group(o);
}

}  // namespace dpx::mpi_test
