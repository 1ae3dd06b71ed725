// dpx-bench syncbn: DDP training steps of a CNN with BatchNorm layers against the same CNN after
// convert_sync_batchnorm: step time and collectives per step, the cost of synchronised batch
// statistics. Runs as one worker of an env:// job; rank 0 prints. The two alternate within each
// round (this machine is noisy); a step lasts as long as its slowest rank; medians reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "dpx/dpx.h"
#include "dpx/algorithms/sync_batch_norm.h"

namespace dpx::bench::sync_batch_norm_bench {
namespace {

struct SyncBnArgs : CompareOptions {
  int batch = 32;  // per rank
};

// The Fashion-MNIST CNN of `dpx-bench ddp` with a BatchNorm after each layer but the last.
torch::nn::Sequential bn_cnn() {
  using namespace torch::nn;
  return Sequential(Conv2d(Conv2dOptions(1, 32, 3)), BatchNorm2d(32), ReLU(),
                    Conv2d(Conv2dOptions(32, 64, 3)), BatchNorm2d(64), ReLU(),
                    MaxPool2d(MaxPool2dOptions(2)), Flatten(), Linear(9216, 128),
                    BatchNorm1d(128), ReLU(), Linear(128, 10));
}

int run(const SyncBnArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  auto plain_net = bn_cnn();
  torch::manual_seed(0);
  auto sync_net = bn_cnn();
  convert_sync_batchnorm(sync_net.ptr(), pg);
  DistributedDataParallel plain(plain_net, pg), synced(sync_net, pg);
  torch::optim::SGD plain_opt(plain->parameters(), 0.01), sync_opt(synced->parameters(), 0.01);
  torch::manual_seed(1 + pg->rank());
  auto x = torch::randn({a.batch, 1, 28, 28});
  auto y = torch::randint(10, {a.batch});
  // Seconds of the slowest rank; `collectives` is what this step issued.
  auto step = [&](auto& ddp, torch::optim::SGD& opt, std::uint64_t& collectives) {
    return slowest_rank_seconds(*pg, [&] {
      const auto issued = pg->collectives_issued();
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
      opt.step();
      collectives = pg->collectives_issued() - issued;
    });
  };
  std::uint64_t plain_c = 0, sync_c = 0;
  for (int s = 0; s < 2; ++s) {  // warm-up, and DDP's bucket rebuild after the first step
    step(plain, plain_opt, plain_c);
    step(synced, sync_opt, sync_c);
  }
  const auto t = alternate(a, [&] { return step(plain, plain_opt, plain_c); },
                           [&] { return step(synced, sync_opt, sync_c); });
  if (pg->rank() == 0) {
    std::printf("# dpx-bench syncbn: CNN with 3 BatchNorms, batch %d per rank, backend %s, %d "
                "ranks, %d threads each\n", a.batch, pg->backend().c_str(), pg->size(), a.threads);
    std::printf("collectives per step: BatchNorm %llu, SyncBatchNorm %llu\n",
                static_cast<unsigned long long>(plain_c), static_cast<unsigned long long>(sync_c));
    print_step_times(t, "BatchNorm", "SyncBatchNorm");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("syncbn", "DDP with SyncBatchNorm against BatchNorm: step time, collectives",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<SyncBnArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--batch", a->batch, "samples per rank (default 32)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::sync_batch_norm_bench
