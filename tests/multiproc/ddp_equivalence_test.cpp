// W ranks on B samples each end with the same parameters as one process on the W*B samples
// (spec/ddp.md, "Equivalence"). Every rank computes the single-process reference itself.
#include <torch/torch.h>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::ddp_equivalence_test {
namespace {

constexpr int kWorld = 2;
constexpr int kPerRank = 8;
constexpr int kSteps = 5;

struct Case {
  std::string name;
  DistributedDataParallelOptions options;
  std::string backend;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> option_cases() {
  std::vector<Case> cases;
  cases.push_back({"defaults", {}});
  DistributedDataParallelOptions view;
  view.gradient_as_bucket_view = true;
  cases.push_back({"bucket_view", view});
  DistributedDataParallelOptions tiny;
  tiny.bucket_cap_mb = 0.0005;  // ~500 bytes: nearly one bucket per parameter
  tiny.first_bucket_cap_mb = 0.0005;
  cases.push_back({"tiny_buckets", tiny});
  tiny.gradient_as_bucket_view = true;
  cases.push_back({"tiny_buckets_bucket_view", tiny});
  DistributedDataParallelOptions stat;
  stat.static_graph = true;
  cases.push_back({"static_graph", stat});
  // Every option case on every backend: the reducer must not depend on how buckets travel.
  std::vector<Case> all;
  for (const auto& backend : test::backends()) {
    for (auto c : cases) {
      c.name = backend + "_" + c.name;
      c.backend = backend;
      all.push_back(c);
    }
  }
  return all;
}

// Trains `steps` SGD-with-momentum steps; loss_of(model, step) gives the loss to minimise.
template <typename Model, typename LossFn>
void train(Model& model, std::vector<torch::Tensor> params, int steps, LossFn loss_of) {
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    loss_of(s).backward();
    opt.step();
  }
}

template <typename Holder>
std::vector<torch::Tensor> detached(const Holder& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, Mlp) {
  const auto options = GetParam().options;
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    auto pg = new_process_group(GetParam().backend, server.client(), rank, kWorld);
    auto batches = test::make_batches(kSteps, kWorld, kPerRank, {16});
    torch::manual_seed(7 + rank);  // rank 1 starts different: the broadcast must fix it
    test::Mlp net;
    torch::manual_seed(7);
    test::Mlp ref;
    DistributedDataParallel ddp(net, pg, options);
    train(ddp, ddp->parameters(), kSteps, [&](int s) {
      auto b = test::slice(batches[s], rank, kWorld);
      return torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y);
    });
    train(ref, ref->parameters(), kSteps, [&](int s) {
      return torch::nn::functional::cross_entropy(ref->forward(batches[s].x), batches[s].y);
    });
    test::expect_params_close(detached(net), detached(ref));
    EXPECT_EQ(ddp->stats().iterations, kSteps);
    EXPECT_TRUE(ddp->stats().buckets_rebuilt);
    // With caps of 524 bytes, each of the Mlp's 3 layers fills a bucket (bias, then weight).
    EXPECT_EQ(ddp->stats().bucket_sizes_bytes.size(), options.bucket_cap_mb < 0.001 ? 3u : 1u);
  }));
}

// BatchNorm in training mode normalises each rank's batch by its own statistics, so the
// reference is the mean of the per-rank losses (what DDP's gradient average computes), not
// the loss of the concatenated batch.
TEST_P(Equivalence, CnnWithBatchNorm) {
  const auto options = GetParam().options;
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    auto pg = new_process_group(GetParam().backend, server.client(), rank, kWorld);
    auto batches = test::make_batches(kSteps, kWorld, kPerRank, {1, 8, 8});
    torch::manual_seed(11 + rank);
    test::Cnn net;
    torch::manual_seed(11);
    test::Cnn ref;
    DistributedDataParallel ddp(net, pg, options);
    train(ddp, ddp->parameters(), kSteps, [&](int s) {
      auto b = test::slice(batches[s], rank, kWorld);
      return torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y);
    });
    train(ref, ref->parameters(), kSteps, [&](int s) {
      torch::Tensor total;
      for (int r = 0; r < kWorld; ++r) {
        auto b = test::slice(batches[s], r, kWorld);
        auto l = torch::nn::functional::cross_entropy(ref->forward(b.x), b.y) / kWorld;
        total = total.defined() ? total + l : l;
      }
      return total;
    });
    test::expect_params_close(detached(net), detached(ref));
  }));
}

// With BatchNorm in evaluation mode the statistics are fixed, and W ranks equal one process
// on the concatenated batch exactly as the spec states it.
TEST_P(Equivalence, CnnEvalBatchNormOnConcatenatedBatch) {
  const auto options = GetParam().options;
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    auto pg = new_process_group(GetParam().backend, server.client(), rank, kWorld);
    auto batches = test::make_batches(kSteps, kWorld, kPerRank, {1, 8, 8});
    torch::manual_seed(11);
    test::Cnn net;
    torch::manual_seed(11);
    test::Cnn ref;
    net->bn->eval();
    ref->bn->eval();
    DistributedDataParallel ddp(net, pg, options);
    train(ddp, ddp->parameters(), kSteps, [&](int s) {
      auto b = test::slice(batches[s], rank, kWorld);
      return torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y);
    });
    train(ref, ref->parameters(), kSteps, [&](int s) {
      return torch::nn::functional::cross_entropy(ref->forward(batches[s].x), batches[s].y);
    });
    test::expect_params_close(detached(net), detached(ref));
  }));
}

INSTANTIATE_TEST_SUITE_P(Options, Equivalence, ::testing::ValuesIn(option_cases()),
                         [](const auto& info) { return info.param.name; });

// net2 is used on rank 0 only, never_used nowhere: net2 gets half of rank 0's gradient,
// never_used keeps an undefined grad.
class UnusedBranch : public ::testing::TestWithParam<bool> {};

TEST_P(UnusedBranch, FindUnusedParametersAveragesWhatSomeRankUsed) {
  DistributedDataParallelOptions options;
  options.find_unused_parameters = true;
  options.gradient_as_bucket_view = GetParam();
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    auto batches = test::make_batches(kSteps, kWorld, kPerRank, {16});
    torch::manual_seed(3);
    test::Branchy net;
    torch::manual_seed(3);
    test::Branchy ref;
    DistributedDataParallel ddp(net, pg, options);
    train(ddp, ddp->parameters(), kSteps, [&](int s) {
      auto b = test::slice(batches[s], rank, kWorld);
      return torch::nn::functional::cross_entropy(ddp->forward(b.x, rank == 0), b.y);
    });
    EXPECT_FALSE(net->never_used->weight.grad().defined());
    EXPECT_TRUE(net->net2->weight.grad().defined());
    train(ref, ref->parameters(), kSteps, [&](int s) {
      torch::Tensor total;
      for (int r = 0; r < kWorld; ++r) {
        auto b = test::slice(batches[s], r, kWorld);
        auto l = torch::nn::functional::cross_entropy(ref->forward(b.x, r == 0), b.y) / kWorld;
        total = total.defined() ? total + l : l;
      }
      return total;
    });
    test::expect_params_close(detached(net), detached(ref));
  }));
}

INSTANTIATE_TEST_SUITE_P(BucketView, UnusedBranch, ::testing::Bool());

// The wrapped module's saved state loads into the plain module.
TEST(DdpCheckpoint, WrappedModuleStateLoadsIntoPlainModule) {
  test::StoreServer server;
  char dir_template[] = "/tmp/dpx-ddp-ckpt-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    torch::manual_seed(rank);
    test::Cnn net;
    DistributedDataParallel ddp(net, pg);
    auto b = test::slice(test::make_batches(1, kWorld, kPerRank, {1, 8, 8})[0], rank, kWorld);
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    const std::string path = dir + "/model.pt";
    if (rank == 0) torch::save(ddp->module(), path);
    pg->barrier()->wait();
    test::Cnn plain;
    torch::load(plain, path);
    test::expect_params_close(detached(plain), detached(net), 0, 0);
    // Buffers were broadcast from rank 0 before the forward; since then each rank's BatchNorm
    // updated its own statistics, so only rank 0's match what it saved.
    if (rank == 0) EXPECT_TRUE(plain->bn->running_mean.equal(net->bn->running_mean));
    pg->barrier()->wait();
  }));
  std::remove((dir + "/model.pt").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace dpx::ddp_equivalence_test

namespace dpx::ddp_equivalence_test {
namespace {

// One rank: the same steps as plain LibTorch, bit for bit (Note [One rank] in reducer_step.cpp),
// with and without bucket views.
TEST(DdpOneRank, SameParametersAsPlainLibTorch) {
  for (bool view : {false, true}) {
    test::StoreServer server;
    auto pg = new_process_group("gloo", server.client(), 0, 1);
    auto batches = test::make_batches(kSteps, 1, kPerRank, {16});
    torch::manual_seed(7);
    test::Mlp net;
    torch::manual_seed(7);
    test::Mlp ref;
    DistributedDataParallelOptions o;
    o.gradient_as_bucket_view = view;
    DistributedDataParallel ddp(net, pg, o);
    train(ddp, ddp->parameters(), kSteps, [&](int s) {
      return torch::nn::functional::cross_entropy(ddp->forward(batches[s].x), batches[s].y);
    });
    train(ref, ref->parameters(), kSteps, [&](int s) {
      return torch::nn::functional::cross_entropy(ref->forward(batches[s].x), batches[s].y);
    });
    const auto got = detached(net), want = detached(ref);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << i;
    EXPECT_EQ(ddp->stats().iterations, kSteps);
  }
}

}  // namespace
}  // namespace dpx::ddp_equivalence_test
