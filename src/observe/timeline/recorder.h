// The timeline's process-wide buffer (Note [Timeline cost] in recorder.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dpx::timeline::detail {

struct Event {
  const char* name;
  const char* category;
  char phase;  // 'X' complete, 'i' instant (Chrome trace event format)
  std::int64_t ts_ns;
  std::int64_t dur_ns;
  int tid;
  std::shared_ptr<const std::string> args;  // a JSON object, or null
};

struct Recorder {
  // A bound on memory for a job left running with the timeline on: about 64 MiB of events,
  // over 50,000 steps of a model with a handful of buckets. Later events are counted, not kept.
  static constexpr std::size_t kMaxEvents = 1 << 20;

  static Recorder& get();
  static int thread_id();
  void add(const Event& e);

  std::mutex mutex_;
  std::vector<Event> events_;
  std::int64_t dropped_ = 0;
  std::string path_;
  int rank_ = 0;
  double offset_us_ = 0;
  bool exit_registered_ = false;
};

}  // namespace dpx::timeline::detail
