// The two models of `dpx-bench ddp` (the Python baseline builds the same ones).
#pragma once

#include <torch/torch.h>

namespace dpx::bench {

// PyTorch's MNIST example network, as used for Fashion-MNIST: conv 32, conv 64, fc 128, fc 10.
struct FashionCnnImpl : torch::nn::Module {
  FashionCnnImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(9216, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(FashionCnn);

// Communication-heavy: 784 -> w -> w -> 1024 -> 10; w = 4096 gives about 25 M parameters.
struct WideMlpImpl : torch::nn::Module {
  explicit WideMlpImpl(int64_t w) {
    fc1 = register_module("fc1", torch::nn::Linear(784, w));
    fc2 = register_module("fc2", torch::nn::Linear(w, w));
    fc3 = register_module("fc3", torch::nn::Linear(w, 1024));
    fc4 = register_module("fc4", torch::nn::Linear(1024, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x.flatten(1)));
    x = torch::relu(fc2(x));
    return fc4(torch::relu(fc3(x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, fc4{nullptr};
};
TORCH_MODULE(WideMlp);

}  // namespace dpx::bench
