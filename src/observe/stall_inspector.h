// The stall inspector: names the ranks that have not arrived at a collective this rank has
// waited on for longer than a threshold (docs/errors.md, "Stalled collectives").
//
// Note [Stall inspector]
// It lives in the ProcessGroup base, so it serves every backend.
//  1. Each public collective call gets the group's next sequence number (1, 2, ...: the same
//     collective has the same number on every rank, as ranks must issue them in one order) and
//     is noted here with its op, size, dtype, the caller's label (DDP: the bucket and its
//     parameters' names) and a weak pointer to its Work: one uncontended lock per call, no
//     allocation, and the time from the kernel's coarse clock (no counter read). The notes
//     are a ring of the last kRing collectives: a Work is let go when its slot is taken again,
//     so a rank issuing millions of small collectives between two ticks holds kRing of them,
//     not millions (the Works' memory stays with their weak pointers).
//  2. A thread of the inspector wakes every threshold / 4 (at most 2 s): it finds the oldest
//     collective still running (from the last one it found, forward) and, when this rank has
//     issued a new one since, publishes "seq op numel dtype" under "dpx_stall/<rank>" in the
//     group's store. Training threads never touch the store. With more than kRing collectives
//     running at once, the oldest it can see is the kRing-th newest.
//  3. When the oldest collective still running is older than the threshold, it reads the
//     other ranks' keys and logs on stderr, in one line, which ranks have not issued that
//     collective yet (and where they are), then again every threshold while it stays stuck.
//     The line also goes to "dpx_stall/report/<rank>" for tools. The wait itself is untouched:
//     it goes on until the group's timeout.
// A rank that arrived less than one tick ago may not be published yet; at a threshold of four
// ticks, the report errs only for ranks that arrive in the very last moment.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dpx/store/store.h"

namespace dpx::detail {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether the collective behind a handle given to issued() has finished. The inspector sits
  // below comm and knows no Work: the process group that starts it says how to ask.
  using IsCompleted = bool (*)(void* work);

  // `device` is the group's: the inspector's thread makes it current before it asks anything
  // (Note [Thread devices] in runtime/cuda/local_device.h).
  StallInspector(std::shared_ptr<Store> store, int rank, int size, std::string where,
                 std::chrono::milliseconds threshold, std::chrono::milliseconds timeout,
                 IsCompleted is_completed, at::Device device);
  ~StallInspector();
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  void issued(std::uint64_t seq, const char* op, const at::Tensor& tensor,
              std::shared_ptr<const std::string> label, std::weak_ptr<void> work);

 private:
  struct Pending {
    std::uint64_t seq = 0;
    const char* op = "";
    std::int64_t numel = 0;
    at::ScalarType dtype = at::kFloat;
    std::shared_ptr<const std::string> label;
    Clock::time_point issued;
    std::weak_ptr<void> work;
  };

  void run();
  // The oldest collective still running; under mutex_.
  std::optional<Pending> oldest_running();
  static std::string describe(const Pending& p);
  void report(const Pending& stuck, Clock::time_point now);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::string where_;
  std::chrono::milliseconds threshold_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds tick_;
  IsCompleted is_completed_;
  at::Device device_;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  static constexpr std::uint64_t kRing = 1024;
  std::vector<Pending> ring_;   // collective seq at ring_[seq % kRing] (Note [Stall inspector])
  std::uint64_t last_seq_ = 0;  // the latest collective issued (0: none yet)
  std::uint64_t oldest_seq_ = 1;  // no collective before it is still running

  // Inspector thread only.
  std::uint64_t published_seq_ = 0;
  std::uint64_t reported_seq_ = 0;
  Clock::time_point reported_at_;
  std::thread thread_;
};

// The threshold: `option` when set, else DPX_STALL_CHECK_SECONDS, else 60 s; zero disables.
std::chrono::milliseconds stall_threshold(std::optional<std::chrono::milliseconds> option);

}  // namespace dpx::detail
