// fully_shard's features besides plain training (threads as ranks; the checks are shared with
// mpirun's processes, support/fsdp_feature_checks.h): gradient accumulation without sync,
// clip_grad_norm_ over sharded gradients, autocast with GradScaler, evaluation under no_grad,
// the state between iterations, wrapping mistakes and the optimizer state dict.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/fsdp_feature_checks.h"
#include "support/harness.h"

namespace dpx {
namespace {

constexpr int kWorld = 3;

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Three micro-batches a step, the first two under no_sync() (or set_requires_gradient_sync),
// against one process that accumulates the same micro-batches' gradients over all ranks' rows
// (support/fsdp_feature_checks.h).
TEST(FsdpFeatures, GradientAccumulationWithoutSyncMatchesOneProcess) {
  const auto want = test::accumulation_reference(kWorld);
  for (bool guard : {true, false}) {
    SCOPED_TRACE(guard ? "no_sync()" : "set_requires_gradient_sync(false)");
    auto store = Store::hash();
    expect_no_errors(test::run_threads(kWorld, [&](int rank) {
      test::expect_accumulation_without_sync(new_process_group("shm", store, rank, kWorld), guard,
                                             want);
    }));
  }
}

// clip_grad_norm_ clips by the norm over every rank's shards: the same total norm and the same
// training as torch::nn::utils::clip_grad_norm_ in one process, for the 2-norm and the max-norm.
TEST(FsdpFeatures, ClipGradNormUsesTheGlobalNorm) {
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("norm_type " + std::to_string(norm_type));
    const auto want = test::clip_reference(kWorld, norm_type);
    auto store = Store::hash();
    expect_no_errors(test::run_threads(kWorld, [&](int rank) {
      test::expect_clip_grad_norm(new_process_group("gloo", store, rank, kWorld), norm_type, want);
    }));
  }
}

// CPU bfloat16 autocast and GradScaler (its found-inf flag reduced over the group), with rank 0's
// loss made inf at step 2: every rank skips that step and backs the scale off, as under DDP.
TEST(FsdpFeatures, AutocastAndGradScalerAsUnderDdp) {
  if (const auto why = test::autocast_unsupported()) GTEST_SKIP() << "SKIPPED: " << *why;
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    test::expect_autocast_and_grad_scaler_as_under_ddp(new_process_group("shm", store, rank, 2));
  }));
}

// MixedPrecisionPolicy{param_dtype = bfloat16}: the units compute in bfloat16 while the shards,
// their gradients and the optimizer stay float32. The result is near one float32 process on the
// whole batch, but not as near as float32 throughout would be.
TEST(FsdpFeatures, ParamDtypeBFloat16ComputesInBFloat16AndStepsInFloat32) {
  const auto want = test::param_dtype_reference(kWorld);
  auto store = Store::hash();
  expect_no_errors(test::run_threads(kWorld, [&](int rank) {
    test::expect_param_dtype_bfloat16(new_process_group("shm", store, rank, kWorld), want);
  }));
}

// Between iterations every parameter holds its shard (what the optimizer steps on); a forward
// under no_grad (evaluation) gathers what it needs and leaves every unit resharded.
TEST(FsdpFeatures, ShardsBetweenIterationsAndAfterEvaluation) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(kWorld, [&](int rank) {
    test::expect_sharded_between_iterations(new_process_group("shm", store, rank, kWorld));
  }));
}

// Wrapping errors say what to do.
TEST(FsdpFeatures, WrappingMistakesAreExplained) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    test::expect_wrapping_mistakes_explained(new_process_group("shm", store, rank, 2));
  }));
}

// A Sequential's own forward, and a custom forward calling a unit's module directly.
TEST(FsdpFeatures, AUnitCalledAroundItsHandleFailsTheFirstForwardNamingIt) {
  auto store = Store::hash();
  expect_no_errors(test::run_threads(2, [&](int rank) {
    test::expect_unit_called_around_its_handle_named(new_process_group("shm", store, rank, 2));
  }));
}

// The full optimizer state dict's `step` is a tensor of the default dtype, and the param groups
// have the keys PyTorch 2.x writes.
TEST(FsdpFeatures, TheFullOptimizerStateDictHasPythonsTypesAndKeys) {
  auto store = Store::hash();
  const auto before = torch::get_default_dtype();
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  expect_no_errors(test::run_threads(2, [&](int rank) {
    test::expect_full_optimizer_state_dict_as_pythons(new_process_group("shm", store, rank, 2));
  }));
  torch::set_default_dtype(before);
}

}  // namespace
}  // namespace dpx
