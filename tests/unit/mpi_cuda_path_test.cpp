// Whether an mpi group on a CUDA device hands MPI device pointers or stages them, from what the
// MPI says, DPX_MPI_CUDA_AWARE and whether dpx has CUDA (Note [CUDA-aware MPI] in
// comm/backends/mpi/cuda_path.h). Pure: no MPI, no GPU.
#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "comm/backends/mpi/cuda_path.h"
#include "support/expect_throws.h"

namespace dpx::detail::mpi {
namespace {

using ::testing::HasSubstr;

CudaPath choose(CudaSupport says, std::optional<std::string> forced = std::nullopt,
                bool dpx_has_cuda = true) {
  return choose_cuda_path({dpx_has_cuda, says, std::move(forced)}, "[rank 0/2] ");
}

std::string refusal(CudaSupport says, std::optional<std::string> forced,
                    bool dpx_has_cuda = true) {
  return test::expect_throws<c10::Error>([&] { choose(says, forced, dpx_has_cuda); });
}

TEST(MpiCudaPath, UnsetFollowsTheMpisAnswer) {
  EXPECT_EQ(choose(CudaSupport::kYes), CudaPath::kDirect);
  EXPECT_EQ(choose(CudaSupport::kNo), CudaPath::kStaged);
}

TEST(MpiCudaPath, AnMpiThatCannotBeAskedIsStaged) {
  EXPECT_EQ(choose(CudaSupport::kNoQuery), CudaPath::kStaged);
}

TEST(MpiCudaPath, ADpxWithoutCudaStagesEvenOverACudaAwareMpi) {
  EXPECT_EQ(choose(CudaSupport::kYes, std::nullopt, false), CudaPath::kStaged);
}

TEST(MpiCudaPath, ZeroStagesWhateverTheMpiSays) {
  for (auto says : {CudaSupport::kYes, CudaSupport::kNo, CudaSupport::kNoQuery}) {
    EXPECT_EQ(choose(says, "0"), CudaPath::kStaged);
    EXPECT_EQ(choose(says, "0", false), CudaPath::kStaged);
  }
}

TEST(MpiCudaPath, OneGoesDirectWhereTheMpiSaysYesOrCannotBeAsked) {
  EXPECT_EQ(choose(CudaSupport::kYes, "1"), CudaPath::kDirect);
  EXPECT_EQ(choose(CudaSupport::kNoQuery, "1"), CudaPath::kDirect);
}

TEST(MpiCudaPath, OneWhereTheMpiSaysNoIsAnError) {
  const std::string msg = refusal(CudaSupport::kNo, "1");
  EXPECT_THAT(msg, HasSubstr("[rank 0/2] DPX_MPI_CUDA_AWARE=1, but the MPI, asked whether it is "
                             "CUDA-aware, answers no"));
  EXPECT_THAT(msg, HasSubstr("Unset it (or set 0) to stage"));
}

TEST(MpiCudaPath, OneInADpxWithoutCudaIsAnError) {
  for (auto says : {CudaSupport::kYes, CudaSupport::kNoQuery}) {
    EXPECT_THAT(refusal(says, "1", false),
                HasSubstr("DPX_MPI_CUDA_AWARE=1, but this dpx was built without CUDA"));
  }
}

TEST(MpiCudaPath, OtherValuesAreRefusedNamingTheVariable) {
  for (const char* v : {"yes", "true", "2", " 1"}) {
    EXPECT_THAT(refusal(CudaSupport::kYes, v),
                HasSubstr(std::string("DPX_MPI_CUDA_AWARE is '") + v + "'; give 0"));
  }
}

}  // namespace
}  // namespace dpx::detail::mpi
