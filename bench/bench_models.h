// The models of `dpx-bench ddp` (the Python baseline builds the same ones) and of
// `dpx-bench handwritten`.
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

// pytorch/examples' cpp/distributed/dist-mnist.cpp network (examples/dist_mnist): conv 10,
// conv 20 with 2-d dropout, fc 50, fc 10; 21,840 parameters in 8 tensors.
struct DistMnistNetImpl : torch::nn::Module {
  DistMnistNetImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 10, 5)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5)));
    conv2_drop = register_module("conv2_drop", torch::nn::Dropout2d());
    fc1 = register_module("fc1", torch::nn::Linear(320, 50));
    fc2 = register_module("fc2", torch::nn::Linear(50, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop(conv2(x)), 2));
    x = torch::relu(fc1(x.view({-1, 320})));
    x = torch::dropout(x, 0.5, is_training());
    return torch::log_softmax(fc2(x), 1);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout2d conv2_drop{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(DistMnistNet);

}  // namespace dpx::bench
