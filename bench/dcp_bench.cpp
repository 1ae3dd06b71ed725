// dpx-bench dcp: DCP checkpoints of a fully_shard model, a stack of Linear(width, width) units:
// the seconds of dcp_save_state_dict (every rank's file written and synced, .metadata last) and
// of dcp_load_state_dict (each rank its rows), the slowest rank's, each into a fresh directory.
// Runs as one worker of an env:// job; rank 0 prints one line per round and the medians.
// bench/dcp_vs_python.sh alternates it with PyTorch's dcp.save/dcp.load of the same model
// (bench/python/dcp_baseline.py).
// dpx-bench dcp-async: the same model trained with Adam and saved by a DcpCheckpointer: each
// round times the same steps without a save, after a synchronous save, and around an
// asynchronous one (its save() before them, its wait() after): what each save adds to the steps'
// time, and how long the async save() holds training (the copy to host memory).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "bench/compare.h"
#include "dpx/dpx.h"
#include "dpx/runtime/files.h"

namespace dpx::bench::dcp_bench {
namespace {

struct DcpArgs : CompareOptions {
  int width = 2048;
  int units = 8;
  std::string dir;
};

// The stack, each unit and the whole sharded over `pg`: the module, and the handle to call.
struct ShardedStack {
  torch::nn::Sequential net;
  FSDPModule<torch::nn::SequentialImpl> model;
};

ShardedStack sharded_stack(const DcpArgs& a, const std::shared_ptr<ProcessGroup>& pg) {
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (int i = 0; i < a.units; ++i) net->push_back(torch::nn::Linear(a.width, a.width));
  for (const auto& unit : net->children()) fully_shard(unit, pg);
  auto model = fully_shard(net.ptr(), pg);
  return {net, model};
}

int run(const DcpArgs& a) {
  auto pg = join_job(a);
  auto net = sharded_stack(a, pg).net;
  double bytes = 0;
  for (const auto& p : net->parameters()) bytes += static_cast<double>(p.nbytes());
  bytes *= pg->size();  // each rank holds 1/world of every parameter's rows (and writes them)
  std::vector<double> saves, loads;
  for (int r = 0; r < a.rounds; ++r) {
    const std::string dir = a.dir + "/dpx-" + std::to_string(r);
    saves.push_back(slowest_rank_seconds(*pg, [&] { dcp_save_state_dict(*net, dir, pg); }));
    loads.push_back(slowest_rank_seconds(*pg, [&] { dcp_load_state_dict(*net, dir); }));
    pg->barrier()->wait();
    if (pg->rank() == 0) {
      remove_tree(dir);
      std::printf("round %d: save %.3f s, load %.3f s\n", r, saves.back(), loads.back());
    }
  }
  if (pg->rank() == 0) {
    const double gb = bytes / 1e9;
    std::printf("dpx dcp: %d ranks, %.3f GB: save %.3f s (%.2f GB/s), load %.3f s (%.2f GB/s)\n",
                pg->size(), gb, median(saves), gb / median(saves), median(loads),
                gb / median(loads));
  }
  pg->barrier()->wait();
  return 0;
}

struct AsyncArgs : DcpArgs {
  int batch = 16;
};

int run_async(const AsyncArgs& a) {
  auto pg = join_job(a);
  auto [net, model] = sharded_stack(a, pg);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-4));
  const auto x = torch::randn({a.batch, a.width});
  const auto step = [&] {
    adam.zero_grad();
    model(x).pow(2).mean().backward();
    adam.step();
  };
  step();  // Adam's state exists from here: every save below writes it
  // Seconds of `steps` steps, on the slowest rank, with `around` before and `after` after them.
  const auto run_steps = [&](const std::function<void()>& before,
                             const std::function<void()>& after) {
    return slowest_rank_seconds(*pg, [&] {
      before();
      for (int s = 0; s < a.steps; ++s) step();
      after();
    });
  };
  const auto nothing = [] {};
  // What a save costs training: the seconds that the same steps took longer with it.
  std::vector<double> plain, sync_cost, async_cost, holds;
  for (int r = 0; r < a.rounds; ++r) {
    plain.push_back(run_steps(nothing, nothing));
    DcpCheckpointer sync({.directory = a.dir + "/sync-" + std::to_string(r), .keep_last = 1}, pg);
    sync_cost.push_back(run_steps([&] { sync.save(*net, adam, {.step = r}); }, nothing) -
                        plain.back());
    DcpCheckpointer async({.directory = a.dir + "/async-" + std::to_string(r), .keep_last = 1,
                           .async_save = true}, pg);
    double hold = 0;
    async_cost.push_back(run_steps([&] {
                           const auto start = std::chrono::steady_clock::now();
                           async.save(*net, adam, {.step = r});
                           hold = std::chrono::duration<double>(
                                      std::chrono::steady_clock::now() - start).count();
                         }, [&] { async.wait(); }) - plain.back());
    holds.push_back(hold);
    pg->barrier()->wait();
    if (pg->rank() == 0) {
      remove_tree(a.dir + "/sync-" + std::to_string(r));
      remove_tree(a.dir + "/async-" + std::to_string(r));
      std::printf("round %d: %d steps %.3f s; a sync save adds %.3f s, an async one %.3f s (its "
                  "save() held training %.3f s)\n", r, a.steps, plain.back(), sync_cost.back(),
                  async_cost.back(), holds.back());
    }
  }
  if (pg->rank() == 0) {
    std::printf("dpx dcp-async: %d ranks, %d steps of %.3f s: a sync save adds %.3f s, an async "
                "save %.3f s (ratio %.2f); async save() holds training %.3f s\n", pg->size(),
                a.steps, median(plain) / a.steps, median(sync_cost), median(async_cost),
                median(async_cost) / median(sync_cost), median(holds));
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg_async(
    "dcp-async", "DCP training checkpoints: step time with an async save in flight",
    [](CLI::App& app) -> Run {
      auto a = std::make_shared<AsyncArgs>();
      a->steps = 5;
      add_compare_options(app, *a, /*with_steps=*/true);
      app.add_option("--width", a->width, "units' width (default 2048)")->check(at_least(1));
      app.add_option("--units", a->units, "Linear units (default 8)")->check(at_least(1));
      app.add_option("--batch", a->batch, "rows per step (default 16)")->check(at_least(1));
      app.add_option("--dir", a->dir, "where the checkpoints go")->required();
      return [a](const std::vector<std::string>&) { return run_async(*a); };
    });

RegisterCommand reg("dcp", "DCP checkpoints of a fully_shard model: save and load seconds",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<DcpArgs>();
                      add_compare_options(app, *a, /*with_steps=*/false);
                      app.add_option("--width", a->width, "units' width (default 2048)")
                          ->check(at_least(1));
                      app.add_option("--units", a->units, "Linear units (default 8)")
                          ->check(at_least(1));
                      app.add_option("--dir", a->dir, "where the checkpoints go")->required();
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::dcp_bench
