// dpx-bench dcp: DCP checkpoints of a fully_shard model, a stack of Linear(width, width) units:
// the seconds of dcp_save_state_dict (every rank's file written and synced, .metadata last) and
// of dcp_load_state_dict (each rank its rows), the slowest rank's, each into a fresh directory.
// Runs as one worker of an env:// job; rank 0 prints one line per round and the medians.
// bench/dcp_vs_python.sh alternates it with PyTorch's dcp.save/dcp.load of the same model
// (bench/python/dcp_baseline.py).
#include <torch/torch.h>

#include <cstdio>

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

int run(const DcpArgs& a) {
  auto pg = join_job(a);
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (int i = 0; i < a.units; ++i) net->push_back(torch::nn::Linear(a.width, a.width));
  for (const auto& unit : net->children()) fully_shard(unit, pg);
  fully_shard(net.ptr(), pg);
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
