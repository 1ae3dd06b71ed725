// distributed_test.py: DDP against one process on the whole batch, and gradient accumulation
// with no_sync().
#include "conformance/conformance.h"
#include "conformance/models.h"

namespace dpx::conformance {
namespace {

// PyTorch's assertEqual tolerances for float32.
constexpr double kRtol = 1.3e-6, kAtol = 1e-5;

bool close(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::allclose(a.cpu(), b.cpu(), kRtol, kAtol);
}

// Two copies of Net with the same weights on `device`.
std::pair<Net, Net> twin_nets(at::Device device) {
  torch::manual_seed(0);
  Net a;
  torch::manual_seed(0);
  Net b;
  a->to(device);
  b->to(device);
  return {a, b};
}

// _model_step_with_zero_grad: p += grad, then the gradient is zeroed in place.
void step_and_zero(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    p.add_(p.grad());
    p.mutable_grad().zero_();
  }
}

// _test_DistributedDataParallelCPU: 5 iterations of Net under DDP (2 samples per rank, MSE)
// against Net on the whole batch; the parameters agree after every step.
void ddp_matches_one_process(Rank& r, bool grad_is_view) {
  auto [base, local] = twin_nets(r.device);
  DistributedDataParallelOptions o;
  o.gradient_as_bucket_view = grad_is_view;
  DistributedDataParallel ddp(local, r.pg, o);
  const int local_bs = 2, global_bs = local_bs * r.world;
  torch::manual_seed(1);
  auto input = torch::randn({global_bs, 2}).to(r.device);
  auto target = torch::randn({global_bs, 4}).to(r.device);
  for (int idx = 0; idx < 5; ++idx) {
    torch::mse_loss(base(input), target).backward();
    const auto part = torch::indexing::Slice(r.rank * local_bs, (r.rank + 1) * local_bs);
    torch::mse_loss(ddp(input.index({part})), target.index({part})).backward();
    step_and_zero(*base);
    step_and_zero(*ddp);
    const auto want = base->parameters(), got = local->parameters();
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(close(want[i], got[i])) << "iteration " << idx << ", parameter " << i;
    }
    torch::manual_seed(1337 + idx);
    const auto perm = torch::randperm(global_bs).to(r.device);
    input = input.index_select(0, perm);
  }
}

TEST_P(DistributedTest, test_DistributedDataParallelCPU) {
  run(2, [](Rank& r) { ddp_matches_one_process(r, /*grad_is_view=*/false); });
}

TEST_P(DistributedTest, test_DistributedDataParallelCPU_grad_is_view) {
  run(2, [](Rank& r) { ddp_matches_one_process(r, /*grad_is_view=*/true); });
}

// A module without parameters that require a gradient is refused.
TEST_P(DistributedTest, test_DistributedDataParallel_requires_grad) {
  run(2, [](Rank& r) {
    auto empty = std::make_shared<torch::nn::Module>();
    EXPECT_THROW(DistributedDataParallel<torch::nn::Module>(empty, r.pg), c10::Error);
  });
}

// _test_accumulate_gradients_no_sync: one sample per rank, tiny buckets; even iterations
// accumulate under no_sync (gradients differ from the whole batch's), odd ones synchronise
// (they agree). A forward under no_sync without grad mode accumulates nothing.
void accumulate_no_sync(Rank& r, int iterations, bool grad_is_view, bool allreduce_hook) {
  auto [base, local] = twin_nets(r.device);
  DistributedDataParallelOptions o;
  o.bucket_cap_mb = 0.001;
  o.gradient_as_bucket_view = grad_is_view;
  DistributedDataParallel ddp(local, r.pg, o);
  if (allreduce_hook) ddp->register_comm_hook(std::any(), hooks::allreduce_hook);
  torch::manual_seed(2);
  auto input = torch::randn({r.world, 2}).to(r.device);
  auto target = torch::randn({r.world, 4}).to(r.device);
  {
    torch::NoGradGuard no_grad;
    auto guard = ddp->no_sync();
    ddp(input);
  }
  auto step = [](auto& model, const at::Tensor& x, const at::Tensor& y) {
    torch::mse_loss(model(x), y).backward();
  };
  for (int it = 0; it < iterations; ++it) {
    step(base, input, target);
    const auto mine = torch::indexing::Slice(r.rank, r.rank + 1);
    if (it % 2 == 0) {
      auto guard = ddp->no_sync();
      step(ddp, input.index({mine}), target.index({mine}));
    } else {
      step(ddp, input.index({mine}), target.index({mine}));
    }
    const auto want = base->parameters(), got = local->parameters();
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!want[i].requires_grad()) continue;
      if (it % 2 == 0) {
        EXPECT_FALSE(close(want[i].grad(), got[i].grad())) << "iteration " << it << ", param " << i;
      } else {
        EXPECT_TRUE(close(want[i].grad(), got[i].grad())) << "iteration " << it << ", param " << i;
      }
    }
    torch::manual_seed(1337 + it);
    input = input.index_select(0, torch::randperm(r.world).to(r.device));
  }
}

TEST_P(DistributedTest, test_accumulate_gradients_no_sync) {
  run(2, [](Rank& r) { accumulate_no_sync(r, 2, false, false); });
}

TEST_P(DistributedTest, test_accumulate_gradients_no_sync_grad_is_view) {
  run(2, [](Rank& r) { accumulate_no_sync(r, 2, true, false); });
}

TEST_P(DistributedTest, test_accumulate_gradients_no_sync_allreduce_hook) {
  run(2, [](Rank& r) { accumulate_no_sync(r, 4, false, true); });
}

// SimpleConditionalModel: rank 0 uses nn1 then nn2, the others nn3 then nn4, alternating per
// forward.
struct ConditionalImpl : torch::nn::Module {
  explicit ConditionalImpl(int rank) : rank(rank) {
    for (const char* name : {"nn1", "nn2", "nn3", "nn4"}) {
      layers.push_back(register_module(name, torch::nn::Linear(1, 1)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int pass = state;
    state = 1 - state;
    return layers[(rank == 0 ? 0 : 2) + pass](x);
  }
  int rank, state = 0;
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Conditional);

// test_grads_same_across_ranks_with_no_sync: with find_unused_parameters, a parameter used
// only under no_sync on one rank still reaches every rank's gradient at the synchronised step.
TEST_P(DistributedTest, test_grads_same_across_ranks_with_no_sync) {
  run(2, [](Rank& r) {
    Conditional net(r.rank);
    net->to(r.device);
    DistributedDataParallelOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(net, r.pg, o);
    for (int micro = 0; micro < 2; ++micro) {
      std::optional<DdpBase::NoSyncGuard> guard;
      if (micro == 0) guard.emplace(ddp.get());
      auto input = torch::rand({1}).to(r.device);
      torch::mse_loss(ddp(input), torch::rand({1}).to(r.device)).backward();
    }
    std::vector<at::Tensor> grads;
    for (const auto& p : ddp->parameters()) {
      ASSERT_TRUE(p.grad().defined()) << "Gradients can't be None for any model parameter.";
      grads.push_back(p.grad().reshape({-1}));
    }
    const auto all = gather(r, torch::cat(grads));
    for (int i = 1; i < r.world; ++i) {
      EXPECT_TRUE(torch::allclose(all[0], all[i])) << "Gradients are not the same for all ranks.";
    }
  });
}

}  // namespace
}  // namespace dpx::conformance
