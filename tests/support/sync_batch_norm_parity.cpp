#include "support/sync_batch_norm_parity.h"

#include <gtest/gtest.h>

#include "dpx/algorithms/sync_batch_norm.h"

namespace dpx::test {
namespace {

constexpr int64_t kChannels = 4;
constexpr int kSteps = 2;

int64_t first_row(const SbnCase& c, int r) {
  int64_t start = 0;
  for (int i = 0; i < r; ++i) start += c.batch[i];
  return start;
}

torch::Tensor rows(const torch::Tensor& t, const SbnCase& c, int r) {
  return t.narrow(0, first_row(c, r), c.batch[r]);
}

void init_affine(torch::Tensor weight, torch::Tensor bias) {
  torch::NoGradGuard no_grad;
  weight.copy_(torch::linspace(0.5, 2.0, kChannels, torch::kDouble));
  bias.copy_(torch::linspace(-1.0, 1.0, kChannels, torch::kDouble));
}

}  // namespace

SbnData sbn_data(const SbnCase& c) {
  int64_t total = 0;
  for (auto b : c.batch) total += b;
  torch::manual_seed(3);
  SbnData d;
  d.x = torch::randn({total, kChannels, 3, 2}, torch::kDouble) * 3 + 1;
  d.g = torch::randn({total, kChannels, 3, 2}, torch::kDouble);
  return d;
}

SbnResult sync_batch_norm_on_rank(const std::shared_ptr<ProcessGroup>& pg, const SbnCase& c,
                                  const SbnData& data) {
  const int rank = pg->rank();
  SyncBatchNormOptions o(kChannels);
  o.momentum = c.momentum;
  SyncBatchNorm sbn(o, pg);
  sbn->to(torch::kDouble);
  init_affine(sbn->weight, sbn->bias);
  auto xr = rows(data.x, c, rank).clone().requires_grad_(true);
  SbnResult got;
  for (int s = 0; s < kSteps; ++s) {
    auto out = sbn(xr);
    (out * rows(data.g, c, rank)).sum().backward();
    got.out = out.detach();
  }
  got.grad_input = xr.grad();
  got.grad_weight = sbn->weight.grad();
  got.grad_bias = sbn->bias.grad();
  got.running_mean = sbn->running_mean.clone();
  got.running_var = sbn->running_var.clone();
  return got;
}

SbnResult batch_norm_on_the_whole_batch(const SbnCase& c, const SbnData& data) {
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(kChannels).momentum(
      c.momentum ? c10::optional<double>(*c.momentum) : c10::nullopt));
  bn->to(torch::kDouble);
  init_affine(bn->weight, bn->bias);
  auto xa = data.x.clone().requires_grad_(true);
  SbnResult want;
  for (int s = 0; s < kSteps; ++s) {
    auto out = bn(xa);
    (out * data.g).sum().backward();
    want.out = out.detach();
  }
  want.grad_input = xa.grad();
  want.grad_weight = bn->weight.grad();
  want.grad_bias = bn->bias.grad();
  want.running_mean = bn->running_mean.clone();
  want.running_var = bn->running_var.clone();
  return want;
}

void expect_rank_matches(const SbnResult& got, const SbnResult& want, const SbnCase& c,
                         int rank) {
  EXPECT_TRUE(torch::allclose(got.out, rows(want.out, c, rank), 1e-10, 1e-10)) << rank;
  EXPECT_TRUE(torch::allclose(got.grad_input, rows(want.grad_input, c, rank), 1e-9, 1e-10))
      << rank;
  EXPECT_TRUE(torch::allclose(got.running_mean, want.running_mean, 1e-10, 1e-12)) << rank;
  EXPECT_TRUE(torch::allclose(got.running_var, want.running_var, 1e-10, 1e-12)) << rank;
}

void expect_affine_grads_match(const torch::Tensor& weight_grad_sum,
                               const torch::Tensor& bias_grad_sum, const SbnResult& want) {
  EXPECT_TRUE(torch::allclose(weight_grad_sum, want.grad_weight, 1e-9, 1e-10));
  EXPECT_TRUE(torch::allclose(bias_grad_sum, want.grad_bias, 1e-9, 1e-10));
}

torch::Tensor grad_or_zeros(const torch::Tensor& grad) {
  return grad.defined() ? grad : torch::zeros({kChannels}, torch::kDouble);
}

}  // namespace dpx::test
