// DataParallel against the module run without it: outputs, gradients, training steps, errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>

#include "dpx/data_parallel/data_parallel.h"
#include "support/side_stream.h"

namespace {

using torch::nn::Module;

struct MlpImpl : torch::nn::Cloneable<MlpImpl> {
  MlpImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(10, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

struct CnnImpl : torch::nn::Cloneable<CnnImpl> {
  CnnImpl() { reset(); }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc(torch::relu(bn(conv(x))).flatten(1));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Cnn);

template <typename Holder>
Holder copy_of(const Holder& net) {
  return Holder(std::dynamic_pointer_cast<typename Holder::ContainedType>(net->clone()));
}

dpx::DataParallelOptions cpus(int n) {
  dpx::DataParallelOptions options;
  options.devices.assign(n, torch::kCPU);
  return options;
}

void expect_close(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6))
      << what << ": max difference " << (a - b).abs().max().item<double>();
}

void expect_same_grads(Module& a, Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_TRUE(pa[i].value().grad().defined()) << pa[i].key();
    expect_close(pa[i].value().grad(), pb[i].value().grad(), "grad of " + pa[i].key());
  }
}

void expect_same_state(Module& a, Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    expect_close(pa[i].value(), pb[i].value(), pa[i].key());
  }
  auto ba = a.named_buffers();
  auto bb = b.named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i) {
    expect_close(ba[i].value().to(torch::kDouble), bb[i].value().to(torch::kDouble), ba[i].key());
  }
}

TEST(DataParallel, MlpMatchesWholeBatch) {
  torch::manual_seed(1);
  for (int replicas : {2, 3}) {
    Mlp net;
    Mlp ref = copy_of(net);
    dpx::DataParallel dp(net, cpus(replicas));
    auto x = torch::randn({10, 10});  // 3 replicas: chunks of 4, 4, 2
    auto y = torch::randint(4, {10});
    auto out = dp->forward(x);
    auto expected = ref->forward(x);
    expect_close(out, expected, "output");
    torch::nn::functional::cross_entropy(out, y).backward();
    torch::nn::functional::cross_entropy(expected, y).backward();
    expect_same_grads(*net, *ref);
  }
}

TEST(DataParallel, MlpTrainingStepsMatchWholeBatch) {
  torch::manual_seed(2);
  Mlp net;
  Mlp ref = copy_of(net);
  dpx::DataParallel dp(net, cpus(2));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({16, 10});
    auto y = torch::randint(4, {16});
    opt.zero_grad();
    ref_opt.zero_grad();
    torch::nn::functional::cross_entropy(dp(x), y).backward();
    torch::nn::functional::cross_entropy(ref(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  expect_same_state(*net, *ref);
}

// What DataParallel computes for a module with BatchNorm in training mode: each replica
// normalises its own chunk, and only replica 0's update of the running statistics is kept.
// Returns the outputs and the running statistics to restore after the backward (BatchNorm's
// backward needs them unchanged).
std::pair<torch::Tensor, std::vector<torch::Tensor>> per_chunk_reference(Cnn& ref,
                                                                         const torch::Tensor& x,
                                                                         int replicas) {
  auto chunks = x.chunk(replicas);
  std::vector<torch::Tensor> outs{ref(chunks[0])};
  std::vector<torch::Tensor> kept;
  for (const auto& b : ref->buffers()) {
    kept.push_back(b.clone());
  }
  for (size_t r = 1; r < chunks.size(); ++r) {
    outs.push_back(ref(chunks[r]));
  }
  return {torch::cat(outs), kept};
}

void restore_buffers(Cnn& ref, const std::vector<torch::Tensor>& kept) {
  torch::NoGradGuard no_grad;
  auto buffers = ref->buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    buffers[i].copy_(kept[i]);
  }
}

TEST(DataParallel, BatchNormTrainingMatchesPerChunkReference) {
  torch::manual_seed(3);
  Cnn net;
  Cnn ref = copy_of(net);
  dpx::DataParallel dp(net, cpus(2));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  for (int step = 0; step < 4; ++step) {
    auto x = torch::randn({12, 1, 8, 8});
    auto y = torch::randint(3, {12});
    opt.zero_grad();
    ref_opt.zero_grad();
    auto out = dp(x);
    auto [expected, kept] = per_chunk_reference(ref, x, 2);
    expect_close(out, expected, "output");
    torch::nn::functional::cross_entropy(out, y).backward();
    torch::nn::functional::cross_entropy(expected, y).backward();
    restore_buffers(ref, kept);
    if (step == 0) {
      expect_same_grads(*net, *ref);
    }
    opt.step();
    ref_opt.step();
  }
  expect_same_state(*net, *ref);  // parameters and running statistics
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 4);
}

TEST(DataParallel, BatchNormEvalMatchesWholeBatch) {
  torch::manual_seed(4);
  Cnn net;
  {
    torch::NoGradGuard no_grad;
    net->bn->running_mean.uniform_(-1, 1);
    net->bn->running_var.uniform_(0.5, 2);
  }
  net->eval();
  Cnn ref = copy_of(net);
  dpx::DataParallel dp(net, cpus(3));
  auto x = torch::randn({7, 1, 8, 8});
  auto out = dp(x);
  auto expected = ref(x);
  expect_close(out, expected, "output");
  out.sum().backward();
  expected.sum().backward();
  expect_same_grads(*net, *ref);
  expect_same_state(*net, *ref);
}

TEST(DataParallel, InputGradientsAndGradFunction) {
  torch::manual_seed(5);
  Mlp net;
  Mlp ref = copy_of(net);
  dpx::DataParallel dp(net, cpus(3));
  auto x = torch::randn({5, 10}, torch::requires_grad());
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto loss = dp(x).pow(2).sum();
  auto ref_loss = ref(x_ref).pow(2).sum();
  // torch::autograd::grad reaches the original parameters through DataParallel's node.
  auto grads = torch::autograd::grad({loss}, {x, net->fc1->weight}, {}, /*retain_graph=*/true);
  auto ref_grads = torch::autograd::grad({ref_loss}, {x_ref, ref->fc1->weight}, {}, true);
  expect_close(grads[0], ref_grads[0], "input grad");
  expect_close(grads[1], ref_grads[1], "fc1.weight grad");
  EXPECT_FALSE(net->fc1->weight.grad().defined());
  // The graph was retained: a second pass accumulates into .grad.
  loss.backward();
  ref_loss.backward();
  expect_close(x.grad(), x_ref.grad(), "input .grad");
  expect_same_grads(*net, *ref);
  // ...and a third one, after the graph was freed, is the usual error.
  EXPECT_THROW(loss.backward(), c10::Error);
}

TEST(DataParallel, TwoForwardsThenOneBackward) {
  torch::manual_seed(6);
  Mlp net;
  Mlp ref = copy_of(net);
  dpx::DataParallel dp(net, cpus(2));
  auto a = torch::randn({6, 10});
  auto b = torch::randn({4, 10});
  (dp(a).sum() + dp(b).pow(2).sum()).backward();
  (ref(a).sum() + ref(b).pow(2).sum()).backward();
  expect_same_grads(*net, *ref);
}

TEST(DataParallel, NoGradForwardBuildsNoGraph) {
  Mlp net;
  dpx::DataParallel dp(net, cpus(2));
  torch::NoGradGuard no_grad;
  auto out = dp(torch::randn({4, 10}));
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(out.grad_fn(), nullptr);
}

TEST(DataParallel, FrozenParametersGetNoGradient) {
  Mlp net;
  net->fc1->weight.set_requires_grad(false);
  dpx::DataParallel dp(net, cpus(2));
  dp(torch::randn({4, 10})).sum().backward();
  EXPECT_FALSE(net->fc1->weight.grad().defined());
  EXPECT_TRUE(net->fc2->weight.grad().defined());
}

}  // namespace

// On GPUs (skipped without one): two replicas always, on cuda:0 and cuda:1 where there are two
// GPUs, else both on cuda:0 (one replica would be the module run as it is, which tests nothing).
namespace {

dpx::DataParallelOptions gpus() {
  dpx::DataParallelOptions options;
  const bool two = torch::cuda::device_count() >= 2;
  options.devices = {torch::Device("cuda:0"), torch::Device(two ? "cuda:1" : "cuda:0")};
  return options;
}

// Five SGD steps of DataParallel over `options`' devices against the module on the whole batch.
void train_against_whole_batch(const dpx::DataParallelOptions& options) {
  torch::manual_seed(2);
  Mlp net;
  net->to(torch::Device("cuda:0"));
  Mlp ref = copy_of(net);
  dpx::DataParallel dp(net, options);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({16, 10}).cuda();
    auto y = torch::randint(4, {16}).cuda();
    opt.zero_grad();
    ref_opt.zero_grad();
    auto out = dp(x);
    EXPECT_EQ(out.device(), torch::Device("cuda:0"));
    torch::nn::functional::cross_entropy(out, y).backward();
    torch::nn::functional::cross_entropy(ref(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  expect_same_state(*net, *ref);
}

TEST(DataParallelCuda, TwoGpusTrainAsTheWholeBatch) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  train_against_whole_batch(gpus());
}

// Two replicas on one GPU: their backward used to wait on autograd's thread for cuda:0 from
// that same thread (Note [Parallel backward on CUDA]). Bounded by CTest's timeout if it hangs.
TEST(DataParallelCuda, TwoReplicasOnOneGpuTrainAsTheWholeBatch) {
  if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  dpx::DataParallelOptions options;
  options.devices = {torch::Device("cuda:0"), torch::Device("cuda:0")};
  train_against_whole_batch(options);
}

// Replica 0's in-place update of BatchNorm's running statistics reaches the module.
TEST(DataParallelCuda, BatchNormRunningStatsReachTheModule) {
  if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(3);
  Cnn net;
  net->to(torch::Device("cuda:0"));
  Cnn ref = copy_of(net);
  auto options = gpus();
  const int replicas = static_cast<int>(options.devices.size());
  dpx::DataParallel dp(net, options);
  auto x = torch::randn({12, 1, 8, 8}).cuda();
  auto out = dp(x);
  auto [expected, kept] = per_chunk_reference(ref, x, replicas);
  expect_close(out, expected, "output");
  restore_buffers(ref, kept);  // = replica 0's update
  expect_same_state(*net, *ref);
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 1);
}

// Called from a non-default stream, the scatter, the replicas and the gather are ordered with
// it (Note [Replica streams]): the input that stream writes late is what every replica reads,
// and the backward follows. On the replica threads' default streams they would read NaN.
TEST(DataParallelCuda, FromASideStreamReplicasSeeWhatThatStreamWrote) {
  if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const torch::Device device("cuda:0");
  torch::manual_seed(5);
  Mlp net;
  net->to(device);
  Mlp ref = copy_of(net);
  dpx::DataParallel dp(net, gpus());
  const auto x = torch::randn({16, 10});
  const c10::StreamGuard on_side(dpx::test::side_stream(device));
  auto out = dp(dpx::test::arrives_late(x, device));
  out.pow(2).sum().backward();
  auto expected = ref(x.to(device));
  expected.pow(2).sum().backward();
  expect_close(out, expected, "output");
  expect_same_grads(*net, *ref);
}

// Float and double parameters: on two GPUs their gradients are summed by one NCCL reduce per
// dtype (Note [One NCCL reduce per dtype]) and equal one GPU's on the whole batch.
struct TwoDtypesImpl : torch::nn::Cloneable<TwoDtypesImpl> {
  TwoDtypesImpl() { reset(); }
  void reset() override {
    fc = register_module("fc", torch::nn::Linear(10, 4));
    scale = register_parameter("scale", torch::linspace(0.5, 2.0, 4, torch::kDouble));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(x).to(torch::kDouble) * scale; }
  torch::nn::Linear fc{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(TwoDtypes);

TEST(DataParallelCuda, TwoGpusSumTheGradientsOfEachDtype) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  torch::manual_seed(4);
  TwoDtypes net;
  net->to(torch::Device("cuda:0"));
  TwoDtypes ref = copy_of(net);
  dpx::DataParallel dp(net, gpus());
  auto x = torch::randn({16, 10}).cuda();
  dp(x).pow(2).sum().backward();
  ref(x).pow(2).sum().backward();
  expect_same_grads(*net, *ref);
  EXPECT_EQ(net->scale.grad().scalar_type(), torch::kDouble);
  EXPECT_EQ(net->fc->weight.grad().device(), torch::Device("cuda:0"));
}

}  // namespace
