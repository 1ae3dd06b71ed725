// DDP with sparse gradients (Embedding with sparse(true); Note [Sparse buckets] in
// src/ddp/sparse_reduce.h), against one process on the whole batch, on every backend.
#include <signal.h>
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::ddp_sparse_test {
namespace {

constexpr std::int64_t kVocab = 60, kDim = 8, kClasses = 4, kPerRank = 6;
constexpr double kLr = 0.5;

// Bags of token ids -> class scores. `ids` is [batch, tokens]; with 0 tokens a sample touches
// no embedding row (the gradient is sparse with nnz 0).
struct EmbNetImpl : torch::nn::Module {
  explicit EmbNetImpl(bool sparse = true) {
    emb = register_module(
        "emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(kVocab, kDim).sparse(sparse)));
    fc = register_module("fc", torch::nn::Linear(kDim, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& ids) { return fc(emb(ids).sum(1)); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(EmbNet);

// One rank's share of a step: its ids (any number of tokens) and labels.
struct Share {
  torch::Tensor ids, y;
};
// ids_of(step, rank): the rows rank `rank` touches in `step`, [kPerRank, tokens].
using IdsOf = std::function<torch::Tensor(int step, int rank)>;

std::vector<std::vector<Share>> make_shares(int steps, int world, const IdsOf& ids_of) {
  std::vector<std::vector<Share>> out(steps);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      torch::manual_seed(1000 * s + r);
      out[s].push_back({ids_of(s, r), torch::randint(kClasses, {kPerRank})});
    }
  }
  return out;
}

torch::Tensor loss_of(EmbNet& net, const Share& share) {
  return torch::nn::functional::cross_entropy(net->forward(share.ids), share.y);
}

EmbNet make_net(bool sparse) {
  torch::manual_seed(5);
  return EmbNet(sparse);
}

// The gradient of `p` as a dense tensor (zeros when undefined).
torch::Tensor dense_grad(const torch::Tensor& p) {
  const auto& g = p.grad();
  if (!g.defined()) return torch::zeros_like(p);
  return g.is_sparse() ? g.to_dense() : g;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6))
      << what << ": max abs diff " << (got - want).abs().max().item<double>();
}

void expect_grads_match(EmbNet& got, EmbNet& want) {
  expect_close(dense_grad(got->emb->weight), dense_grad(want->emb->weight), "emb grad");
  expect_close(dense_grad(got->fc->weight), dense_grad(want->fc->weight), "fc.weight grad");
  expect_close(dense_grad(got->fc->bias), dense_grad(want->fc->bias), "fc.bias grad");
}

void expect_params_match(EmbNet& got, EmbNet& want) {
  auto a = got->parameters(), b = want->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    expect_close(a[i], b[i], "parameter " + std::to_string(i));
  }
}

void expect_sparse_coalesced(const torch::Tensor& grad) {
  ASSERT_TRUE(grad.defined());
  EXPECT_TRUE(grad.is_sparse());
  EXPECT_TRUE(grad.is_coalesced());
}

// Three SGD steps under DDP against one process that sees every rank's share (the mean of the
// ranks' mean losses is the loss of the whole batch, the shares being of equal size).
void check_against_one_process(int world, const IdsOf& ids_of,
                               DistributedDataParallelOptions options) {
  constexpr int kSteps = 3;
  test::on_each_backend(world, [&](int rank, auto pg) {
    auto shares = make_shares(kSteps, world, ids_of);
    auto net = make_net(true);
    DistributedDataParallel ddp(net, pg, options);
    auto ref = make_net(false);
    torch::optim::SGD opt(ddp->parameters(), kLr), ref_opt(ref->parameters(), kLr);
    for (int s = 0; s < kSteps; ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      opt.zero_grad();
      ref_opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(shares[s][rank].ids), shares[s][rank].y)
          .backward();
      for (int r = 0; r < world; ++r) (loss_of(ref, shares[s][r]) / world).backward();
      expect_sparse_coalesced(net->emb->weight.grad());
      expect_grads_match(net, ref);
      opt.step();
      ref_opt.step();
      expect_params_match(net, ref);
    }
    // The embedding has a bucket of its own; fc's weight and bias share one.
    auto sizes = ddp->stats().bucket_num_parameters;
    std::sort(sizes.begin(), sizes.end());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1, 2}));
  });
}

torch::Tensor random_ids(int step, int rank, std::int64_t lo, std::int64_t hi,
                         std::int64_t tokens) {
  torch::manual_seed(77 + 10 * step + rank);
  return torch::randint(lo, hi, {kPerRank, tokens});
}

TEST(SparseDdp, OverlappingRowsMatchOneProcess) {
  check_against_one_process(2, [](int s, int r) { return random_ids(s, r, 0, kVocab, 5); }, {});
}

// Rank 0 and 1 touch disjoint rows, rank 2 none; in step 1 no rank touches any row.
TEST(SparseDdp, DisjointRowsAndRanksTouchingNoneMatchOneProcess) {
  check_against_one_process(3, [](int s, int r) {
    if (r == 2 || s == 1) return torch::zeros({kPerRank, 0}, torch::kLong);
    return random_ids(s, r, 30 * r, 30 * r + 30, 4);
  }, {});
}

// gradient_as_bucket_view concerns the dense buckets only (as in PyTorch); static_graph learns
// the sparse bucket like any other.
TEST(SparseDdp, WithGradientAsBucketViewOrStaticGraph) {
  auto ids = [](int s, int r) { return random_ids(s, r, 0, kVocab, 3); };
  DistributedDataParallelOptions views;
  views.gradient_as_bucket_view = true;
  check_against_one_process(2, ids, views);
  DistributedDataParallelOptions static_graph;
  static_graph.static_graph = true;
  check_against_one_process(2, ids, static_graph);
}

TEST(SparseDdp, NoSyncAccumulatesSparseGradientsThenSynchronisesTheSum) {
  constexpr int kWorld = 2;
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto shares = make_shares(3, kWorld, [](int s, int r) { return random_ids(s, r, 0, 20, 4); });
    auto net = make_net(true);
    DistributedDataParallel ddp(net, pg);
    {
      auto guard = ddp->no_sync();
      for (int s = 0; s < 2; ++s) {
        torch::nn::functional::cross_entropy(ddp->forward(shares[s][rank].ids), shares[s][rank].y)
            .backward();
      }
      auto local = make_net(false);  // still local: this rank's own sum
      for (int s = 0; s < 2; ++s) loss_of(local, shares[s][rank]).backward();
      EXPECT_TRUE(net->emb->weight.grad().is_sparse());
      expect_grads_match(net, local);
    }
    torch::nn::functional::cross_entropy(ddp->forward(shares[2][rank].ids), shares[2][rank].y)
        .backward();
    auto ref = make_net(false);
    for (int s = 0; s < 3; ++s) {
      for (int r = 0; r < kWorld; ++r) (loss_of(ref, shares[s][r]) / kWorld).backward();
    }
    expect_sparse_coalesced(net->emb->weight.grad());
    expect_grads_match(net, ref);
  });
}

// An Embedding and an EmbeddingBag (both sparse); the bag is used by some ranks, or by none.
struct TwoTablesImpl : torch::nn::Module {
  explicit TwoTablesImpl(bool sparse) {
    emb = register_module(
        "emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(kVocab, kDim).sparse(sparse)));
    bag = register_module(
        "bag", torch::nn::EmbeddingBag(
                   torch::nn::EmbeddingBagOptions(kVocab, kDim).sparse(sparse).mode(torch::kSum)));
    fc = register_module("fc", torch::nn::Linear(kDim, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& ids, bool use_bag) {
    auto h = emb(ids).sum(1);
    return fc(use_bag ? h + bag(ids) : h);
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::EmbeddingBag bag{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TwoTables);

TEST(SparseDdp, UnusedSparseParametersWithFindUnusedParameters) {
  constexpr int kWorld = 2;
  // Step 0: only rank 0 uses the bag; step 1: no rank; step 2: both.
  const auto uses_bag = [](int step, int rank) { return step == 2 || (step == 0 && rank == 0); };
  test::on_each_backend(kWorld, [&](int rank, auto pg) {
    auto shares =
        make_shares(3, kWorld, [](int s, int r) { return random_ids(s, r, 0, kVocab, 3); });
    torch::manual_seed(6);
    TwoTables net(true);
    torch::manual_seed(6);
    TwoTables ref(false);
    DistributedDataParallelOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(net, pg, o);
    torch::optim::SGD opt(ddp->parameters(), kLr), ref_opt(ref->parameters(), kLr);
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      opt.zero_grad();
      ref_opt.zero_grad();
      const auto bag_grad_before = net->bag->weight.grad();
      const auto& share = shares[s][rank];
      torch::nn::functional::cross_entropy(ddp->forward(share.ids, uses_bag(s, rank)), share.y)
          .backward();
      for (int r = 0; r < kWorld; ++r) {
        (torch::nn::functional::cross_entropy(ref->forward(shares[s][r].ids, uses_bag(s, r)),
                                              shares[s][r].y) /
         kWorld)
            .backward();
      }
      if (s == 1) {  // unused everywhere: .grad untouched
        EXPECT_TRUE(net->bag->weight.grad().is_same(bag_grad_before));
      } else {
        expect_sparse_coalesced(net->bag->weight.grad());
      }
      expect_close(dense_grad(net->emb->weight), dense_grad(ref->emb->weight), "emb grad");
      expect_close(dense_grad(net->bag->weight), dense_grad(ref->bag->weight), "bag grad");
      expect_close(dense_grad(net->fc->weight), dense_grad(ref->fc->weight), "fc grad");
      opt.step();
      ref_opt.step();
      auto a = net->parameters(), b = ref->parameters();
      for (std::size_t i = 0; i < a.size(); ++i) expect_close(a[i], b[i], "parameter");
    }
  });
}

// join(): rank 1 runs out of data after one step and shadows rank 0's second step with a
// sparse contribution of no rows.
TEST(SparseDdp, JoinShadowsSparseBuckets) {
  constexpr int kWorld = 2;
  test::on_each_backend(kWorld, [](int rank, auto pg) {
    auto shares =
        make_shares(2, kWorld, [](int s, int r) { return random_ids(s, r, 0, kVocab, 3); });
    auto net = make_net(true);
    DistributedDataParallel ddp(net, pg);
    auto ref = make_net(false);
    torch::optim::SGD opt(ddp->parameters(), kLr), ref_opt(ref->parameters(), kLr);
    const int my_steps = rank == 0 ? 2 : 1;
    ddp->join([&] {
      for (int s = 0; s < my_steps; ++s) {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(ddp->forward(shares[s][rank].ids), shares[s][rank].y)
            .backward();
        opt.step();
      }
    });
    for (int s = 0; s < 2; ++s) {  // divided by the initial world size, PyTorch's default
      ref_opt.zero_grad();
      for (int r = 0; r < (s == 0 ? kWorld : 1); ++r) {
        (loss_of(ref, shares[s][r]) / kWorld).backward();
      }
      ref_opt.step();
    }
    expect_params_match(net, ref);
  });
}

// One rank: nothing to gather; the gradient is still coalesced (an accumulation may repeat rows).
TEST(SparseDdp, OneRankCoalescesTheGradient) {
  test::StoreServer server;
  auto pg = new_process_group("gloo", server.client(), 0, 1);
  auto net = make_net(true), ref = make_net(false);
  DistributedDataParallel ddp(net, pg);
  auto ids = torch::tensor({3, 3, 7, 3}, torch::kLong).view({2, 2});
  auto y = torch::tensor({1, 2}, torch::kLong);
  {
    auto guard = ddp->no_sync();
    torch::nn::functional::cross_entropy(ddp->forward(ids), y).backward();
  }
  torch::nn::functional::cross_entropy(ddp->forward(ids), y).backward();
  for (int i = 0; i < 2; ++i) loss_of(ref, {ids, y}).backward();
  expect_sparse_coalesced(net->emb->weight.grad());
  EXPECT_EQ(net->emb->weight.grad()._nnz(), 2);
  expect_grads_match(net, ref);
}

// A rank lost before a sparse bucket's all-gathers: the others get a typed error from backward
// within the group's timeout, never a hang.
TEST(SparseDdp, APeerLostBeforeTheSparseReductionIsATypedError) {
  for (const auto& backend : test::backends()) {
    SCOPED_TRACE("backend " + backend);
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group(backend, server.client(), rank, 2,
                                  test::with_timeout(std::chrono::milliseconds(3000)));
      torch::nn::Embedding emb(torch::nn::EmbeddingOptions(kVocab, kDim).sparse(true));
      DistributedDataParallel ddp(emb, pg);  // its only bucket is the sparse one
      auto ids = random_ids(0, rank, 0, kVocab, 3);
      ddp->forward(ids).sum().backward();  // both ranks are connected and working
      if (rank == 1) test::kill_this_rank();
      const auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(ddp->forward(ids).sum().backward(), DistributedError);
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(6000));
    }, {std::chrono::seconds(30)});
    EXPECT_EQ(results[1].signal, SIGKILL);
    EXPECT_TRUE(results[0].ok()) << results[0].output;
  }
}

}  // namespace
}  // namespace dpx::ddp_sparse_test
