// dpx-bench amp: DDP training steps of the Fashion-MNIST CNN of `dpx-bench ddp` in float32
// against the same steps under CPU bfloat16 autocast with a GradScaler (docs/amp.md). Runs as
// one worker of an env:// job; rank 0 prints. The two alternate within each round (this machine
// is noisy); a step lasts as long as its slowest rank, and medians are reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"

namespace dpx::bench::amp_bench {
namespace {

struct AmpArgs : CompareOptions {
  int batch = 64;  // per rank
};

int run(const AmpArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  FashionCnn plain_net, amp_net;
  DistributedDataParallel plain(plain_net, pg), mixed(amp_net, pg);
  torch::optim::SGD plain_opt(plain->parameters(), 0.01), amp_opt(mixed->parameters(), 0.01);
  GradScaler scaler({}, pg);
  torch::manual_seed(1 + pg->rank());
  auto x = torch::randn({a.batch, 1, 28, 28});
  auto y = torch::randint(10, {a.batch});
  auto fp32_step = [&] {
    return slowest_rank_seconds(*pg, [&] {
      plain_opt.zero_grad();
      torch::nn::functional::cross_entropy(plain->forward(x), y).backward();
      plain_opt.step();
    });
  };
  auto amp_step = [&] {
    return slowest_rank_seconds(*pg, [&] {
      amp_opt.zero_grad();
      torch::Tensor loss;
      {
        AutocastGuard autocast({.device_type = at::kCPU, .dtype = at::kBFloat16});
        loss = torch::nn::functional::cross_entropy(mixed->forward(x), y);
      }
      scaler.scale(loss).backward();
      scaler.step(amp_opt);
      scaler.update();
    });
  };
  for (int s = 0; s < 2; ++s) {  // warm-up, and DDP's bucket rebuild after the first step
    fp32_step();
    amp_step();
  }
  const auto t = alternate(a, fp32_step, amp_step);
  if (pg->rank() == 0) {
    std::printf("# dpx-bench amp: Fashion-MNIST CNN, batch %d per rank, backend %s, %d ranks, "
                "%d threads each\n", a.batch, pg->backend().c_str(), pg->size(), a.threads);
    print_step_times(t, "float32", "bf16 autocast + GradScaler");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("amp", "DDP steps under CPU bf16 autocast with GradScaler against float32",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<AmpArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--batch", a->batch, "samples per rank (default 64)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::amp_bench
