// Every error message of spec/ddp.md, raised on every rank that should raise it.
#include <torch/torch.h>

#include <cstdlib>

#include "ddp_models.h"
#include "dpx/dpx.h"
#include "harness.h"

namespace dpx {
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

TEST(DdpErrors, SparseGradientsAreRefusedClearly) {
  expect_every_rank_throws("parameter weight has a sparse gradient", [](int, auto pg) {
    torch::nn::Embedding emb(torch::nn::EmbeddingOptions(10, 4).sparse(true));
    DistributedDataParallel ddp(emb, pg);
    ddp->forward(torch::tensor({1, 2, 3})).sum().backward();
  });
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
}  // namespace dpx
