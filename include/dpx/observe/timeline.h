// The timeline: a per-rank record of a training step (forward, backward, each DDP bucket's
// all-reduce, waits, and the caller's own scopes such as the optimizer step) in the Chrome trace
// event format that chrome://tracing and Perfetto open. docs/timeline.md shows how to read it.
//
// Turn it on with DPX_TIMELINE=FILE (dpxrun --timeline FILE sets it and merges the ranks' files
// into FILE at the end), or with timeline::start(). Each rank writes FILE.rank<R>.json at exit
// (or when write() is called); its times are shifted onto rank 0's clock (align_clock()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dpx {

class Store;

namespace timeline {

using Clock = std::chrono::steady_clock;

// Whether events are being recorded (one relaxed atomic load: cheap enough for every call).
bool enabled();

// Starts recording for `rank`; the file is `path` + ".rank<rank>.json". Registers a write at
// process exit. Calling it again changes the path and rank and keeps the events so far.
void start(const std::string& path, int rank);
// Starts recording when DPX_TIMELINE is set (init_process_group calls it); returns enabled().
bool start_from_env(int rank);

// Measures this rank's clock offset against rank 0 through `store` (every rank of the group
// must call it; rank 0 answers each other rank in turn) so that merged files line up. Returns
// the offset in microseconds added to this rank's times.
double align_clock(Store& store, int rank, int world_size);

// Stops recording and drops the events recorded so far; nothing is written at exit (call write()
// first to keep them).
void stop();

// Writes this rank's events so far to its file (replacing it); returns the path written.
std::string write();

// The file this rank writes to ("" while not started).
std::string path();

// Merges per-rank trace files (as write() makes them) into one trace at `out`, one row per rank.
// Throws with the file's name when one cannot be read.
void merge(const std::string& out, const std::vector<std::string>& inputs);

// Records a complete event [begin, end) with `name` in `category` and an optional JSON object
// `args` (text such as {"bucket":0}). `name` and `category` must outlive the process (literals).
void record(const char* name, const char* category, Clock::time_point begin,
            Clock::time_point end, std::shared_ptr<const std::string> args = nullptr);
// An instant event (a point in time).
void mark(const char* name, const char* category, Clock::time_point at,
          std::shared_ptr<const std::string> args = nullptr);

// Records the span of its own lifetime, e.g. { dpx::timeline::Scope s("optimizer.step"); ... }.
class Scope {
 public:
  explicit Scope(const char* name, const char* category = "user");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* category_;
  bool on_;
  Clock::time_point begin_;
};

}  // namespace timeline
}  // namespace dpx
