// replicate() and parallel_apply() on their own, as torch.nn.parallel exposes them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "dpx/data_parallel/parallel_apply.h"
#include "dpx/data_parallel/replicate.h"
#include "dpx/data_parallel/scatter_gather.h"

namespace {

std::vector<torch::Device> cpu_devices(int n) { return std::vector<torch::Device>(n, torch::kCPU); }

struct BnNetImpl : torch::nn::Cloneable<BnNetImpl> {
  BnNetImpl() { reset(); }
  void reset() override {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(BnNet);

TEST(Replicate, GradientsOfAllReplicasReachTheOriginal) {
  torch::manual_seed(0);
  BnNet net;
  BnNet ref(std::dynamic_pointer_cast<BnNetImpl>(net->clone()));
  auto copy = std::dynamic_pointer_cast<BnNetImpl>(ref->clone());
  auto replicas = dpx::replicate(net, cpu_devices(2));
  ASSERT_EQ(replicas.size(), 2u);
  // Replica parameters share the original's storage and are not leaves.
  EXPECT_TRUE(replicas[1]->fc->weight.is_alias_of(net->fc->weight));
  EXPECT_FALSE(replicas[1]->fc->weight.is_leaf());

  auto chunks = torch::randn({8, 3}).chunk(2);
  (replicas[0]->forward(chunks[0]).pow(2).sum() + replicas[1]->forward(chunks[1]).pow(2).sum())
      .backward();
  (ref->forward(chunks[0]).pow(2).sum() + copy->forward(chunks[1]).pow(2).sum()).backward();
  for (const auto& name : {"fc.weight", "fc.bias", "bn.weight", "bn.bias"}) {
    auto expected = ref->named_parameters()[name].grad() + copy->named_parameters()[name].grad();
    EXPECT_TRUE(torch::allclose(net->named_parameters()[name].grad(), expected, 1e-5, 1e-6))
        << name;
  }
}

TEST(Replicate, FirstReplicaSharesBuffersOthersCopyThem) {
  BnNet net;
  auto replicas = dpx::replicate(net, cpu_devices(2));
  EXPECT_TRUE(replicas[0]->bn->running_mean.is_alias_of(net->bn->running_mean));
  EXPECT_FALSE(replicas[1]->bn->running_mean.is_alias_of(net->bn->running_mean));
  replicas[0]->forward(torch::randn({4, 3}) + 5);
  replicas[1]->forward(torch::randn({4, 3}) - 5);
  // Replica 0's running statistics are the original's; replica 1's update is lost.
  EXPECT_TRUE(torch::equal(net->bn->running_mean, replicas[0]->bn->running_mean));
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Replicate, DetachedReplicasAndGradMode) {
  BnNet net;
  auto detached = dpx::replicate(net, cpu_devices(2), {/*detach=*/true});
  EXPECT_FALSE(detached[1]->fc->weight.requires_grad());
  EXPECT_TRUE(torch::equal(detached[1]->fc->weight, net->fc->weight));
  torch::NoGradGuard no_grad;
  auto plain = dpx::replicate(net, cpu_devices(1));
  EXPECT_FALSE(plain[0]->fc->weight.requires_grad());
}

TEST(Replicate, TrainingFlagsFollowAndRandomStateIsKept) {
  BnNet net;
  net->bn->eval();
  auto before = at::detail::getDefaultCPUGenerator().get_state();
  auto replicas = dpx::replicate(net, cpu_devices(2));
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), before));
  EXPECT_TRUE(replicas[1]->is_training());
  EXPECT_FALSE(replicas[1]->bn->is_training());
}

TEST(Replicate, NonCloneableModuleIsAClearError) {
  struct Plain : torch::nn::Module {};
  auto plain = std::make_shared<Plain>();
  try {
    dpx::replicate(std::static_pointer_cast<torch::nn::Module>(plain), cpu_devices(2));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("clone() has not been implemented"), std::string::npos)
        << e.what();
  }
}

TEST(ParallelApply, RunsEachReplicaOnItsInput) {
  auto net = std::make_shared<torch::nn::LinearImpl>(3, 2);
  auto replicas = dpx::replicate(net, cpu_devices(3));
  auto x = torch::randn({6, 3});
  std::vector<torch::Tensor> inputs = x.chunk(3);
  auto outputs = dpx::parallel_apply(replicas, inputs);
  ASSERT_EQ(outputs.size(), 3u);
  // Products of different batch sizes may round differently: a float tolerance, not 1e-8.
  EXPECT_TRUE(torch::allclose(torch::cat(outputs), net->forward(x), 1e-5, 1e-6));

  // The IValue form, composed with scatter and gather as DataParallel's steps.
  auto pieces = dpx::scatter(x, cpu_devices(3));
  std::vector<std::shared_ptr<torch::nn::Module>> modules(replicas.begin(), replicas.end());
  auto results = dpx::parallel_apply(
      modules, pieces, [](torch::nn::Module& m, const c10::IValue& in) -> c10::IValue {
        return dynamic_cast<torch::nn::LinearImpl&>(m).forward(in.toTensor());
      });
  auto gathered = dpx::gather(results, torch::kCPU).toTensor();
  EXPECT_TRUE(torch::allclose(gathered, net->forward(x), 1e-5, 1e-6));
  gathered.sum().backward();
  EXPECT_TRUE(torch::allclose(net->bias.grad(), torch::full({2}, 6.0)));
}

TEST(ParallelApply, ReraisesTheFirstFailingReplica) {
  auto net = std::make_shared<torch::nn::LinearImpl>(3, 2);
  auto replicas = dpx::replicate(net, cpu_devices(3));
  std::vector<torch::Tensor> inputs{torch::zeros({1, 3}), torch::zeros({1, 4}), torch::zeros({1, 5})};
  try {
    dpx::parallel_apply(replicas, inputs);
    FAIL() << "expected a ReplicaError";
  } catch (const dpx::ReplicaError& e) {
    EXPECT_EQ(e.replica(), 1);
    EXPECT_NE(std::string(e.what()).find("Caught c10::Error in replica 1 on device cpu."),
              std::string::npos)
        << e.what();
  }
}

TEST(ParallelApply, ReplicaThreadsKeepTheCallersGradMode) {
  auto net = std::make_shared<torch::nn::LinearImpl>(3, 2);
  auto replicas = dpx::replicate(net, cpu_devices(2), {/*detach=*/true});
  std::vector<torch::Tensor> inputs{torch::ones({1, 3}, torch::requires_grad()),
                                    torch::ones({1, 3}, torch::requires_grad())};
  torch::NoGradGuard no_grad;
  for (const auto& out : dpx::parallel_apply(replicas, inputs)) {
    EXPECT_FALSE(out.requires_grad());
  }
}

}  // namespace
