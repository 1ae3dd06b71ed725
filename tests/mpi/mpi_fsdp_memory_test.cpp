// fully_shard's peak of tensor memory per rank against DDP's on the mpi backend, one process per
// rank under mpirun, at whatever world size mpirun started: the bound forked processes check on
// shm (tests/multiproc/fsdp_memory_test.cpp; support/fsdp_memory.h). The counting allocator
// stays installed for the rest of the process, so CTest runs this suite in processes of its own
// (mpi.np2.memory to mpi.np4.memory).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mpi/mpi_group.h"
#include "support/counting_allocator.h"
#include "support/fsdp_memory.h"

namespace dpx::mpi_test {
namespace {

TEST(MpiFsdpMemory, PeakPerRankIsAboutOneNthPlusUnitsAgainstDdp) {
  torch::set_num_threads(1);  // as over shm: no intra-op pool's buffers in the peak
  auto& memory = test::CountingAllocator::install();
  test::expect_fsdp_peak_about_one_nth(mpi_group(), memory);
}

}  // namespace
}  // namespace dpx::mpi_test
