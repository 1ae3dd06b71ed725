// dpx-bench handwritten: the training step of pytorch/examples' dist-mnist.cpp, which issues one
// asynchronous all-reduce per parameter after backward(), waits for them all and divides,
// against dpx DDP (buckets all-reduced during backward) on the same model, data and group. Runs
// as one worker of an env:// job (dpxrun, bench/run_local.sh); rank 0 prints. The two alternate
// within each round (this machine is noisy); a step lasts as long as its slowest rank, and
// medians are reported with their ratio (docs/performance.md, docs/migrating.md).
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"

namespace dpx::bench::handwritten_bench {
namespace {

struct HandwrittenArgs : CompareOptions {
  std::string model = "distmnist";
  int batch = 32;  // per rank: dist-mnist.cpp's 64 over 2 ranks
};

// The hand-written loop, done right: dist-mnist.cpp divides each gradient while its all-reduce
// may still be running (docs/migrating.md); here the division waits for the sums.
void average_gradients(ProcessGroup& pg, torch::nn::Module& net) {
  std::vector<std::shared_ptr<Work>> works;
  for (auto& p : net.parameters()) works.push_back(pg.allreduce(p.mutable_grad()));
  for (auto& w : works) w->wait();
  for (auto& p : net.parameters()) p.mutable_grad().div_(pg.size());
}

template <typename Net>
void compare(const HandwrittenArgs& a, const std::shared_ptr<ProcessGroup>& group) {
  ProcessGroup& pg = *group;
  torch::manual_seed(0);  // the same weights in both copies and on every rank, as dist-mnist.cpp
  Net hand_net;
  torch::manual_seed(0);
  Net ddp_net;
  DistributedDataParallel ddp(ddp_net, group);
  torch::optim::SGD hand_opt(hand_net->parameters(), 0.01), ddp_opt(ddp->parameters(), 0.01);
  torch::manual_seed(1 + pg.rank());  // each rank its own batch, as a sampler would give it
  auto x = torch::randn({a.batch, 1, 28, 28});
  auto y = torch::randint(10, {a.batch});
  auto loss_of = [&](torch::Tensor out) {
    return torch::nll_loss(torch::log_softmax(out, 1), y);
  };
  auto hand_step = [&] {
    return slowest_rank_seconds(pg, [&] {
      hand_opt.zero_grad();
      loss_of(hand_net->forward(x)).backward();
      average_gradients(pg, *hand_net);
      hand_opt.step();
    });
  };
  auto ddp_step = [&] {
    return slowest_rank_seconds(pg, [&] {
      ddp_opt.zero_grad();
      loss_of(ddp->forward(x)).backward();
      ddp_opt.step();
    });
  };
  for (int s = 0; s < 2; ++s) hand_step(), ddp_step();  // warm-up; DDP rebuilds its buckets
  const auto t = alternate(a, hand_step, ddp_step);
  if (pg.rank() == 0) {
    int64_t numel = 0, tensors = 0;
    for (const auto& p : hand_net->parameters()) numel += p.numel(), ++tensors;
    std::printf("# dpx-bench handwritten: %s model (%lld parameters in %lld tensors), batch %d "
                "per rank, backend %s, %d ranks, %d threads each\n", a.model.c_str(),
                (long long)numel, (long long)tensors, a.batch, pg.backend().c_str(), pg.size(),
                a.threads);
    print_step_times(t, "hand-written", "DDP");
  }
}

int run(const HandwrittenArgs& a) {
  auto pg = join_job(a);
  if (a.model == "cnn") {
    compare<FashionCnn>(a, pg);
  } else {
    compare<DistMnistNet>(a, pg);
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("handwritten",
                    "dist-mnist.cpp's per-parameter all-reduce after backward() against DDP",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<HandwrittenArgs>();
                      add_compare_options(app, *a);
                      app.add_option("--model", a->model,
                                     "distmnist (dist-mnist.cpp's, default) or cnn (1.2 M "
                                     "parameters, dpx-bench ddp's)")
                          ->check(CLI::IsMember({"distmnist", "cnn"}));
                      app.add_option("--batch", a->batch, "samples per rank (default 32)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::handwritten_bench
