// The skeleton of the dpx-bench sub-commands that price one configuration against another in
// one env:// job (amp, fsdp, handwritten, localsgd, powersgd, sparse, syncbn, zero): the common
// flags, the group, the configurations timed in alternation (this machine is noisy, so all see
// the same moments of it), and the step-time line the smoke tests read
// (tests/scripts/bench_ratios.cmake).
#pragma once

#include <ATen/Parallel.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/command.h"
#include "dpx/comm/init.h"
#include "bench/stats.h"
#include "bench/timing.h"

namespace dpx::bench {

struct CompareOptions {
  std::string backend = "auto";
  int rounds = 5;
  int steps = 3;  // timed steps per configuration per round
  int threads = 1;
};

// --backend, --rounds, --threads, and --steps unless the sub-command times whole periods.
inline void add_compare_options(CLI::App& app, CompareOptions& o, bool with_steps = true) {
  app.add_option("--backend", o.backend, "process group (default auto)");
  app.add_option("--rounds", o.rounds, "rounds (default 5)")->check(at_least(1));
  if (with_steps) {
    app.add_option("--steps", o.steps, "timed steps per configuration per round")
        ->check(at_least(1));
  }
  app.add_option("--threads", o.threads, "intra-op threads per rank")->check(at_least(1));
}

// This rank's group in the job, with the intra-op threads asked for.
inline std::shared_ptr<ProcessGroup> join_job(const CompareOptions& o) {
  at::set_num_threads(o.threads);
  InitOptions init;
  init.backend = o.backend;
  return init_process_group(init);
}

struct Alternated {
  std::vector<double> first, second;  // seconds, one per timed call
};

// `rounds` rounds of `steps` calls of each configuration in turn; each call returns seconds. One
// list per configuration, in the order given.
inline std::vector<std::vector<double>> alternate(
    const CompareOptions& o, const std::vector<std::function<double()>>& configs) {
  std::vector<std::vector<double>> seconds(configs.size());
  for (int r = 0; r < o.rounds; ++r) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      for (int s = 0; s < o.steps; ++s) seconds[c].push_back(configs[c]());
    }
  }
  return seconds;
}

// The same for two configurations, `first` and `second`.
inline Alternated alternate(const CompareOptions& o, std::function<double()> first,
                            std::function<double()> second) {
  auto seconds =
      alternate(o, std::vector<std::function<double()>>{std::move(first), std::move(second)});
  return {std::move(seconds[0]), std::move(seconds[1])};
}

// "step time (median of N): <first> x ms, <second> y ms, ratio second/first".
inline void print_step_times(const Alternated& t, const char* first_name,
                             const char* second_name, const char* samples = "") {
  const double a = median(t.first), b = median(t.second);
  std::printf("step time (median of %zu%s): %s %.2f ms, %s %.2f ms, ratio %.3f\n",
              t.first.size(), samples, first_name, a * 1e3, second_name, b * 1e3, b / a);
}

}  // namespace dpx::bench
