// Every error message of spec/ddp.md, raised on every rank that should raise it.
#include <torch/torch.h>

#include <cstdlib>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx::ddp_errors_test {
namespace {

constexpr int kWorld = 2;

using Body = std::function<void(int, std::shared_ptr<ProcessGroup>)>;

// Runs `body` on two ranks; each must throw an error whose text contains needle(rank).
void expect_every_rank_throws(const std::function<std::string(int)>& needle, const Body& body) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    ProcessGroup::Options o;
    o.timeout = std::chrono::seconds(20);
    auto pg = new_process_group("gloo", server.client(), rank, kWorld, o);
    try {
      body(rank, pg);
      ADD_FAILURE() << "rank " << rank << " did not throw";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle(rank)), std::string::npos) << e.what();
    }
  }));
}

void expect_every_rank_throws(const std::string& needle, const Body& body) {
  expect_every_rank_throws([&](int) { return needle; }, body);
}

struct TwoNetsImpl : torch::nn::Module {
  TwoNetsImpl() {
    net1 = register_module("net1", torch::nn::Linear(16, 4));
    net2 = register_module("net2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x, bool use_net2) {
    return use_net2 ? net1(x) + net2(x) : net1(x);
  }
  torch::nn::Linear net1{nullptr}, net2{nullptr};
};
TORCH_MODULE(TwoNets);

struct WiderImpl : torch::nn::Module {
  explicit WiderImpl(int width) { fc = register_module("fc", torch::nn::Linear(16, width)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Wider);

TEST(DdpErrors, DifferentParameterCounts) {
  expect_every_rank_throws("DDP expects same model across all ranks", [](int rank, auto pg) {
    if (rank == 0) {
      test::Mlp net;
      DistributedDataParallel ddp(net, pg);
    } else {
      Wider net(4);
      DistributedDataParallel ddp(net, pg);
    }
  });
}

TEST(DdpErrors, DifferentShapes) {
  expect_every_rank_throws("appears not to match", [](int rank, auto pg) {
    Wider net(rank == 0 ? 4 : 5);
    DistributedDataParallel ddp(net, pg);
  });
}

TEST(DdpErrors, NoParameterRequiresGrad) {
  test::StoreServer server;
  auto pg = new_process_group("gloo", server.client(), 0, 1);
  test::Mlp net;
  for (auto& p : net->parameters()) p.set_requires_grad(false);
  try {
    DistributedDataParallel ddp(net, pg);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("doesn't have any parameter that requires a gradient"),
              std::string::npos);
  }
}

// One training iteration where net2 does not take part, then the next forward.
void unused_parameter_iteration(std::shared_ptr<ProcessGroup> pg,
                                DistributedDataParallelOptions options = {}) {
  torch::manual_seed(1);
  TwoNets net;
  DistributedDataParallel ddp(net, pg, options);
  auto x = torch::randn({4, 16});
  ddp->forward(x, true).sum().backward();  // first iteration: every parameter used
  ddp->forward(x, false).sum().backward();
  ddp->forward(x, false);
}

TEST(DdpErrors, UnusedParameterWithoutFindUnused) {
  expect_every_rank_throws("Expected to have finished reduction in the prior iteration",
                           [](int, auto pg) { unused_parameter_iteration(pg); });
  expect_every_rank_throws("find_unused_parameters=True",
                           [](int, auto pg) { unused_parameter_iteration(pg); });
}

TEST(DdpErrors, UnusedParameterNamedInDebugMode) {
  auto needle = [](int rank) {
    return "did not receive grad for rank " + std::to_string(rank) + ": net2.weight, net2.bias";
  };
  expect_every_rank_throws(needle, [](int, auto pg) {
    ::setenv("DPX_DEBUG", "INFO", 1);  // in the forked child only
    unused_parameter_iteration(pg);
  });
}

TEST(DdpErrors, StaticGraphThatChanges) {
  DistributedDataParallelOptions options;
  options.static_graph = true;
  expect_every_rank_throws("training graph has changed", [&](int, auto pg) {
    unused_parameter_iteration(pg, options);
  });
}

TEST(DdpErrors, VariableMarkedReadyTwice) {
  expect_every_rank_throws("Expected to mark a variable ready only once", [](int, auto pg) {
    torch::manual_seed(1);
    test::Mlp net;
    DistributedDataParallel ddp(net, pg);
    auto loss = ddp->forward(torch::randn({4, 16})).sum();
    // Two partial backward passes over the same parameter within one iteration.
    loss.backward({}, /*retain_graph=*/true, false, {net->fc3->weight});
    loss.backward({}, /*retain_graph=*/true, false, {net->fc3->weight});
  });
}

// A sparse gradient DDP was not told about: only Embedding/EmbeddingBag modules with
// sparse(true) get sparse buckets (as in PyTorch), so a functional sparse embedding is refused.
struct FunctionalEmbeddingImpl : torch::nn::Module {
  FunctionalEmbeddingImpl() { weight = register_parameter("weight", torch::randn({10, 4})); }
  torch::Tensor forward(const torch::Tensor& ids) {
    return torch::embedding(weight, ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false,
                            /*sparse=*/true);
  }
  torch::Tensor weight;
};
TORCH_MODULE(FunctionalEmbedding);

TEST(DdpErrors, SparseGradientOutsideAnEmbeddingModuleIsRefused) {
  expect_every_rank_throws("parameter weight has a sparse gradient, but it is not the weight of "
                           "a torch::nn::Embedding", [](int, auto pg) {
    FunctionalEmbedding net;
    DistributedDataParallel ddp(net, pg);
    ddp->forward(torch::tensor({1, 2, 3})).sum().backward();
  });
}

// The weight of a sparse Embedding tied to a dense use: its gradient arrives dense.
struct TiedEmbeddingImpl : torch::nn::Module {
  TiedEmbeddingImpl() {
    emb = register_module(
        "emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(true)));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    return torch::matmul(emb(ids), emb->weight.t());
  }
  torch::nn::Embedding emb{nullptr};
};
TORCH_MODULE(TiedEmbedding);

TEST(DdpErrors, DenseGradientOfASparseEmbeddingIsRefused) {
  expect_every_rank_throws("parameter emb.weight belongs to an Embedding or EmbeddingBag built "
                           "with sparse(true), but its gradient is dense", [](int, auto pg) {
    TiedEmbedding net;
    DistributedDataParallel ddp(net, pg);
    ddp->forward(torch::tensor({1, 2, 3})).sum().backward();
  });
}

TEST(DdpErrors, CommHookWithSparseGradientsIsRefusedAtRegistration) {
  test::StoreServer server;
  auto pg = new_process_group("gloo", server.client(), 0, 1);
  torch::nn::Embedding emb(torch::nn::EmbeddingOptions(10, 4).sparse(true));
  DistributedDataParallel ddp(emb, pg);
  try {
    ddp->register_comm_hook({}, hooks::allreduce_hook);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("register_comm_hook: this model has parameters with "
                                         "sparse gradients (weight"),
              std::string::npos) << e.what();
  }
}

TEST(DdpErrors, CommHookRegisteredTwice) {
  test::StoreServer server;
  auto pg = new_process_group("gloo", server.client(), 0, 1);
  test::Mlp net;
  DistributedDataParallel ddp(net, pg);
  ddp->register_comm_hook({}, hooks::allreduce_hook);
  try {
    ddp->register_comm_hook({}, hooks::fp16_compress_hook);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("can only be called once"), std::string::npos);
  }
}

}  // namespace
}  // namespace dpx::ddp_errors_test
