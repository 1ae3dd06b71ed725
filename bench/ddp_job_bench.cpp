// dpx-bench ddp-job: DDP training steps of the `dpx-bench ddp` models as one rank of a job that
// a launcher started (dpxrun, torchrun, mpirun, srun), over any backend: how the backends
// compare under DDP (bench/ddp_backends.sh runs it under dpxrun and mpirun in turn). `dpx-bench
// ddp` starts its ranks itself, which the mpi backend cannot use (MPI's ranks come from its
// launcher). Rank 0 prints one line: samples/s over every rank, and DDP's communication and
// exposed communication per step (PyTorch's DDP logging fields, over the sampled steps).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "bench/bench_models.h"
#include "bench/compare.h"
#include "dpx/dpx.h"

namespace dpx::bench::ddp_job_bench {
namespace {

struct JobArgs : CompareOptions {
  std::string model = "cnn";
  int batch = 64;  // per rank
  int warmup = 2;
  int mlp_width = 4096;
};

template <typename Model>
int train(Model model, const JobArgs& a) {
  auto pg = join_job(a);
  DistributedDataParallel<typename Model::ContainedType> ddp(model, pg);
  torch::optim::SGD opt(ddp->parameters(), 0.01);
  torch::manual_seed(1 + pg->rank());
  auto x = torch::randn({a.batch, 1, 28, 28});
  auto y = torch::randint(10, {a.batch});
  auto step = [&] {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
    opt.step();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  pg->barrier()->wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) step();
  pg->barrier()->wait();  // the slowest rank's time
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const DdpStats s = ddp->stats();
  if (pg->rank() == 0) {
    std::printf("ddp-job model %s backend %s ranks %d threads %d batch %d steps %d: "
                "samples/s %.1f comm_ms %.3f exposed_ms %.3f\n",
                a.model.c_str(), pg->backend().c_str(), pg->size(), a.threads, a.batch, a.steps,
                static_cast<double>(pg->size()) * a.batch * a.steps / secs,
                s.avg_backward_comm_ms, s.avg_exposed_comm_ms);
  }
  return 0;
}

RegisterCommand reg("ddp-job", "DDP steps as one rank of a launched job, any backend (mpi too)",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<JobArgs>();
                      a->steps = 10;
                      app.add_option("--backend", a->backend, "process group (default auto)");
                      app.add_option("--steps", a->steps, "timed steps (default 10)")
                          ->check(at_least(1));
                      app.add_option("--threads", a->threads, "intra-op threads per rank (1)")
                          ->check(at_least(1));
                      app.add_option("--model", a->model, "cnn (default) or mlp")
                          ->check(CLI::IsMember({"cnn", "mlp"}));
                      app.add_option("--batch", a->batch, "samples per rank and step (64)")
                          ->check(at_least(1));
                      app.add_option("--warmup", a->warmup, "untimed steps (default 2)")
                          ->check(at_least(1));
                      app.add_option("--mlp-width", a->mlp_width, "the MLP's width (4096)")
                          ->check(at_least(1));
                      return [a](const std::vector<std::string>&) {
                        torch::manual_seed(0);
                        return a->model == "cnn" ? train(FashionCnn(), *a)
                                                 : train(WideMlp(a->mlp_width), *a);
                      };
                    });

}  // namespace
}  // namespace dpx::bench::ddp_job_bench
