// dpx-bench localsgd: post-local SGD (local steps, parameters averaged every `period` steps)
// against plain DDP on the wide MLP of `dpx-bench ddp`: time per step over whole periods, so
// each sample includes one average. Runs as one worker of an env:// job; rank 0 prints. The two
// alternate within each round (this machine is noisy); medians reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"
#include "dpx/algorithms/local_sgd.h"

namespace dpx::bench::local_sgd_bench {
namespace {

// One timed sample is one whole period (`steps` stays 1).
struct LocalSgdArgs : CompareOptions {
  LocalSgdArgs() { steps = 1; }
  int width = 4096;
  int period = 4;
  int batch = 64;
};

int run(const LocalSgdArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  WideMlp plain_net(a.width), local_net(a.width);
  DistributedDataParallel plain(plain_net, pg), local(local_net, pg);
  constexpr int kWarmup = 2;  // global steps before the local phase
  hooks::PostLocalSGDState state;
  state.start_local_sgd_iter = kWarmup;
  state.post_local_gradient_allreduce = false;
  local->register_comm_hook(state, hooks::post_local_sgd_hook);
  torch::optim::SGD plain_opt(plain->parameters(), 0.01);
  PostLocalSGDOptimizer local_opt(
      std::make_shared<torch::optim::SGD>(local->parameters(), 0.01),
      std::make_shared<PeriodicModelAverager>(a.period, pg, kWarmup));
  torch::manual_seed(1 + pg->rank());
  auto x = torch::randn({a.batch, 784});
  auto y = torch::randint(10, {a.batch});
  // Seconds per step over one period, on the slowest rank.
  auto period = [&](auto& ddp, torch::optim::Optimizer& opt) {
    return slowest_rank_seconds(*pg, [&] {
      for (int s = 0; s < a.period; ++s) {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
        opt.step();
      }
    }) / a.period;
  };
  for (int s = 0; s < kWarmup; ++s) {  // the global phase, then one period each as warm-up
    plain_opt.zero_grad();
    local_opt.zero_grad();
    torch::nn::functional::cross_entropy(plain->forward(x), y).backward();
    torch::nn::functional::cross_entropy(local->forward(x), y).backward();
    plain_opt.step();
    local_opt.step();
  }
  period(plain, plain_opt);
  period(local, local_opt);
  const auto t = alternate(a, [&] { return period(plain, plain_opt); },
                           [&] { return period(local, local_opt); });
  if (pg->rank() == 0) {
    std::printf("# dpx-bench localsgd: wide MLP (width %d), period %d, backend %s, %d ranks, "
                "%d threads each\n", a.width, a.period, pg->backend().c_str(), pg->size(),
                a.threads);
    print_step_times(t, "DDP", "post-local SGD", " periods");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("localsgd", "post-local SGD against DDP: time per step over whole periods",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<LocalSgdArgs>();
                      add_compare_options(app, *a, /*with_steps=*/false);
                      app.add_option("--width", a->width, "MLP width (default 4096: 25 M params)")
                          ->check(at_least(1));
                      app.add_option("--period", a->period, "steps between averages (default 4)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::local_sgd_bench
