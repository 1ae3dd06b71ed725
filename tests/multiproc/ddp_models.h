// Small models and a reference trainer shared by the DDP multi-process tests.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace dpx::test {

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3)));
    fc = register_module("fc", torch::nn::Linear(8 * 4 * 4, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn(conv1(x)));
    x = torch::relu(conv2(x));
    return fc(x.flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Cnn);

// net1 always runs; net2 only when asked; never_used never.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl() {
    net1 = register_module("net1", torch::nn::Linear(16, 4));
    net2 = register_module("net2", torch::nn::Linear(16, 4));
    never_used = register_module("never_used", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x, bool use_net2) {
    auto y = net1(x);
    return use_net2 ? y + net2(x) : y;
  }
  torch::nn::Linear net1{nullptr}, net2{nullptr}, never_used{nullptr};
};
TORCH_MODULE(Branchy);

struct Batch {
  torch::Tensor x, y;
};

// `steps` batches of world * per_rank samples, the same on every rank.
inline std::vector<Batch> make_batches(int steps, int world, int per_rank,
                                       std::vector<std::int64_t> sample_shape, int classes = 4) {
  torch::manual_seed(4242);
  std::vector<Batch> out;
  std::vector<std::int64_t> shape{world * per_rank};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  for (int s = 0; s < steps; ++s) {
    out.push_back({torch::randn(shape), torch::randint(classes, {world * per_rank})});
  }
  return out;
}

inline Batch slice(const Batch& b, int rank, int world) {
  const auto n = b.x.size(0) / world;
  return {b.x.narrow(0, rank * n, n), b.y.narrow(0, rank * n, n)};
}

inline void expect_params_close(const std::vector<torch::Tensor>& got,
                                const std::vector<torch::Tensor>& want, double rtol = 1.3e-6,
                                double atol = 5e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], rtol, atol))
        << "parameter " << i << " max abs diff "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

}  // namespace dpx::test
