// distributed_test.py: DDP's native mixed precision (in dpx: autocast) and SyncBatchNorm's
// running statistics when ranks bring batches of different sizes.
#include "conformance/conformance.h"

namespace dpx::conformance {
namespace {

// MyModel of _test_ddp_native_mixed_precision: Linear(1, 5) plus a frozen 10 x 5 parameter,
// and a buffer.
struct MixedImpl : torch::nn::Module {
  MixedImpl() {
    m = register_module("m", torch::nn::Linear(1, 5));
    buffer = register_buffer("buffer", torch::randn({1, 2}));
    p = register_parameter("p", torch::randn({10, 5}), /*requires_grad=*/false);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = m(x);
    // Under autocast the product runs in the lower precision; the parameters stay float32.
    EXPECT_NE(y.scalar_type(), at::kFloat);
    EXPECT_EQ(m->weight.scalar_type(), at::kFloat);
    return y + p;
  }
  torch::nn::Linear m{nullptr};
  torch::Tensor buffer, p;
};
TORCH_MODULE(Mixed);

// PyTorch's mixed_precision=_MixedPrecision(float16 params, reduce and buffers) casts the
// module itself, a private API; dpx offers autocast for this (docs/amp.md). What the case
// checks holds the same: parameters and gradients stay float32 and every rank ends each of 6
// iterations with the same gradients, with and without bucket views and zero_grad(set_to_none).
void mixed_precision(Rank& r, bool grad_as_bucket_view, bool set_grad_to_none) {
  torch::manual_seed(r.rank);
  const auto inp = torch::randn({10, 1}).to(r.device);
  Mixed net;
  net->to(r.device);
  DistributedDataParallelOptions o;
  o.gradient_as_bucket_view = grad_as_bucket_view;
  DistributedDataParallel ddp(net, r.pg, o);
  AutocastOptions ac;
  ac.device_type = r.device.type();
  ac.dtype = r.device.is_cuda() ? at::kHalf : at::kBFloat16;
  for (int i = 0; i < 6; ++i) {
    torch::Tensor loss;
    {
      AutocastGuard autocast(ac);
      loss = ddp(inp).sum();
    }
    loss.backward();
    for (const auto& item : ddp->named_parameters()) {
      const auto& param = item.value();
      EXPECT_EQ(param.scalar_type(), at::kFloat) << item.key();
      if (!param.grad().defined()) {
        EXPECT_EQ(item.key(), "module.p") << "only p, which needs no gradient, has none";
        continue;
      }
      EXPECT_EQ(param.grad().scalar_type(), at::kFloat) << item.key();
      expect_same_on_every_rank(r, param.grad(), item.key());
    }
    ddp->zero_grad(set_grad_to_none);
  }
}

TEST_P(DistributedTest, test_ddp_native_mixed_precision_no_grad_as_bucket_view_no_set_grad_none) {
  run(2, [](Rank& r) { mixed_precision(r, false, false); });
}

TEST_P(DistributedTest, test_ddp_native_mixed_precision_grad_as_bucket_view_no_set_grad_none) {
  run(2, [](Rank& r) { mixed_precision(r, true, false); });
}

TEST_P(DistributedTest, test_ddp_native_mixed_precision_grad_as_bucket_view_set_grad_to_none) {
  run(2, [](Rank& r) { mixed_precision(r, true, true); });
}

TEST_P(DistributedTest, test_ddp_native_mixed_precision_no_grad_as_bucket_view_set_grad_to_none) {
  run(2, [](Rank& r) { mixed_precision(r, false, true); });
}

// A SyncBatchNorm(2, momentum 0.99) alone under DDP; rank i brings 2 x 2 x 10^(i+1) values
// (channel 0: 0.1^(i-1), channel 1: 0.3^(i-1)). After 100 steps the running statistics are the
// mean and the unbiased variance of every rank's values together.
TEST_P(DistributedTest, test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_Running_Value) {
  run(2, [](Rank& r) {
    SyncBatchNormOptions so(2);
    so.momentum = 0.99;
    SyncBatchNorm sbn(so, r.pg);
    sbn->to(r.device);
    DistributedDataParallel ddp(sbn, r.pg);
    auto input_of = [](int i) {
      const std::int64_t n = static_cast<std::int64_t>(std::pow(10, i + 1));
      return torch::cat({torch::ones({2, 1, n}) * std::pow(0.1, i - 1),
                         torch::ones({2, 1, n}) * std::pow(0.3, i - 1)}, 1);
    };
    std::vector<torch::Tensor> all;
    for (int i = 0; i < r.world; ++i) all.push_back(input_of(i).permute({1, 0, 2}).reshape({2, -1}));
    const auto all_input = torch::cat(all, 1);
    const auto mine = input_of(r.rank).to(r.device);
    for (int step = 0; step < 100; ++step) ddp(mine).mean().backward();
    EXPECT_TRUE(torch::allclose(sbn->running_mean.cpu(), all_input.mean(1), 1.3e-6, 1e-5))
        << sbn->running_mean << " vs " << all_input.mean(1);
    EXPECT_TRUE(torch::allclose(sbn->running_var.cpu(), all_input.var(1), 1.3e-6, 1e-5))
        << sbn->running_var << " vs " << all_input.var(1);
  });
}

}  // namespace
}  // namespace dpx::conformance
