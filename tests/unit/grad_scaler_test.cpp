// dpx::GradScaler's algorithm with exact expected values (PyTorch's GradScaler semantics: the
// same on every LibTorch, including 1.13 whose Python has no CPU GradScaler to compare with),
// its errors, and AutocastGuard. Against Python's own GradScaler: multiproc/amp_test.cpp.
#include <torch/torch.h>

#include <ATen/record_function.h>

#include <atomic>
#include <limits>
#include <mutex>

#include "dpx/amp/autocast.h"
#include "dpx/amp/grad_scaler.h"
#include "dpx/runtime/cuda.h"
#include "runtime/compat/torch_version.h"
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

// As PyTorch's kernel: a value is checked before it is multiplied. With a scale below 1 a
// finite gradient may overflow to inf once unscaled; that is no found inf, and the step runs.
TEST(GradScaler, ChecksEachGradientBeforeItUnscalesIt) {
  GradScaler scaler({.init_scale = 0.25});
  Toy toy;
  scaler.scale((toy.p * 0).sum()).backward();
  toy.p.mutable_grad() = torch::tensor({1e38f, 1.0f});
  EXPECT_TRUE(scaler.step(toy.opt));
  EXPECT_TRUE(toy.p.grad().equal(torch::tensor({kInf, 4.0f})));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 0.25);
}

// An optimizer none of whose parameters has a gradient has nothing checked: PyTorch refuses
// to step it.
TEST(GradScaler, AnOptimizerWithoutGradientsIsRefusedAsPyTorchRefusesIt) {
  GradScaler scaler;
  Toy toy;
  auto q = torch::ones({2}, torch::requires_grad());
  scaler.scale((q * 2).sum()).backward();
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.step(toy.opt); }).find(
                "No inf checks were recorded for this optimizer."), std::string::npos);
  EXPECT_NE(expect_throws<c10::Error>([&] { scaler.update(); }).find(
                "No inf checks were recorded prior to update."), std::string::npos);
}

std::atomic<int> g_fused{0}, g_per_tensor{0};

std::unique_ptr<at::ObserverContext> count_unscale_ops(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  if (name == "aten::_amp_foreach_non_finite_check_and_unscale_") ++g_fused;
  if (name == "aten::isfinite" || name == "aten::mul_") ++g_per_tensor;
  return nullptr;
}

// unscale_ is one fused check-and-unscale per device and dtype (Note [Unscaling per device]),
// not kernels per parameter. On the CPU, LibTorch has that kernel from 2.3 on.
TEST(GradScaler, UnscalesWithOneFusedKernelPerDtype) {
  if (compat::kTorchVersion < 203) {
    GTEST_SKIP() << "SKIPPED: LibTorch " DPX_TORCH_VERSION " has no CPU kernel for "
                    "_amp_foreach_non_finite_check_and_unscale_ (it came with 2.3)";
  }
  torch::nn::Linear a(3, 4), b(4, 2), c(2, 2);
  c->to(torch::kDouble);
  std::vector<torch::Tensor> params = a->parameters();
  for (const auto* m : {&b, &c}) {
    for (const auto& p : (*m)->parameters()) params.push_back(p);
  }
  torch::optim::SGD opt(params, 0.1);
  GradScaler scaler({.init_scale = 4});
  auto x = torch::ones({1, 3});
  auto y = c(b(a(x)).to(torch::kDouble)).sum();
  scaler.scale(y).backward();
  const auto scaled = c->weight.grad().clone();
  g_fused = 0;
  g_per_tensor = 0;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&count_unscale_ops));
  scaler.unscale_(opt);
  at::removeCallback(handle);
  EXPECT_EQ(g_fused, 2);  // float and double
  EXPECT_EQ(g_per_tensor, 0);
  EXPECT_TRUE(c->weight.grad().equal(scaled / 4));
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

// On a GPU (skipped without one).
struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  // fc1 and fc2 may sit on different devices: the activations follow.
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(fc1(x.to(fc1->weight.device())));
    return fc2(h.to(fc2->weight.device()));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TwoLayers);

TwoLayers two_layers(at::Device first, at::Device second) {
  torch::manual_seed(9);
  TwoLayers net;
  net->fc1->to(first);
  net->fc2->to(second);
  return net;
}

void expect_params_close(TwoLayers& got, TwoLayers& want, double rtol, double atol) {
  auto g = got->parameters(), w = want->parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const auto a = g[i].detach().cpu(), b = w[i].detach().cpu();
    EXPECT_TRUE(a.allclose(b, rtol, atol))
        << "parameter " << i << ": max difference " << (a - b).abs().max().item<double>();
  }
}

constexpr int kAmpSteps = 6;
constexpr int kInfStep = 2;

// Float16 autocast on the GPU with the scaler against float32 on the CPU without one: the same
// parameters (within float16's rounding), an inf injected at one step skipped by both, and the
// scale halved for it.
TEST(GradScalerCuda, Float16AutocastMatchesTheCpuFloatReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu("cuda:0");
  auto net = two_layers(gpu, gpu), ref = two_layers(at::kCPU, at::kCPU);
  torch::optim::SGD opt(net->parameters(), 0.1), ref_opt(ref->parameters(), 0.1);
  GradScaler scaler({.init_scale = 1024});
  for (int s = 0; s < kAmpSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    torch::manual_seed(100 + s);
    const auto x = torch::randn({8, 16}), y = torch::randn({8, 4});
    opt.zero_grad();
    torch::Tensor loss;
    {
      AutocastGuard autocast({.device_type = at::kCUDA, .dtype = at::kHalf});
      auto out = net(x.to(gpu));
      EXPECT_EQ(out.scalar_type(), at::kHalf);
      loss = (out.to(at::kFloat) - y.to(gpu)).pow(2).mean();
    }
    scaler.scale(loss).backward();
    if (s == kInfStep) net->fc2->bias.mutable_grad()[1] = kInf;
    EXPECT_EQ(scaler.step(opt), s != kInfStep);
    scaler.update();
    ref_opt.zero_grad();
    (ref(x) - y).pow(2).mean().backward();
    if (s != kInfStep) ref_opt.step();
  }
  EXPECT_EQ(scaler.get_scale(), 512);
  expect_params_close(net, ref, 1e-2, 2e-3);
}

// The devices of each fused check-and-unscale call: its gradients' and its found-inf flag's.
struct FusedCall {
  at::Device grads, flag;
};
std::mutex g_fused_calls_mutex;
std::vector<FusedCall> g_fused_calls;

std::unique_ptr<at::ObserverContext> record_fused_calls(const at::RecordFunction& fn) {
  if (std::string(fn.name()) == "aten::_amp_foreach_non_finite_check_and_unscale_") {
    const auto inputs = fn.inputs();
    const std::lock_guard<std::mutex> lock(g_fused_calls_mutex);
    g_fused_calls.push_back(
        {inputs[0].toTensorList().get(0).device(), inputs[1].toTensor().device()});
  }
  return nullptr;
}

// A model on the CPU and a GPU: one found-inf flag per device, each device's gradients checked
// and unscaled by one fused call on that device (Note [Unscaling per device]); an inf on either
// device skips the step; the others unscale exactly as on the CPU alone.
TEST(GradScalerCuda, AModelOnTheCpuAndAGpuKeepsAFlagPerDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto net = two_layers(at::kCPU, at::Device("cuda:0")), ref = two_layers(at::kCPU, at::kCPU);
  torch::optim::SGD opt(net->parameters(), 0.1), ref_opt(ref->parameters(), 0.1);
  GradScaler scaler({.init_scale = 256});
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    torch::manual_seed(200 + s);
    const auto x = torch::randn({8, 16}), y = torch::randn({8, 4});
    opt.zero_grad();
    auto out = net(x);
    scaler.scale((out - y.to(out.device())).pow(2).mean()).backward();
    if (s == 1) net->fc1->weight.mutable_grad()[0][0] = kNan;  // the CPU's
    if (s == 2) net->fc2->weight.mutable_grad()[0][0] = kInf;  // the GPU's
    g_fused_calls.clear();
    const auto handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&record_fused_calls).needsInputs(true));
    EXPECT_EQ(scaler.step(opt), s == 0 || s == 3);
    at::removeCallback(handle);
    ASSERT_EQ(g_fused_calls.size(), 2u) << "one fused call per device";
    for (const auto& call : g_fused_calls) EXPECT_EQ(call.flag, call.grads);
    EXPECT_NE(g_fused_calls[0].grads, g_fused_calls[1].grads);
    scaler.update();
    ref_opt.zero_grad();
    (ref(x) - y).pow(2).mean().backward();
    if (s == 0 || s == 3) ref_opt.step();
  }
  EXPECT_EQ(scaler.get_scale(), 64);
  expect_params_close(net, ref, 1e-5, 1e-6);
}

// update() computes the next scale on the GPU, with no host wait (torch.amp.GradScaler's
// _amp_update_scale_): under CUDA's sync-debug mode set to error it throws nowhere, through a
// backoff and a growth; the scales it reached are those of the CPU.
TEST(GradScalerCuda, UpdateMakesNoHostSync) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto net = two_layers(at::Device("cuda:0"), at::Device("cuda:0"));
  torch::optim::SGD opt(net->parameters(), 0.1);
  GradScaler scaler({.init_scale = 256, .growth_interval = 2});
  const double want[] = {128, 128, 256, 256};  // an inf, then growth every second clean step
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const auto x = torch::randn({8, 16}).cuda(), y = torch::randn({8, 4}).cuda();
    opt.zero_grad();
    scaler.scale((net(x) - y).pow(2).mean()).backward();
    if (s == 0) net->fc2->weight.mutable_grad()[0][0] = kInf;
    scaler.step(opt);  // reads the flags on the host, as PyTorch's step does
    {
      const cuda::HostSyncsForbidden no_syncs;
      scaler.update();
    }
    EXPECT_EQ(scaler.get_scale(), want[s]);
  }
}

// Two GPUs: each device's gradients are checked on that device (one kernel could not take a
// flag on another GPU).
TEST(GradScalerCuda, AModelOnTwoGpusKeepsAFlagPerDevice) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  auto net = two_layers(at::Device("cuda:0"), at::Device("cuda:1"));
  auto ref = two_layers(at::kCPU, at::kCPU);
  torch::optim::SGD opt(net->parameters(), 0.1), ref_opt(ref->parameters(), 0.1);
  GradScaler scaler({.init_scale = 256});
  for (int s = 0; s < 3; ++s) {
    torch::manual_seed(300 + s);
    const auto x = torch::randn({8, 16}), y = torch::randn({8, 4});
    opt.zero_grad();
    auto out = net(x);
    scaler.scale((out - y.to(out.device())).pow(2).mean()).backward();
    if (s == 1) net->fc1->bias.mutable_grad()[0] = kInf;  // cuda:0's
    EXPECT_EQ(scaler.step(opt), s != 1);
    scaler.update();
    ref_opt.zero_grad();
    (ref(x) - y).pow(2).mean().backward();
    if (s != 1) ref_opt.step();
  }
  expect_params_close(net, ref, 1e-5, 1e-6);
}

}  // namespace
}  // namespace dpx
