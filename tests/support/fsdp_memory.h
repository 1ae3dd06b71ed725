// What fully_shard saves in tensor memory per rank, against DDP on the same model, shared by
// processes over shm (tests/multiproc/fsdp_memory_test.cpp) and under mpirun
// (tests/mpi/mpi_fsdp_memory_test.cpp). Memory is counted by test::CountingAllocator, installed
// by the caller in a process of its own.
#pragma once

#include <cstddef>
#include <memory>

#include "dpx/comm/process_group.h"
#include "support/counting_allocator.h"

namespace dpx::test {

constexpr int64_t kWideWidth = 512;  // each unit: a 512 x 512 Linear, 1 MiB of float32
constexpr std::size_t kWideUnitBytes = (kWideWidth * kWideWidth + kWideWidth) * sizeof(float);

enum class MemoryWrap { kDdp, kFsdp };

// Builds `units` units, wraps them (fully_shard: each unit, then the root), trains `steps` steps
// with Adam; returns the peak of live tensor bytes in the last step (the optimizer's state
// exists by then).
std::size_t train_wide_net(MemoryWrap wrap, int units, int steps,
                           const std::shared_ptr<ProcessGroup>& pg, CountingAllocator& memory);

// The rank's part, at any world size N: 8 units under DDP hold at least the whole state
// (parameters, gradients, Adam's two) on every rank; under fully_shard the peak is at most the
// state / N plus 6 units, and below DDP's. Prints both peaks.
void expect_fsdp_peak_about_one_nth(const std::shared_ptr<ProcessGroup>& pg,
                                    CountingAllocator& memory);

}  // namespace dpx::test
