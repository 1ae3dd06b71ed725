// dpx-bench allreduce: all-reduce time and bandwidth over a size sweep, nccl-tests style.
// Runs as one worker of an env:// job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or with
// --backend mpi as one rank under mpirun (no store); rank 0 prints. time is the median over iterations of the slowest rank's time; algbw = bytes / time,
// busbw = algbw * 2 (n - 1) / n. Every size is checked once before it is timed. On a GPU, each
// size also shows the time of copying it to host memory and back (copy(us)): the floor under an
// all-reduce staged through host memory, whatever the transport.
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/command.h"
#include "dpx/dpx.h"

namespace dpx::bench::allreduce_bench {
namespace {

struct AllreduceArgs {
  std::int64_t min_bytes = 4;
  std::int64_t max_bytes = 256LL << 20;
  int iters = 0;  // 0: as many as fit in about --seconds per size, within [5, 1000]
  int warmup = 3;
  double seconds = 0.3;
  std::string backend = "auto";
  std::string device = "cpu";  // or cuda: GPU LOCAL_RANK (nccl, or staged when GPUs are shared)
  bool json = false;
};

// Float32 sum all-reduce from min to max bytes (x2 each step); one per rank under
// dpxrun/torchrun, or bench/run_local.sh NPROC dpx-bench allreduce ...
void add_flags(CLI::App& app, AllreduceArgs& a) {
  app.add_option("--min-bytes", a.min_bytes, "smallest size (default 4)")
      ->check(at_least(4));
  app.add_option("--max-bytes", a.max_bytes, "largest size (default 256 MiB)")
      ->check(at_least(4));
  app.add_option("--iters", a.iters, "timed iterations per size; 0: about --seconds' worth")
      ->check(at_least(0));
  app.add_option("--warmup", a.warmup, "untimed iterations per size (default 3)")
      ->check(at_least(0));
  // CLI::Range lets nan through (every comparison with it is false).
  app.add_option("--seconds", a.seconds, "time per size when --iters is 0 (default 0.3)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            double x = 0;
            const bool ok = CLI::detail::lexical_cast(v, x) && x >= 0.001 && x <= 3600;
            return ok ? "" : "expects seconds from 0.001 to 3600, got " + v;
          },
          "SECONDS"));
  app.add_option("--backend", a.backend, "auto, shm, gloo, nccl or mpi (default auto)");
  app.add_option("--device", a.device, "cpu (default) or cuda: GPU LOCAL_RANK")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", a.json, "one JSON document instead of a table");
}

struct Row {
  std::int64_t bytes;
  int iters;
  double us;
  double algbw;
  double busbw;
  bool ok;
  double copy_us = 0;  // GPU only: device-to-host plus host-to-device copy of the same bytes
};

// Every rank all-reduces (rank + 1) and expects world (world + 1) / 2 everywhere.
bool check(ProcessGroup& pg, at::Tensor& t) {
  const int w = pg.size();
  t.fill_(pg.rank() + 1);
  pg.allreduce(t)->wait();
  bool ok = t.eq(w * (w + 1) / 2).all().item<bool>();
  auto all_ok = at::full({1}, ok ? 1 : 0, at::TensorOptions(at::kInt).device(t.device()));
  pg.allreduce(all_ok, {ReduceOp::kMin})->wait();
  return all_ok.item<int>() == 1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median time of t -> pinned host memory -> t, each copy synchronous, as a staged all-reduce
// must at least do once.
double copy_round_trip_us(at::Tensor& t, int iters) {
  auto host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  std::vector<double> times;
  for (int i = 0; i < std::max(iters, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    host.copy_(t);
    t.copy_(host);
    torch::cuda::synchronize(t.device().index());
    times.push_back(seconds_since(start) * 1e6);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Row measure(ProcessGroup& pg, std::int64_t bytes, const AllreduceArgs& a) {
  const auto device = pg.options().device;
  auto t = at::empty({std::max<std::int64_t>(1, bytes / 4)},
                     at::TensorOptions(at::kFloat).device(device));
  Row row{t.numel() * 4, 0, 0, 0, 0, check(pg, t)};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.warmup; ++i) pg.allreduce(t)->wait();
  // Rank 0 decides the count from its warm-up, so all ranks run the same number.
  auto iters = at::full({1}, a.iters, at::TensorOptions(at::kInt).device(device));
  if (a.iters == 0) {
    const double per = seconds_since(t0) / std::max(1, a.warmup);
    iters.fill_(static_cast<int>(std::clamp(a.seconds / std::max(per, 1e-9), 5.0, 1000.0)));
  }
  pg.broadcast(iters, {0})->wait();
  row.iters = iters.item<int>();
  auto times = at::empty({row.iters}, at::kDouble);
  auto* tp = times.data_ptr<double>();
  for (int i = 0; i < row.iters; ++i) {
    auto start = std::chrono::steady_clock::now();
    pg.allreduce(t)->wait();
    tp[i] = seconds_since(start);
  }
  // An iteration lasts as long as its slowest rank. (wait() returns once the device finished.)
  auto slowest = times.to(device);
  pg.allreduce(slowest, {ReduceOp::kMax})->wait();
  times = slowest.cpu();
  const double sec = times.median().item<double>();
  const int n = pg.size();
  row.us = sec * 1e6;
  row.algbw = row.bytes / sec / 1e9;
  row.busbw = row.algbw * 2.0 * (n - 1) / n;
  if (device.is_cuda()) row.copy_us = copy_round_trip_us(t, row.iters);
  return row;
}

// Note [Ring fit]
// The ring model of an all-reduce of S bytes on p ranks is t = 2(p-1) alpha + 2(p-1)/p S / beta
// (docs/scaling.md). alpha is read off the small sizes (the fastest of those up to 4 KiB, where
// bandwidth does not count), beta off the large ones (the median of 2(p-1)/p S / (t - 2(p-1) alpha)
// over sizes from 1 MiB): one straight line through all sizes would let the mid sizes that fit in
// the caches decide the bandwidth. With one rank, or without both kinds of sizes in the sweep,
// there is nothing to fit.
struct RingFit {
  double alpha_us = 0;
  double beta_gbps = 0;
};

RingFit fit_ring(const std::vector<Row>& rows, int p) {
  if (p < 2) return {};
  const double steps = 2.0 * (p - 1);
  double t_small = 0;
  std::vector<double> betas;
  for (const auto& r : rows) {
    if (r.bytes <= 4096 && (t_small == 0 || r.us < t_small)) t_small = r.us;
  }
  const double alpha = t_small / steps;
  for (const auto& r : rows) {
    const double transfer_us = r.us - steps * alpha;
    if (r.bytes >= (1 << 20) && transfer_us > 0) {
      betas.push_back(steps / p * static_cast<double>(r.bytes) / transfer_us / 1e3);  // GB/s
    }
  }
  if (t_small == 0 || betas.empty()) return {};
  std::sort(betas.begin(), betas.end());
  const auto n = betas.size();
  return {alpha, n % 2 ? betas[n / 2] : (betas[n / 2 - 1] + betas[n / 2]) / 2};
}

int run(const AllreduceArgs& a) {
  TORCH_CHECK(a.max_bytes >= a.min_bytes && a.max_bytes <= (1LL << 40), "--max-bytes (",
              a.max_bytes, ") must be from --min-bytes (", a.min_bytes, ") to 1 TiB");
  InitOptions o;
  o.backend = a.backend;
  o.device = cuda::local_device(at::Device(a.device));
  auto pg = init_process_group(o);
  const bool print = pg->rank() == 0;
  const bool gpu = pg->options().device.is_cuda();
  if (print && !a.json) {
    std::printf("# dpx-bench allreduce: backend %s, %d ranks, float32 sum, on %s\n",
                pg->backend().c_str(), pg->size(), pg->options().device.str().c_str());
    std::printf("%12s %7s %12s %10s %10s %6s%s\n", "size(B)", "iters", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "check", gpu ? "     copy(us)   vs copy" : "");
  }
  bool all_ok = true;
  auto rows = nlohmann::ordered_json::array();
  std::vector<Row> measured;
  for (std::int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    const Row r = measure(*pg, bytes, a);
    all_ok = all_ok && r.ok;
    measured.push_back(r);
    if (!print) continue;
    if (a.json) {
      rows.push_back({{"bytes", r.bytes}, {"iters", r.iters}, {"time_us", r.us},
                      {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw}, {"ok", r.ok}});
      if (gpu) rows.back()["copy_us"] = r.copy_us;
    } else {
      std::printf("%12lld %7d %12.2f %11.3f %11.3f %6s", static_cast<long long>(r.bytes),
                  r.iters, r.us, r.algbw, r.busbw, r.ok ? "ok" : "FAIL");
      if (gpu) std::printf(" %12.2f %8.2fx", r.copy_us, r.us / r.copy_us);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  const RingFit fit = fit_ring(measured, pg->size());
  if (print && !a.json && fit.beta_gbps > 0) {
    std::printf("# ring fit (Note [Ring fit]): alpha %.2f us per step, beta %.3f GB/s\n",
                fit.alpha_us, fit.beta_gbps);
  }
  if (print && a.json) {
    const nlohmann::ordered_json doc = {{"benchmark", "allreduce"}, {"backend", pg->backend()},
                                        {"device", pg->options().device.str()},
                                        {"world_size", pg->size()}, {"dtype", "float32"},
                                        {"op", "sum"}, {"results", rows},
                                        {"ring_fit", {{"alpha_us", fit.alpha_us},
                                                      {"beta_gbps", fit.beta_gbps}}}};
    std::printf("%s\n", doc.dump(2).c_str());
  }
  pg->barrier()->wait();
  return all_ok ? 0 : 1;
}

RegisterCommand reg("allreduce", "all-reduce latency and bandwidth, 4 B to 256 MiB (shm, gloo, nccl, mpi)",
                    [](CLI::App& app) -> Run {
                      auto args = std::make_shared<AllreduceArgs>();
                      add_flags(app, *args);
                      return [args](const std::vector<std::string>&) { return run(*args); };
                    });

}  // namespace
}  // namespace dpx::bench::allreduce_bench
