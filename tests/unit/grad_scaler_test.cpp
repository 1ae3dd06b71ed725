// dpx::GradScaler's algorithm with exact expected values (PyTorch's GradScaler semantics: the
// same on every LibTorch, including 1.13 whose Python has no CPU GradScaler to compare with),
// its errors, and AutocastGuard. Against Python's own GradScaler: multiproc/amp_test.cpp.
#include <torch/torch.h>

#include <limits>

#include "dpx/amp/autocast.h"
#include "dpx/amp/grad_scaler.h"
#include "support/expect_throws.h"

namespace dpx {
namespace {

using test::expect_throws;

// One parameter p = [1, 2]; the loss p . g makes its gradient `g` (times the scale).
struct Toy {
  torch::Tensor p = torch::tensor({1.0f, 2.0f}).requires_grad_(true);
  torch::optim::SGD opt{std::vector<torch::Tensor>{p}, torch::optim::SGDOptions(0.5)};

  // One training step with gradient `g`; returns whether the optimizer stepped.
  bool step(GradScaler& scaler, const torch::Tensor& g) {
    opt.zero_grad();
    scaler.scale((p * g).sum()).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  }
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(GradScaler, ScaleGrowsAfterIntervalAndBacksOffOnInfOrNan) {
  GradScaler scaler({.init_scale = 1024, .growth_interval = 3});
  Toy toy;
  const auto clean = torch::tensor({0.25f, -0.5f});
  EXPECT_EQ(scaler.get_scale(), 1024);  // before the first scale()
  // step:                  1     2     3     4(inf) 5     6     7(nan) 8     9     10
  const std::vector<double> scales{1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024};
  const std::vector<std::int64_t> trackers{1, 2, 0, 0, 1, 2, 0, 1, 2, 0};
  for (int s = 1; s <= 10; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    auto g = clean.clone();
    if (s == 4) g[1] = kInf;
    if (s == 7) g[0] = kNan;
    const auto before = toy.p.detach().clone();
    const bool stepped = toy.step(scaler, g);
    EXPECT_EQ(stepped, s != 4 && s != 7);
    if (stepped) {  // the gradient was unscaled exactly: p -= 0.5 * g
      EXPECT_TRUE(toy.p.detach().equal(before - 0.5f * clean));
    } else {
      EXPECT_TRUE(toy.p.detach().equal(before));
    }
    EXPECT_EQ(scaler.get_scale(), scales[s - 1]);
    EXPECT_EQ(scaler.state_dict()._growth_tracker, trackers[s - 1]);
  }
}

TEST(GradScaler, AGrowthThatWouldOverflowKeepsTheScale) {
  const double big = std::numeric_limits<float>::max() / 1.5;  // x2 is inf in float
  GradScaler scaler({.init_scale = big, .growth_interval = 1});
  Toy toy;
  EXPECT_TRUE(toy.step(scaler, torch::tensor({1e-30f, 0.0f})));
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(static_cast<float>(big)));
  EXPECT_EQ(scaler.state_dict()._growth_tracker, 0);
}

TEST(GradScaler, MisuseIsNamedAsPyTorchNamesIt) {
  GradScaler scaler;
  Toy toy;
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.update(); }).find(
                "Attempted update but _scale is None"), std::string::npos);
  scaler.scale((toy.p * 2).sum()).backward();
  scaler.unscale_(toy.opt);
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.unscale_(toy.opt); }).find(
                "unscale_() has already been called on this optimizer since the last update()"),
            std::string::npos);
  scaler.step(toy.opt);
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.step(toy.opt); }).find(
                "step() has already been called since the last update()"), std::string::npos);
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.unscale_(toy.opt); }).find(
                "unscale_() is being called after step()"), std::string::npos);
  scaler.update();
  toy.p.mutable_grad() = torch::ones({2}, torch::kHalf);
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.unscale_(toy.opt); }).find(
                "Attempting to unscale FP16 gradients"), std::string::npos);
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), c10::Error);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.0}), c10::Error);
}

TEST(GradScaler, DisabledItPassesThroughAndAlwaysSteps) {
  GradScaler scaler({.enabled = false});
  Toy toy;
  auto loss = (toy.p * 3).sum();
  EXPECT_TRUE(scaler.scale(loss).equal(loss));
  EXPECT_TRUE(toy.step(scaler, torch::tensor({kInf, 0.0f})));  // no inf check at all
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_THROW(scaler.state_dict(), c10::Error);
}

TEST(GradScaler, StateDictHasPythonsKeysAndRestoresTheScale) {
  GradScaler a({.init_scale = 256, .growth_interval = 2});
  Toy toy;
  toy.step(a, torch::tensor({1.0f, 1.0f}));
  const GradScalerState s = a.state_dict();
  EXPECT_EQ(s.scale, 256);
  EXPECT_EQ(s._growth_tracker, 1);
  EXPECT_EQ(s.growth_interval, 2);
  GradScaler b;
  b.load_state_dict(s);
  EXPECT_EQ(b.get_scale(), 256);  // before its first scale(), as PyTorch's _init_scale
  Toy other;
  other.step(b, torch::tensor({1.0f, 1.0f}));
  EXPECT_EQ(b.get_scale(), 512);  // the loaded tracker counted: 2 clean steps in a row
  b.update(8.0);
  EXPECT_EQ(b.get_scale(), 8.0);
}

TEST(Autocast, GuardRunsMatmulsInBfloat16AndRestoresTheState) {
  auto a = torch::randn({4, 4}), b = torch::randn({4, 4});
  {
    AutocastGuard guard({.device_type = at::kCPU, .dtype = at::kBFloat16});
    EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kBFloat16);
    EXPECT_EQ((a + b).scalar_type(), at::kFloat);  // not on autocast's lower-precision list
    {
      AutocastGuard off({.enabled = false});
      EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kFloat);
    }
    EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kFloat);
  EXPECT_THROW(AutocastGuard({.dtype = at::kDouble}), c10::Error);
}

}  // namespace
}  // namespace dpx
