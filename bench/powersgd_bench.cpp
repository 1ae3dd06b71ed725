// dpx-bench powersgd: DDP training steps with powersgd_hook against plain DDP on the wide MLP of
// `dpx-bench ddp`: elements sent per step and step time. Runs as one worker of an env:// job;
// rank 0 prints. The two alternate within each round (this machine is noisy); a step lasts as
// long as its slowest rank, and medians are reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"
#include "dpx/algorithms/powersgd.h"

namespace dpx::bench::powersgd_bench {
namespace {

struct PowerSgdArgs : CompareOptions {
  int width = 4096;
  int rank = 1;  // matrix_approximation_rank
  int batch = 64;
};

int run(const PowerSgdArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  WideMlp plain_net(a.width), compressed_net(a.width);
  DistributedDataParallel plain(plain_net, pg), compressed(compressed_net, pg);
  hooks::PowerSGDOptions po;
  po.matrix_approximation_rank = a.rank;
  po.start_powersgd_iter = 2;
  auto state = std::make_shared<hooks::PowerSGDState>(po);
  compressed->register_comm_hook(state, hooks::powersgd_hook);
  torch::optim::SGD plain_opt(plain->parameters(), 0.01), compressed_opt(compressed->parameters(), 0.01);
  auto x = torch::randn({a.batch, 784});
  auto y = torch::randint(10, {a.batch});
  auto step = [&](auto& ddp, torch::optim::SGD& opt) {
    return slowest_rank_seconds(*pg, [&] {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
      opt.step();
    });
  };
  for (int s = 0; s < 3; ++s) {  // warm-up: PowerSGD starts at iteration 2
    step(plain, plain_opt);
    step(compressed, compressed_opt);
  }
  const auto before0 = state->numel_before_compression(), after0 = state->numel_after_compression();
  const auto t = alternate(a, [&] { return step(plain, plain_opt); },
                           [&] { return step(compressed, compressed_opt); });
  if (pg->rank() == 0) {
    const double n = static_cast<double>(t.second.size());
    const double before = (state->numel_before_compression() - before0) / n;
    const double after = (state->numel_after_compression() - after0) / n;
    std::printf("# dpx-bench powersgd: wide MLP (width %d), rank %d, backend %s, %d ranks, "
                "%d threads each\n", a.width, a.rank, pg->backend().c_str(), pg->size(), a.threads);
    std::printf("elements all-reduced per step: plain %.0f, PowerSGD %.0f, ratio %.5f\n", before,
                after, after / before);
    print_step_times(t, "plain", "PowerSGD");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("powersgd", "DDP with powersgd_hook against plain DDP: elements sent, step time",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<PowerSgdArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--width", a->width, "MLP width (default 4096: 25 M params)")
                          ->check(at_least(1));
                      app.add_option("--rank", a->rank, "matrix_approximation_rank (default 1)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::powersgd_bench
