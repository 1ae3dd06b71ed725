#include "observe/stall_inspector.h"

#include <c10/util/Exception.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "dpx/runtime/cuda.h"
#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

constexpr std::chrono::milliseconds kDefaultStallThreshold = std::chrono::seconds(60);
constexpr std::chrono::milliseconds kMinTick{10};
constexpr std::chrono::milliseconds kMaxTick{2000};

std::string rank_key(int rank) { return "dpx_stall/" + std::to_string(rank); }

std::string seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

// "3 allreduce 1024 Float" as published, back into its number and its words.
std::pair<std::uint64_t, std::string> parse_progress(const std::string& value) {
  std::istringstream in(value);
  std::uint64_t seq = 0;
  in >> seq;
  std::string rest;
  std::getline(in, rest);
  return {seq, rest.empty() ? rest : rest.substr(1)};
}

// CLOCK_MONOTONIC, which steady_clock reads, at the kernel's tick (a few ms): it reads no
// counter, which on a VM costs a small collective ~20 ns (Note [Stall inspector] step 1). An age
// measured from it errs by at most a tick, against thresholds of seconds.
StallInspector::Clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return StallInspector::Clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                           std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace

std::chrono::milliseconds stall_threshold(std::optional<std::chrono::milliseconds> option) {
  if (option) {
    TORCH_CHECK(option->count() >= 0, "ProcessGroup::Options::stall_threshold must be >= 0 "
                "(0 turns the stall inspector off), got ", option->count(), " ms");
    return *option;
  }
  const auto text = env_string("DPX_STALL_CHECK_SECONDS");
  if (!text) return kDefaultStallThreshold;
  double s = -1;
  std::size_t used = 0;
  try {
    s = std::stod(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == text->size() && s >= 0, "environment variable DPX_STALL_CHECK_SECONDS must "
              "be a number of seconds >= 0 (0 turns the stall inspector off), got '", *text, "'");
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

StallInspector::StallInspector(std::shared_ptr<Store> store, int rank, int size,
                               std::string where, std::chrono::milliseconds threshold,
                               std::chrono::milliseconds timeout, IsCompleted is_completed,
                               at::Device device)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      where_(std::move(where)),
      threshold_(threshold),
      timeout_(timeout),
      tick_(std::clamp(threshold / 4, kMinTick, kMaxTick)),
      is_completed_(is_completed),
      device_(device),
      ring_(kRing) {
  thread_ = std::thread([this] { run(); });
}

StallInspector::~StallInspector() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallInspector::issued(std::uint64_t seq, const char* op, const at::Tensor& tensor,
                            std::shared_ptr<const std::string> label, std::weak_ptr<void> work) {
  Pending p;
  p.seq = seq;
  p.op = op;
  if (tensor.defined()) {
    p.numel = tensor.numel();
    p.dtype = tensor.scalar_type();
  }
  p.label = std::move(label);
  p.issued = coarse_now();
  p.work = std::move(work);
  std::lock_guard<std::mutex> lock(mutex_);
  ring_[seq % kRing] = std::move(p);
  last_seq_ = std::max(last_seq_, seq);
}

std::optional<StallInspector::Pending> StallInspector::oldest_running() {
  if (last_seq_ >= kRing) oldest_seq_ = std::max(oldest_seq_, last_seq_ - kRing + 1);
  for (; oldest_seq_ <= last_seq_; ++oldest_seq_) {
    Pending& p = ring_[oldest_seq_ % kRing];
    if (p.seq < oldest_seq_) return std::nullopt;  // numbered, not noted yet: look next tick
    if (p.seq > oldest_seq_) continue;               // its slot was taken again (kRing later)
    auto w = p.work.lock();
    if (w && !is_completed_(w.get())) return p;
    p.work.reset();
  }
  return std::nullopt;
}

std::string StallInspector::describe(const Pending& p) {
  std::string s = std::to_string(p.seq) + " " + p.op;
  if (p.numel > 0 || std::string(p.op) != "barrier") {
    s += std::string(" ") + std::to_string(p.numel) + " " + c10::toString(p.dtype);
  }
  return s;
}

void StallInspector::run() {
  try {
    cuda::set_current_device(device_);  // Note [Thread devices]
  } catch (const std::exception&) {
    return;  // polling from another device would make a context there; the group reports faults
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, tick_, [&] { return stop_; })) {
    const std::optional<Pending> oldest = oldest_running();
    Pending last = last_seq_ > 0 ? ring_[last_seq_ % kRing] : Pending{};
    last.work.reset();
    lock.unlock();
    try {
      if (last.seq != published_seq_) {
        store_->set(rank_key(rank_), describe(last));
        published_seq_ = last.seq;
      }
      const auto now = Clock::now();
      if (oldest && now - oldest->issued >= threshold_ &&
          (oldest->seq != reported_seq_ || now - reported_at_ >= threshold_)) {
        report(*oldest, now);
      }
    } catch (const std::exception&) {
      // The store is gone: the job ends (rank 0 served it and left first), or rank 0 died, which
      // the collectives' own waits report with a typed error. Nothing to add; stop looking.
      lock.lock();
      return;
    }
    lock.lock();
  }
}

void StallInspector::report(const Pending& stuck, Clock::time_point now) {
  std::string missing, ahead;
  int n_missing = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const std::string key = rank_key(r);
    std::uint64_t seq = 0;
    std::string what;
    if (store_->check({key})) std::tie(seq, what) = parse_progress(store_->get(key));
    if (seq >= stuck.seq) continue;
    ++n_missing;
    missing += (missing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
               (seq == 0 ? " (has issued no collective yet)"
                         : " (last issued #" + std::to_string(seq) + " " + what + ")");
  }
  std::string line = where_ + "stall: collective #" + std::to_string(stuck.seq) + " (" +
                     describe(stuck).substr(std::to_string(stuck.seq).size() + 1) +
                     (stuck.label ? ", " + *stuck.label : "") + ") has waited " +
                     seconds(now - stuck.issued) +
                     " s (stall threshold " +
                     seconds(threshold_) + " s). ";
  if (n_missing > 0) {
    line += std::to_string(n_missing) + " rank(s) have not issued it yet: " + missing + ".";
  } else {
    line += "Every rank has issued it; the backend is still moving its data (or a peer is "
            "stuck inside it).";
  }
  line += " Still waiting, until the timeout of " + std::to_string(timeout_.count()) + " ms.\n";
  std::fputs(line.c_str(), stderr);  // one write: lines of several threads do not interleave
  std::fflush(stderr);
  store_->set("dpx_stall/report/" + std::to_string(rank_), line);
  reported_seq_ = stuck.seq;
  reported_at_ = now;
}

}  // namespace dpx::detail
