// dpx-bench timeline: what one timeline event costs the thread that records it, on and off.
// A DDP step records 4 + 2 x buckets events plus the caller's scopes (docs/timeline.md); this
// cost times that count, against the step time, is the timeline's overhead, measured without
// the noise of a whole training step (which `dpx-bench ddp --configs ddp2,ddp2-timeline` also
// measures end to end).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/command.h"
#include "dpx/observe/timeline.h"

namespace dpx::bench::timeline_bench {
namespace {

struct TimelineArgs {
  int events = 100000;  // per round; 2 x rounds x events stays below the recorder's 2^20
  int rounds = 5;
};

// Median nanoseconds per call of `fn` over the rounds.
template <typename F>
double ns_per_call(const TimelineArgs& a, F fn) {
  std::vector<double> per;
  for (int r = 0; r < a.rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.events; ++i) fn();
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
    per.push_back(d.count() / a.events);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

int run(const TimelineArgs& a) {
  auto args = std::make_shared<const std::string>("{\"bucket\":0,\"bytes\":4096}");
  auto record = [&] {
    const auto t = timeline::Clock::now();
    timeline::record("allreduce", "comm", t, t, args);
  };
  auto scope = [] { timeline::Scope s("optimizer.step"); };
  const double off_record = ns_per_call(a, record), off_scope = ns_per_call(a, scope);
  timeline::start("dpx-bench-timeline", 0);
  const double on_record = ns_per_call(a, record), on_scope = ns_per_call(a, scope);
  timeline::stop();  // in memory only: nothing is written
  std::printf("dpx-bench timeline --events %d --rounds %d (median ns per call)\n", a.events,
              a.rounds);
  std::printf("| call | timeline off | timeline on |\n|---|---:|---:|\n");
  std::printf("| record() with a bucket's args, incl. a clock read | %.1f | %.1f |\n",
              off_record, on_record);
  std::printf("| Scope (two clock reads) | %.1f | %.1f |\n", off_scope, on_scope);
  return 0;
}

const RegisterCommand kRegister("timeline", "cost of one timeline event, on and off",
                                [](CLI::App& app) -> Run {
                                  auto args = std::make_shared<TimelineArgs>();
                                  app.add_option("--events", args->events,
                                                 "calls per round (default 100000)")
                                      ->check(at_least(1));
                                  app.add_option("--rounds", args->rounds, "rounds (default 5)")
                                      ->check(at_least(1));
                                  return [args](const std::vector<std::string>&) {
                                    return run(*args);
                                  };
                                });

}  // namespace
}  // namespace dpx::bench::timeline_bench
