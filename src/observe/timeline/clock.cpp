// Aligns a rank's timeline clock with rank 0's through the store.
//
// Note [Timeline clocks]
// Ranks on one host share the steady clock, ranks on other hosts do not. Each rank r > 0 asks rank
// 0 for its time kRounds times, in turn:
//  1. r sets ".../r/k/ask" and notes t1; rank 0, waiting for that key, sets ".../r/k/now" to
//     its clock; r, waiting for that key, notes t2 and reads rank 0's time t0.
//  2. The offset estimate is t0 - (t1 + t2) / 2; the round with the shortest t2 - t1 wins, as
//     its error is at most half of that round trip (a few hundred microseconds here).
// Rank 0 serves one rank after the other, so a rank's first round may include waiting for its
// turn; later rounds are answered at once. Costs W * kRounds store round trips, once per job.
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <limits>
#include <mutex>

#include "dpx/store/store.h"
#include "dpx/observe/timeline.h"
#include "observe/timeline/recorder.h"

namespace dpx::timeline {
namespace {

constexpr int kRounds = 5;

double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

std::string key(int call, int rank, int round, const char* what) {
  return "dpx_timeline/" + std::to_string(call) + "/" + std::to_string(rank) + "/" +
         std::to_string(round) + "/" + what;
}

}  // namespace

double align_clock(Store& store, int rank, int world_size) {
  static std::atomic<int> calls{0};
  const int call = calls.fetch_add(1);  // every rank aligns as often, so the keys agree
  double offset = 0;
  if (rank == 0) {
    for (int r = 1; r < world_size; ++r) {
      for (int k = 0; k < kRounds; ++k) {
        store.wait({key(call, r, k, "ask")});
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.3f", now_us());
        store.set(key(call, r, k, "now"), buf);
      }
    }
  } else {
    double best_rtt = std::numeric_limits<double>::max();
    for (int k = 0; k < kRounds; ++k) {
      const double t1 = now_us();
      store.set(key(call, rank, k, "ask"), "1");
      const std::string theirs = store.get(key(call, rank, k, "now"));
      const double t2 = now_us();
      if (t2 - t1 < best_rtt) {
        best_rtt = t2 - t1;
        offset = std::stod(theirs) - (t1 + t2) / 2;
      }
    }
  }
  auto& rec = detail::Recorder::get();
  std::lock_guard<std::mutex> lock(rec.mutex_);
  rec.offset_us_ = offset;
  return offset;
}

}  // namespace dpx::timeline
