// The model averager's schedule and arithmetic, and PostLocalSGDOptimizer's options and state.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/algorithms/local_sgd.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/local_sgd_checks.h"

namespace dpx {
namespace {

// Period 3 after a warm-up of 1: calls 1 and 4 average; parameters without a gradient never do
// (support/local_sgd_checks.h).
TEST(PeriodicModelAverager, AveragesOnTheScheduleParametersWithGradients) {
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    test::expect_periodic_averaging(new_process_group("shm", Store::prefix("avg", store), rank, 2));
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(PeriodicModelAverager, RejectsABadPeriodOrWarmUp) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { PeriodicModelAverager(0, pg); }),
              ::testing::HasSubstr("period must be at least 1, got 0"));
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { PeriodicModelAverager(2, pg, -1); }),
              ::testing::HasSubstr("warmup_steps must not be negative, got -1"));
}

// The wrapper's options reach the wrapped optimizer at each step; a save carries the averager's
// step and the optimizer's state (its momentum), and a load restores both.
TEST(PostLocalSGDOptimizer, PassesOptionsOnAndSavesTheAveragersStep) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  auto p = torch::ones({2}).requires_grad_(true);
  auto make = [&] {
    return PostLocalSGDOptimizer(
        std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{p},
                                            torch::optim::SGDOptions(1.0).momentum(0.5)),
        std::make_shared<PeriodicModelAverager>(2, pg));
  };
  auto opt = make();
  opt.param_groups()[0].options().set_lr(0.5);
  p.mutable_grad() = torch::ones({2});
  opt.step();  // 1 - 0.5 * 1
  EXPECT_TRUE(torch::equal(p, torch::full({2}, 0.5)));
  EXPECT_EQ(opt.optimizer().param_groups()[0].options().get_lr(), 0.5);
  std::ostringstream out;
  torch::save(opt, out);
  auto other = make();
  std::istringstream in(out.str());
  torch::load(other, in);
  EXPECT_EQ(other.averager().step(), 1);
  other.param_groups()[0].options().set_lr(0.5);  // LibTorch's load() restores state, not options
  other.step();  // momentum buffer 1 -> 0.5 * 1 + 1 = 1.5; 0.5 - 0.5 * 1.5
  EXPECT_TRUE(torch::equal(p, torch::full({2}, -0.25)));
}

}  // namespace
}  // namespace dpx
