// Data parallel training is the same training: 2 ranks, each on its DistributedSampler shard of
// Fashion-MNIST, end with the parameters of one process on the concatenated batches.
#include <sys/stat.h>
#include <torch/torch.h>

#include "dpx/data/fashion_mnist.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::fashion_mnist_equivalence_test {
namespace {

constexpr size_t kSamples = 512;
constexpr int64_t kBatch = 16;  // per rank
constexpr int kSteps = 6;
constexpr int kWorld = 2;

struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)))),
        fc(register_module("fc", torch::nn::Linear(4 * 13 * 13, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::max_pool2d(torch::relu(conv(x)), 2).flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(SmallNet);

SmallNet fresh_net() {
  torch::manual_seed(0);
  return SmallNet();
}

torch::optim::SGD make_sgd(SmallNet& net) {
  return torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

void sgd_step(torch::optim::SGD& opt, const torch::Tensor& out, const torch::Tensor& y) {
  torch::nn::functional::cross_entropy(out, y).backward();
  opt.step();
  opt.zero_grad();
}

// One process on the batches of all ranks, concatenated in rank order, step by step.
SmallNet reference(const FashionMNIST& data) {
  auto net = fresh_net();
  auto opt = make_sgd(net);
  std::vector<std::vector<size_t>> shards;
  for (int r = 0; r < kWorld; ++r) shards.push_back(DistributedSampler(kSamples, kWorld, r).indices());
  for (int s = 0; s < kSteps; ++s) {
    std::vector<int64_t> idx;
    for (const auto& shard : shards) {
      idx.insert(idx.end(), shard.begin() + s * kBatch, shard.begin() + (s + 1) * kBatch);
    }
    auto index = torch::tensor(idx, torch::kInt64);
    sgd_step(opt, net->forward(data.images(index)),
             data.targets().index_select(0, index));
  }
  return net;
}

TEST(FashionMnistEquivalence, TwoRanksEqualOneProcessOnConcatenatedBatches) {
  struct stat st {};
  if (::stat((std::string(FashionMNIST::kDefaultRoot) + "/train-images-idx3-ubyte.gz").c_str(),
             &st) != 0) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  }
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE("backend " + backend);
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
      torch::set_num_threads(1);
      FashionMNIST data;
      auto pg = new_process_group(backend, server.client(), rank, kWorld);
      DistributedSampler sampler(kSamples, kWorld, rank);
      auto loader = torch::data::make_data_loader(
          FashionMNIST(data).map(torch::data::transforms::Stack<>()), sampler,
          torch::data::DataLoaderOptions(kBatch));
      auto net = fresh_net();
      auto opt = make_sgd(net);
      DistributedDataParallel ddp(net, pg);
      sampler.set_epoch(0);
      int steps = 0;
      for (auto& batch : *loader) {
        if (steps++ == kSteps) break;
        sgd_step(opt, ddp->forward(batch.data), batch.target);
      }
      auto expected = reference(data);
      const auto got = net->named_parameters(), want = expected->named_parameters();
      for (const auto& p : got) {
        EXPECT_TRUE(torch::allclose(p.value(), want[p.key()], 1e-4, 1e-5))
            << p.key() << " differs by " << (p.value() - want[p.key()]).abs().max().item<float>();
      }
    }));
  }
}

}  // namespace
}  // namespace dpx::fashion_mnist_equivalence_test
