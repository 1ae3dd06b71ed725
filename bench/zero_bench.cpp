// dpx-bench zero: ZeroRedundancyOptimizer against the unsharded optimizer (Adam) on the wide
// MLP of `dpx-bench ddp`: optimizer-state bytes per rank, and the time of optimizer.step().
// Runs as one worker of an env:// job; rank 0 prints. The two optimizers alternate within each
// round (this machine is noisy); a step's time is its slowest rank's, and medians are reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"
#include "dpx/algorithms/zero_redundancy_optimizer.h"

namespace dpx::bench::zero_bench {
namespace {

struct ZeroArgs : CompareOptions {
  int width = 4096;
};

// The bytes of the tensors in an optimizer's state (Adam: exp_avg and exp_avg_sq per parameter).
std::int64_t state_bytes(torch::optim::Optimizer& opt) {
  std::int64_t bytes = 0;
  for (auto& entry : opt.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(entry.second.get())) {
      bytes += adam->exp_avg().nbytes() + adam->exp_avg_sq().nbytes();
      if (adam->max_exp_avg_sq().defined()) bytes += adam->max_exp_avg_sq().nbytes();
    }
  }
  return bytes;
}

double timed_step(ProcessGroup& pg, torch::optim::Optimizer& opt) {
  return slowest_rank_seconds(pg, [&] { opt.step(); });
}

int run(const ZeroArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  WideMlp net(a.width);
  auto params = net->parameters();
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  const auto options = torch::optim::AdamOptions(1e-4);
  torch::optim::Adam plain(params, options);
  ZeroRedundancyOptimizer zero(params, pg, optimizer_factory<torch::optim::Adam>(options));
  plain.step();  // both create their state on the first step
  zero.step();
  const auto t = alternate(a, [&] { return timed_step(*pg, plain); },
                           [&] { return timed_step(*pg, zero); });
  auto bytes = at::full({1}, static_cast<double>(state_bytes(zero.local_optimizer())), at::kDouble);
  pg->allreduce(bytes, {ReduceOp::kMax})->wait();
  if (pg->rank() == 0) {
    std::int64_t numel = 0;
    for (const auto& p : params) numel += p.numel();
    const double unsharded = static_cast<double>(state_bytes(plain));
    std::printf("# dpx-bench zero: Adam, %lld parameters, backend %s, %d ranks, %d threads each\n",
                static_cast<long long>(numel), pg->backend().c_str(), pg->size(), a.threads);
    std::printf("optimizer state per rank: unsharded %.1f MiB, ZeRO (largest shard) %.1f MiB, "
                "ratio %.3f\n", unsharded / (1 << 20), bytes.item<double>() / (1 << 20),
                bytes.item<double>() / unsharded);
    print_step_times(t, "unsharded", "ZeRO");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("zero", "ZeroRedundancyOptimizer against plain Adam: state bytes, step time",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<ZeroArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--width", a->width, "MLP width (default 4096: 25 M params)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::zero_bench
