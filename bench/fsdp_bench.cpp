// dpx-bench fsdp: fully_shard against DDP on one model, a stack of Linear units trained with
// Adam: the step time of each, fully_shard with and without prefetch (Note [Prefetch]). Runs as
// one worker of an env:// job; rank 0 prints. The three configurations alternate within each
// round (this machine is noisy); a step's time is its slowest rank's; medians are reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "dpx/dpx.h"

namespace dpx::bench::fsdp_bench {
namespace {

struct FsdpArgs : CompareOptions {
  int width = 1024;
  int units = 8;
  int batch = 32;
};

struct StackImpl : torch::nn::Module {
  StackImpl(int width, int units) {
    for (int i = 0; i < units; ++i) {
      layers.emplace_back(register_module("layer" + std::to_string(i),
                                          torch::nn::Linear(width, width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = torch::relu(l(x));
    return x;
  }
  std::vector<FSDPModule<torch::nn::LinearImpl>> layers;
};
TORCH_MODULE(Stack);

// One configuration: its own model, optimizer and forward.
struct Trainer {
  Stack net{nullptr};
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::unique_ptr<torch::optim::Adam> opt;

  double step(ProcessGroup& pg, const torch::Tensor& x) {
    return slowest_rank_seconds(pg, [&] {
      opt->zero_grad();
      forward(x).square().mean().backward();
      opt->step();
    });
  }
};

Trainer make_ddp(const FsdpArgs& a, const std::shared_ptr<ProcessGroup>& pg) {
  Trainer t;
  torch::manual_seed(0);
  t.net = Stack(a.width, a.units);
  auto ddp = std::make_shared<DistributedDataParallelImpl<StackImpl>>(t.net.ptr(), pg);
  t.forward = [ddp](const torch::Tensor& x) { return ddp->forward(x); };
  t.opt = std::make_unique<torch::optim::Adam>(t.net->parameters(), 1e-4);
  return t;
}

Trainer make_fsdp(const FsdpArgs& a, const std::shared_ptr<ProcessGroup>& pg, bool prefetch) {
  Trainer t;
  torch::manual_seed(0);
  t.net = Stack(a.width, a.units);
  FullyShardOptions options;
  options.forward_prefetch = options.backward_prefetch = prefetch;
  for (auto& l : t.net->layers) fully_shard(l, pg, options);
  auto model = fully_shard(t.net, pg, options);
  t.forward = [model](const torch::Tensor& x) mutable { return model(x); };
  t.opt = std::make_unique<torch::optim::Adam>(t.net->parameters(), 1e-4);
  return t;
}

int run(const FsdpArgs& a) {
  auto pg = join_job(a);
  std::vector<Trainer> trainers;
  trainers.push_back(make_ddp(a, pg));
  trainers.push_back(make_fsdp(a, pg, /*prefetch=*/true));
  trainers.push_back(make_fsdp(a, pg, /*prefetch=*/false));
  auto x = torch::randn({a.batch, a.width}) + pg->rank();
  for (auto& t : trainers) t.step(*pg, x);  // Adam's state, the first all-gathers' order
  std::vector<std::function<double()>> steps;
  for (auto& t : trainers) steps.push_back([&t, &pg, &x] { return t.step(*pg, x); });
  const auto seconds = alternate(a, steps);
  if (pg->rank() == 0) {
    std::printf("# dpx-bench fsdp: %d Linear(%d, %d) units, batch %d a rank, Adam, backend %s, "
                "%d ranks, %d threads each\n", a.units, a.width, a.width, a.batch,
                pg->backend().c_str(), pg->size(), a.threads);
    print_step_times({seconds[0], seconds[1]}, "DDP", "fully_shard (prefetch)");
    print_step_times({seconds[0], seconds[2]}, "DDP", "fully_shard (no prefetch)");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("fsdp", "fully_shard against DDP: step time, with and without prefetch",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<FsdpArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--width", a->width, "units' width (default 1024)")
                          ->check(at_least(1));
                      app.add_option("--units", a->units, "Linear units (default 8)")
                          ->check(at_least(1));
                      app.add_option("--batch", a->batch, "samples a rank (default 32)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::fsdp_bench
