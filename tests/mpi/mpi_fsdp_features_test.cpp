// fully_shard's features besides plain training on the mpi backend, one process per rank under
// mpirun, at whatever world size mpirun started: the checks tests/multirank/fsdp_features_test.cpp
// makes with threads as ranks on shm (support/fsdp_feature_checks.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mpi/mpi_group.h"
#include "support/fsdp_feature_checks.h"

namespace dpx::mpi_test {
namespace {

// GradScaler's found-inf flag is reduced over the mpi group: rank 0's inf step is skipped by
// every rank and backs the scale off, as under DDP on the same group.
TEST(MpiFsdpFeatures, AutocastAndGradScalerAsUnderDdp) {
  if (const auto why = test::autocast_unsupported()) GTEST_SKIP() << "SKIPPED: " << *why;
  test::expect_autocast_and_grad_scaler_as_under_ddp(mpi_group());
}

// bfloat16 all-gathers and reduce-scatters (dpx's own MPI_Op for the reduction) under
// MixedPrecisionPolicy{param_dtype = bfloat16}.
TEST(MpiFsdpFeatures, ParamDtypeBFloat16ComputesInBFloat16AndStepsInFloat32) {
  auto pg = mpi_group();
  test::expect_param_dtype_bfloat16(pg, test::param_dtype_reference(pg->size()));
}

TEST(MpiFsdpFeatures, ShardsBetweenIterationsAndAfterEvaluation) {
  test::expect_sharded_between_iterations(mpi_group());
}

TEST(MpiFsdpFeatures, WrappingMistakesAreExplained) {
  test::expect_wrapping_mistakes_explained(mpi_group());
}

TEST(MpiFsdpFeatures, AUnitCalledAroundItsHandleFailsTheFirstForwardNamingIt) {
  test::expect_unit_called_around_its_handle_named(mpi_group());
}

TEST(MpiFsdpFeatures, TheFullOptimizerStateDictHasPythonsTypesAndKeys) {
  const auto before = torch::get_default_dtype();
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  test::expect_full_optimizer_state_dict_as_pythons(mpi_group());
  torch::set_default_dtype(before);
}

}  // namespace
}  // namespace dpx::mpi_test
