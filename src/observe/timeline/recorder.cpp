// The per-process event buffer of the timeline and its file (include/dpx/observe/timeline.h).
//
// Note [Timeline cost]
// Recording happens on the training thread (forward, the reducer's hooks, the caller's scopes): a
// relaxed atomic load when off; when on, one uncontended mutex and a push into a reserved vector, a
// few events per bucket and step. Nothing is formatted until the file is written. Times are
// steady-clock nanoseconds; the offset to rank 0's clock is applied when writing, so align_clock()
// may run after the first events.
#include "dpx/observe/timeline.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "runtime/env_read.h"
#include "observe/timeline/recorder.h"

namespace dpx::timeline {
namespace detail {

Recorder& Recorder::get() {
  static Recorder* recorder = new Recorder();  // never destroyed: the exit handler uses it
  return *recorder;
}

void Recorder::add(const Event& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(e);
}

int Recorder::thread_id() {
  static std::atomic<int> next{0};
  thread_local int id = next.fetch_add(1);
  return id;
}

}  // namespace detail

namespace {

std::atomic<bool> g_enabled{false};

std::int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void write_at_exit() {
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx timeline: %s\n", e.what());  // exit goes on; nothing to throw to
  }
}

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void start(const std::string& path, int rank) {
  TORCH_CHECK(!path.empty(), "dpx::timeline::start: the path is empty");
  auto& r = detail::Recorder::get();
  {
    std::lock_guard<std::mutex> lock(r.mutex_);
    r.path_ = path + ".rank" + std::to_string(rank) + ".json";
    r.rank_ = rank;
    if (!r.exit_registered_) {
      r.events_.reserve(1 << 14);
      std::atexit(write_at_exit);
      r.exit_registered_ = true;
    }
  }
  g_enabled.store(true, std::memory_order_relaxed);
}

void stop() {
  g_enabled.store(false, std::memory_order_relaxed);
  auto& r = detail::Recorder::get();
  std::lock_guard<std::mutex> lock(r.mutex_);
  r.events_.clear();
  r.events_.shrink_to_fit();
  r.dropped_ = 0;
  r.path_.clear();  // write(), and so the exit handler, writes nothing
}

bool start_from_env(int rank) {
  if (auto path = dpx::detail::env_string("DPX_TIMELINE")) start(*path, rank);
  return enabled();
}

std::string path() {
  auto& r = detail::Recorder::get();
  std::lock_guard<std::mutex> lock(r.mutex_);
  return r.path_;
}

void record(const char* name, const char* category, Clock::time_point begin,
            Clock::time_point end, std::shared_ptr<const std::string> args) {
  if (!enabled()) return;
  detail::Recorder::get().add({name, category, 'X', ns(begin), ns(end) - ns(begin),
                               detail::Recorder::thread_id(), std::move(args)});
}

void mark(const char* name, const char* category, Clock::time_point at,
          std::shared_ptr<const std::string> args) {
  if (!enabled()) return;
  detail::Recorder::get().add(
      {name, category, 'i', ns(at), 0, detail::Recorder::thread_id(), std::move(args)});
}

Scope::Scope(const char* name, const char* category)
    : name_(name), category_(category), on_(enabled()) {
  if (on_) begin_ = Clock::now();
}

Scope::~Scope() {
  if (on_) record(name_, category_, begin_, Clock::now());
}

namespace {

void write_event(std::FILE* f, const detail::Event& e, int rank, double offset_us) {
  std::fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f", e.name, e.category, e.phase, rank, e.tid,
               static_cast<double>(e.ts_ns) / 1e3 + offset_us);
  if (e.phase == 'X') std::fprintf(f, ",\"dur\":%.3f", static_cast<double>(e.dur_ns) / 1e3);
  if (e.phase == 'i') std::fputs(",\"s\":\"t\"", f);
  if (e.args) std::fprintf(f, ",\"args\":%s", e.args->c_str());
  std::fputs("}", f);
}

}  // namespace

std::string write() {
  auto& r = detail::Recorder::get();
  std::lock_guard<std::mutex> lock(r.mutex_);
  if (r.path_.empty()) return "";
  const std::string tmp = r.path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  TORCH_CHECK(f, "dpx timeline: cannot write ", tmp, "; check that its directory exists and is "
              "writable (DPX_TIMELINE / dpxrun --timeline)");
  std::fprintf(f, "{\"otherData\":{\"rank\":%d,\"clock_offset_us\":%.3f,\"dropped_events\":%lld},"
               "\n\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
               "\"args\":{\"name\":\"rank %d\"}}",
               r.rank_, r.offset_us_, static_cast<long long>(r.dropped_), r.rank_, r.rank_);
  std::fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
               "\"args\":{\"sort_index\":%d}}", r.rank_, r.rank_);
  for (const auto& e : r.events_) write_event(f, e, r.rank_, r.offset_us_);
  std::fputs("\n]}\n", f);
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  std::fclose(f);
  TORCH_CHECK(ok && std::rename(tmp.c_str(), r.path_.c_str()) == 0, "dpx timeline: writing ",
              r.path_, " failed (disk full?)");
  return r.path_;
}

}  // namespace dpx::timeline
