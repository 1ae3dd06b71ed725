// The models of PyTorch's distributed_test.py, in LibTorch: same layers, same shapes, same
// forward (the weights are LibTorch's own draws).
#pragma once

#include <torch/torch.h>

namespace dpx::conformance {

// Net: fc1 (2 -> 10, no bias), fc2.fc (10 -> 50, its bias frozen), fc3 (50 -> 4, no bias),
// softmax; plus an int64 parameter that requires no gradient.
struct Fc2Impl : torch::nn::Module {
  Fc2Impl() {
    fc = register_module("fc", torch::nn::Linear(10, 50));
    fc->bias.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Fc2);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(2, 10).bias(false)));
    fc2 = register_module("fc2", Fc2());
    fc3 = register_module("fc3", torch::nn::Linear(torch::nn::LinearOptions(50, 4).bias(false)));
    no_grad_param = register_parameter("no_grad_param", torch::tensor({2, 2}, torch::kLong),
                                       /*requires_grad=*/false);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1(x));
    h = torch::relu(fc2(h));
    return torch::softmax(fc3(h), 1);
  }
  torch::nn::Linear fc1{nullptr}, fc3{nullptr};
  Fc2 fc2{nullptr};
  torch::Tensor no_grad_param;
};
TORCH_MODULE(Net);

// ControlFlowToyModel: lin2 runs only when the input is all ones (20 x 10).
struct ControlFlowToyModelImpl : torch::nn::Module {
  ControlFlowToyModelImpl() {
    lin1 = register_module("lin1", torch::nn::Linear(torch::nn::LinearOptions(10, 10).bias(false)));
    lin2 = register_module("lin2", torch::nn::Linear(torch::nn::LinearOptions(10, 10).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return forward(x, /*rank_allows=*/true); }
  // The different-across-ranks variant: lin2 only where `rank_allows` too.
  torch::Tensor forward(const torch::Tensor& x, bool rank_allows) {
    const bool use_second = rank_allows && torch::equal(x, torch::ones({20, 10}, x.options()));
    return use_second ? lin2(torch::relu(lin1(x))) : torch::relu(lin1(x));
  }
  torch::nn::Linear lin1{nullptr}, lin2{nullptr};
};
TORCH_MODULE(ControlFlowToyModel);

// BatchNormNet: fc1 (2 -> 40), BatchNorm1d(4) over 4 x 10, fc2 (40 -> 4), softmax.
struct BatchNormNetImpl : torch::nn::Module {
  BatchNormNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(2, 40).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(40, 4).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = bn(fc1(x).reshape({-1, 4, 10})).reshape({-1, 40});
    return torch::softmax(fc2(h), 1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(BatchNormNet);

// Task: a 2 x 2 parameter of ones added to the input.
struct TaskImpl : torch::nn::Module {
  TaskImpl() { p = register_parameter("p", torch::ones({2, 2})); }
  torch::Tensor forward(const torch::Tensor& x) { return p + x; }
  torch::Tensor p;
};
TORCH_MODULE(Task);

// UnusedParamModule: rank `unused_rank` skips t0.
struct UnusedParamModuleImpl : torch::nn::Module {
  explicit UnusedParamModuleImpl(int unused_rank) : unused_rank(unused_rank) {
    t0 = register_module("t0", Task());
    t1 = register_module("t1", Task());
  }
  torch::Tensor forward(const torch::Tensor& x, int rank) {
    return rank != unused_rank ? t1(t0(x)) : t1(x);
  }
  int unused_rank;
  Task t0{nullptr}, t1{nullptr};
};
TORCH_MODULE(UnusedParamModule);

}  // namespace dpx::conformance
