// distributed_test.py: models whose graph changes between iterations (find_unused_parameters,
// static_graph) and the error texts when DDP is not told; models that differ across ranks.
#include "conformance/conformance.h"
#include "conformance/models.h"

namespace dpx::conformance {
namespace {

// PyTorch's substrings of the unfinished-reduction error (distributed_test.py's ddp_*_str).
const char* kPrevReductionUnfinished = "Expected to have finished reduction in the prior iteration";
const char* kRecommendFindUnused = "passing the keyword argument `find_unused_parameters=True`";
const char* kFindUnusedEnabled = "Since `find_unused_parameters=True` is enabled";
const char* kOutputsNotUsedInLoss = "`forward` function outputs participate in calculating loss";
const char* kSuggestDebugMode =
    "set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL";

// 6 iterations alternating a random input (lin2 unused everywhere) and ones (lin2 used where
// `rank_allows`), with find_unused_parameters. PyTorch reads the reducer's used map ([W, 0] and
// [W, W] or [W, 1]); dpx has no such accessor, so the same facts are read from what they decide:
// the count of parameters this rank's forward left unused (DdpStats), and lin2's gradient, which
// every rank holds and which is equal on every rank as soon as one rank used lin2.
void control_flow_iterations(Rank& r, bool rank_allows) {
  torch::manual_seed(0);
  ControlFlowToyModel net;
  net->to(r.device);
  DistributedDataParallelOptions o;
  o.find_unused_parameters = true;
  DistributedDataParallel ddp(net, r.pg, o);
  torch::manual_seed(3);
  const auto random_input = torch::randn({20, 10}).to(r.device);
  const auto ones_input = torch::ones({20, 10}).to(r.device);
  for (int i = 0; i < 6; ++i) {
    const bool ones = i % 2 == 1;
    ddp(ones ? ones_input : random_input, rank_allows).sum().backward();
    EXPECT_EQ(ddp->stats().unused_parameters, ones && rank_allows ? 0 : 1) << "iteration " << i;
    if (ones) {
      ASSERT_TRUE(net->lin2->weight.grad().defined()) << "iteration " << i;
      expect_same_on_every_rank(r, net->lin2->weight.grad(), "lin2's gradient");
    }
  }
}

// The second part of both control-flow cases: without find_unused_parameters, the second
// iteration (lin2 unused) fails with PyTorch's texts.
void unused_without_find_unused(Rank& r, bool rank_allows) {
  torch::manual_seed(0);
  ControlFlowToyModel net;
  net->to(r.device);
  DistributedDataParallel ddp(net, r.pg);
  torch::manual_seed(3);
  const auto random_input = torch::randn({20, 10}).to(r.device);
  ddp(random_input, rank_allows).sum().backward();
  try {
    ddp(random_input, rank_allows).sum().backward();
    ADD_FAILURE() << "DDP error not raised";
  } catch (const c10::Error& e) {
    const std::string msg = e.what();
    for (const std::string s : {std::string(kPrevReductionUnfinished), std::string(kRecommendFindUnused),
                                std::string(kOutputsNotUsedInLoss), std::string(kSuggestDebugMode),
                                "Parameter indices which did not receive grad for rank " +
                                    std::to_string(r.rank) + ": 1"}) {
      EXPECT_NE(msg.find(s), std::string::npos) << "Expected " << s << " to be in " << msg;
    }
    EXPECT_EQ(msg.find(kFindUnusedEnabled), std::string::npos) << msg;
  }
}

TEST_P(DistributedTest, test_ddp_control_flow_same_across_ranks) {
  run(2, [](Rank& r) {
    control_flow_iterations(r, /*rank_allows=*/true);
    unused_without_find_unused(r, true);
  });
}

TEST_P(DistributedTest, test_ddp_control_flow_different_across_ranks) {
  run(2, [](Rank& r) {
    control_flow_iterations(r, /*rank_allows=*/r.rank == 1);
    unused_without_find_unused(r, r.rank == 1);
  });
}

// In DETAIL mode the error names the parameter too (PyTorch's with_dist_debug_levels variant).
TEST_P(DistributedTest, test_ddp_control_flow_same_across_ranks_debug_detail) {
  run(2, [](Rank& r) {
    // For this case only: under mpirun the process goes on to the next cases.
    ::setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL", 1);
    struct Unset {
      ~Unset() { ::unsetenv("TORCH_DISTRIBUTED_DEBUG"); }
    } unset;
    torch::manual_seed(0);
    ControlFlowToyModel net;
    net->to(r.device);
    DistributedDataParallel ddp(net, r.pg);
    const auto x = torch::randn({20, 10}).to(r.device);
    ddp(x).sum().backward();
    try {
      ddp(x).sum().backward();
      ADD_FAILURE() << "DDP error not raised";
    } catch (const c10::Error& e) {
      const std::string needle =
          "did not receive grad for rank " + std::to_string(r.rank) + ": lin2.weight";
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(kSuggestDebugMode), std::string::npos) << e.what();
    }
  });
}

// test_invalid_static_graph: a parameter unused in the first iteration and used in the second
// fails in that backward; the same model then fails at its next forward, whose prior reduction
// never finished (PyTorch's test reuses the model, and so does this one).
TEST_P(DistributedTest, test_invalid_static_graph) {
  run(2, [](Rank& r) {
    const auto random_input = torch::randn({20, 10}).to(r.device);
    const auto ones_input = torch::ones({20, 10}).to(r.device);
    torch::manual_seed(0);
    ControlFlowToyModel net;
    net->to(r.device);
    DistributedDataParallelOptions o;
    o.static_graph = true;
    DistributedDataParallel ddp(net, r.pg, o);
    auto expect_error = [&](bool ones_first, const std::string& text) {
      try {
        for (int i = 0; i < 2; ++i) {
          const bool ones = (i % 2 == 0) == ones_first;
          ddp(ones ? ones_input : random_input).sum().backward();
        }
        ADD_FAILURE() << "no error; expected " << text;
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    expect_error(false, "Your training graph has changed in this iteration");
    expect_error(true,
                 "Expected to have finished reduction in the prior iteration before starting a "
                 "new one. This error indicates that your training graph has changed in this "
                 "iteration, e.g., one parameter is used in first iteration, but then got unused "
                 "in the second iteration. this is not compatible with static_graph set to "
                 "True.\nParameter indices which did not receive grad for");
  });
}

// EmbeddingNetDifferentParams: rank 0 (or `wide`) has 500-wide embeddings, the others 50;
// `extra` adds lin2.
struct EmbeddingNetImpl : torch::nn::Module {
  EmbeddingNetImpl(bool wide, bool extra) {
    const int dim = wide ? 500 : 50;
    embedding = register_module("embedding", torch::nn::Embedding(10, dim));
    lin = register_module("lin", torch::nn::Linear(dim, 1));
    if (extra) register_module("lin2", torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return lin(embedding(x)); }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Linear lin{nullptr};
};
TORCH_MODULE(EmbeddingNet);

// PyTorch asks only that some rank catch the error; dpx makes every rank fail, at construction,
// with the same verdict.
void every_rank_refuses(Rank& r, EmbeddingNet net, const std::string& text) {
  net->to(r.device);
  try {
    DistributedDataParallel ddp(net, r.pg);
    ADD_FAILURE() << "DDP accepted models that differ across ranks";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST_P(DistributedTest, test_ddp_model_diff_shape_across_ranks) {
  run(2, [](Rank& r) {
    every_rank_refuses(r, EmbeddingNet(r.rank == 0, false), "appear");
  });
}

TEST_P(DistributedTest, test_ddp_model_diff_num_params_across_ranks) {
  run(2, [](Rank& r) {
    const bool diff = r.rank == 1;
    every_rank_refuses(r, EmbeddingNet(diff || r.rank == 0, diff),
                       "DDP expects same model across all ranks");
  });
}

}  // namespace
}  // namespace dpx::conformance
