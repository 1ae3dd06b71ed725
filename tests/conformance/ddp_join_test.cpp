// distributed_test.py: uneven inputs under join().
#include "conformance/conformance.h"
#include "conformance/models.h"

namespace dpx::conformance {
namespace {

// One DDPUnevenTestInput: a model (made afresh for every run), how it is called, how often it
// synchronises, and whether ranks stop at the first exhausted one.
struct UnevenCase {
  std::string name;
  int sync_interval = 1;
  bool throw_on_early_termination = false;
  bool find_unused = false;
  std::function<void(DdpBase&)> hook;  // empty: none
};

// A model of the case behind DDP, and one training step on it (loss = output.sum()).
struct UnevenModel {
  std::shared_ptr<DdpBase> ddp;
  std::function<at::Tensor()> loss;
};

template <typename Net, typename Call>
UnevenModel wrap(Rank& r, Net net, const UnevenCase& c, Call call) {
  net->to(r.device);
  DistributedDataParallelOptions o;
  o.bucket_cap_mb = 1;
  o.find_unused_parameters = c.find_unused;
  auto ddp = std::make_shared<DistributedDataParallelImpl<typename Net::ContainedType>>(
      net.ptr(), r.pg, o);
  if (c.hook) c.hook(*ddp);
  UnevenModel m;
  m.ddp = ddp;
  m.loss = [ddp, call] { return call(*ddp).sum(); };
  return m;
}

UnevenModel make_model(Rank& r, const UnevenCase& c) {
  const auto dev = r.device;
  const int rank = r.rank;
  if (c.name == "batch_norm_net") {
    return wrap(r, BatchNormNet(), c, [dev](auto& d) { return d.forward(torch::ones({1, 2}, dev)); });
  }
  if (c.name == "unjoined_rank_with_unused_params_model" ||
      c.name == "joined_rank_with_unused_params_model") {
    const int unused_rank = c.name[0] == 'u' ? 1 : 0;
    return wrap(r, UnusedParamModule(unused_rank), c,
                [dev, rank](auto& d) { return d.forward(torch::ones({1, 2}, dev), rank); });
  }
  torch::manual_seed(0);  // small_model, with or without a hook
  torch::nn::Linear small(torch::nn::LinearOptions(1000, 1000).bias(false));
  return wrap(r, small, c, [dev](auto& d) { return d.forward(torch::ones({1, 1000}, dev)); });
}

// _run_uneven_inputs_test: rank r trains mapping[r] iterations inside join (no_sync except every
// sync_interval-th), stepping by p += grad, grad = None. Without throw_on_early_termination every
// rank ends with the same model; with it, every rank stops after the fewest iterations, the early
// ones with "Rank R exhausted all inputs", the others "Detected at least one rank that exhausted
// inputs.".
void run_uneven(Rank& r, const UnevenCase& c, const std::vector<int>& mapping) {
  SCOPED_TRACE(c.name + ", sync every " + std::to_string(c.sync_interval) +
               (c.throw_on_early_termination ? ", throwing" : "") + ", iterations " +
               std::to_string(mapping[0]) + "/" + std::to_string(mapping.back()));
  auto m = make_model(r, c);
  auto& ddp = *m.ddp;
  const int num_iters = mapping[r.rank];
  const int min_iters = *std::min_element(mapping.begin(), mapping.end());
  int total = 0;
  std::string error;
  JoinOptions jo;
  jo.throw_on_early_termination = c.throw_on_early_termination;
  try {
    ddp.join([&] {
      for (int i = 0; i < num_iters; ++i) {
        std::optional<DdpBase::NoSyncGuard> no_sync;
        if (i % c.sync_interval != 0) no_sync.emplace(&ddp);
        m.loss().backward();
        torch::NoGradGuard no_grad;
        for (auto& p : ddp.parameters()) {
          if (!p.grad().defined()) continue;
          p.add_(p.grad());
          p.mutable_grad() = at::Tensor();
        }
        ++total;
      }
    }, jo);
  } catch (const DistributedError& e) {
    error = e.what();
  }
  if (c.throw_on_early_termination) {
    const std::string want = num_iters == min_iters
                                 ? "Rank " + std::to_string(r.rank) + " exhausted all inputs"
                                 : "Detected at least one rank that exhausted inputs.";
    EXPECT_NE(error.find(want), std::string::npos) << "got: '" << error << "'";
    EXPECT_EQ(total, min_iters);
    return;
  }
  EXPECT_EQ(error, "");
  EXPECT_GE(total, min_iters);
  expect_same_on_every_rank(r, flat(ddp), "the parameters after join");
}

std::vector<UnevenCase> uneven_cases() {
  std::vector<UnevenCase> base = {
      {"batch_norm_net"},
      {"small_model"},
      {"unjoined_rank_with_unused_params_model", 1, false, true},
      {"joined_rank_with_unused_params_model", 1, false, true},
      {"small_model_allreduce_hook", 1, false, false,
       [](DdpBase& d) { d.register_comm_hook(std::any(), hooks::allreduce_hook); }},
      {"small_model_power_sgd_hook", 1, false, false, [](DdpBase& d) {
         hooks::PowerSGDOptions o;
         o.matrix_approximation_rank = 1;
         o.start_powersgd_iter = 1;
         o.warm_start = false;
         o.use_error_feedback = false;
         d.register_comm_hook(std::make_shared<hooks::PowerSGDState>(o), hooks::powersgd_hook);
       }}};
  std::vector<UnevenCase> all = base;
  for (std::size_t i = 0; i < base.size(); ++i) {
    all.push_back(base[i]);
    all.back().sync_interval = static_cast<int>(i) + 2;
  }
  for (const auto& c : base) {
    all.push_back(c);
    all.back().throw_on_early_termination = true;
  }
  return all;
}

// PyTorch's iteration mappings: the first `early` ranks get `baseline` iterations (ranks > 0 of
// them offset / 2 more), the rest baseline + offset; baseline 0 means a rank that never trains.
std::vector<std::vector<int>> iteration_mappings(int world) {
  std::vector<std::vector<int>> out;
  std::vector<int> uneven_ranks = {1};
  if (world > 2) uneven_ranks.push_back(2);
  for (int early : uneven_ranks) {
    for (int baseline : {0, 5}) {
      for (int offset : {2, 3, 10}) {
        std::vector<int> m(world, baseline + offset);
        for (int r = 0; r < early; ++r) m[r] = baseline + (r > 0 ? offset / 2 : 0);
        out.push_back(m);
      }
    }
  }
  return out;
}

// test_ddp_uneven_inputs on 3 ranks, without its large convolutional model (CPU time) and
// resnet50 (torchvision): 18 cases times 12 iteration mappings.
TEST_P(DistributedTest, test_ddp_uneven_inputs) {
  run(3, [](Rank& r) {
    for (const auto& c : uneven_cases()) {
      for (const auto& mapping : iteration_mappings(r.world)) run_uneven(r, c, mapping);
    }
  }, {std::chrono::seconds(240)});
}

// test_ddp_join_model_equivalence: rank r trains 2 (r + 1) iterations of a bias-free Linear on
// the same input with lr 0.03 * world inside join; the result is a local model trained for the
// sum of the iterations with lr 0.03 (the gradient of sum(W x) does not depend on W).
TEST_P(DistributedTest, test_ddp_join_model_equivalence) {
  run(2, [](Rank& r) {
    torch::manual_seed(0);
    torch::nn::Linear model(torch::nn::LinearOptions(10, 10).bias(false));
    const auto inp = torch::rand({3, 10}).to(r.device);
    torch::nn::Linear local(torch::nn::LinearOptions(10, 10).bias(false));
    {
      torch::NoGradGuard no_grad;
      local->weight.copy_(model->weight);
    }
    model->to(r.device);
    local->to(r.device);
    int local_iters = 0;
    for (int i = 0; i < r.world; ++i) local_iters += 2 * (i + 1);
    torch::optim::SGD local_opt(local->parameters(), 0.03);
    for (int i = 0; i < local_iters; ++i) {
      local_opt.zero_grad();
      local(inp).sum().backward();
      local_opt.step();
    }
    DistributedDataParallel net(model, r.pg);
    torch::optim::SGD opt(model->parameters(), 0.03 * r.world);
    net->join([&] {
      for (int i = 0; i < 2 * (r.rank + 1); ++i) {
        opt.zero_grad();
        net(inp).sum().backward();
        opt.step();
      }
    });
    EXPECT_TRUE(torch::allclose(local->weight.cpu(), model->weight.cpu(), 1.3e-6, 1e-5))
        << (local->weight - model->weight).abs().max();
  });
}

}  // namespace
}  // namespace dpx::conformance
