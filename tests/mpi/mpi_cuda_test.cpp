// What an mpi group on a CUDA device becomes, under the real MPI and its real answer to "are you
// CUDA-aware?" (Note [CUDA-aware MPI] in comm/backends/mpi/cuda_path.h). No GPU is needed: c10's
// fake device guard stands in for CUDA's, and no collective runs, so nothing touches device
// memory. Every rank runs each test in the same order (each makes an mpi group, or none).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "comm/backends/mpi/cuda_query.h"
#include "dpx/dpx.h"
#include "mpi/mpi_group.h"
#include "support/expect_throws.h"
#include "support/fake_cuda_devices.h"

namespace dpx::mpi_test {
namespace {

using detail::mpi::CudaSupport;

// DPX_MPI_CUDA_AWARE set (or unset, for nullopt) while this lives.
class CudaAwareVariable {
 public:
  explicit CudaAwareVariable(const char* value) {
    if (value) {
      ::setenv("DPX_MPI_CUDA_AWARE", value, 1);
    } else {
      ::unsetenv("DPX_MPI_CUDA_AWARE");
    }
  }
  ~CudaAwareVariable() { ::unsetenv("DPX_MPI_CUDA_AWARE"); }
};

std::shared_ptr<ProcessGroup> cuda_group(const std::shared_ptr<ProcessGroup>& world) {
  ProcessGroup::Options o;
  o.device = at::Device("cuda:0");
  o.timeout = std::chrono::milliseconds(20000);
  return new_process_group("mpi", nullptr, world->rank(), world->size(), o);
}

CudaSupport says() {
  static const CudaSupport answer = [] {
    const CudaSupport a = detail::mpi::mpi_cuda_support();
    std::cout << "the MPI, asked whether it is CUDA-aware, answers: " << detail::mpi::to_string(a)
              << "\n";
    return a;
  }();
  return answer;
}

// The configure probe's finding reaches the query: an MPI with one is asked (and answers).
TEST(MpiCuda, TheMpiIsAskedWhereItOffersAQuery) {
  EXPECT_EQ(says() != CudaSupport::kNoQuery, static_cast<bool>(DPX_TEST_MPI_CUDA_QUERY));
}

TEST(MpiCuda, UnsetFollowsTheMpisAnswer) {
  auto world = mpi_group();
  test::FakeCudaDevices fake;
  CudaAwareVariable unset(nullptr);
  auto pg = cuda_group(world);
  EXPECT_EQ(pg->backend(), says() == CudaSupport::kYes ? "mpi-cuda-aware" : "mpi-staged");
}

TEST(MpiCuda, ZeroStagesWhateverTheMpiSays) {
  auto world = mpi_group();
  test::FakeCudaDevices fake;
  CudaAwareVariable zero("0");
  EXPECT_EQ(cuda_group(world)->backend(), "mpi-staged");
}

// Debian's OpenMPI says no: forcing it on must not hand it device pointers. A dpx built
// without CUDA (Debian's LibTorch 1.13) refuses it before asking the MPI.
TEST(MpiCuda, OneIsHonouredOrRefusedAsTheMpiSays) {
  auto world = mpi_group();
  test::FakeCudaDevices fake;
  CudaAwareVariable one("1");
  if (!cuda::built()) {
    const std::string msg = test::expect_throws<c10::Error>([&] { cuda_group(world); });
    EXPECT_NE(msg.find("DPX_MPI_CUDA_AWARE=1, but this dpx was built without"),
              std::string::npos) << msg;
  } else if (says() == CudaSupport::kNo) {
    const std::string msg = test::expect_throws<c10::Error>([&] { cuda_group(world); });
    EXPECT_NE(msg.find("DPX_MPI_CUDA_AWARE=1, but the MPI, asked whether it is CUDA-aware, "
                       "answers no"), std::string::npos) << msg;
  } else {
    EXPECT_EQ(cuda_group(world)->backend(), "mpi-cuda-aware");
  }
}

TEST(MpiCuda, AMalformedValueIsRefused) {
  auto world = mpi_group();
  test::FakeCudaDevices fake;
  CudaAwareVariable yes("yes");
  const std::string msg = test::expect_throws<c10::Error>([&] { cuda_group(world); });
  EXPECT_NE(msg.find("DPX_MPI_CUDA_AWARE is 'yes'; give 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dpx::mpi_test
