#include "dpxrun/liveness.h"

#include <chrono>

#include "dpx/errors.h"

namespace dpxrun {

Liveness::Liveness(std::shared_ptr<dpx::Store> store, std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)), thread_([this] { run(); }) {}

Liveness::~Liveness() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    // Leaving is not being lost: an agent that ends (its job failed, or done) says so, so that
    // a peer checking at that moment does not name it.
    try {
      if (!key_.empty() && !unreachable_) store_->set(key_ + "/left", "1");
    } catch (const std::exception&) {
    }
  }
  wake_.notify_all();
  thread_.join();
}

std::string Liveness::beat_key(int round, int index) const {
  return prefix_ + "r" + std::to_string(round) + "/beat" + std::to_string(index);
}

void Liveness::beat_as(int round, int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  key_ = beat_key(round, index);
}

void Liveness::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!key_.empty()) {
      try {
        store_->add(key_, 1);
        unreachable_ = false;
      } catch (const std::exception&) {
        unreachable_ = true;  // the agent's own calls report it; beat again if it comes back
      }
    }
    wake_.wait_for(lock, std::chrono::duration<double>(kBeatSeconds), [this] { return stop_; });
  }
}

std::vector<int> Liveness::silent(int round, int members) {
  auto counts = [&] {
    std::vector<int64_t> c(members);
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < members; ++i) c[i] = store_->add(beat_key(round, i), 0);
    return c;
  };
  std::vector<int> still;
  try {
    const auto before = counts();
    std::this_thread::sleep_for(std::chrono::duration<double>(kWindowSeconds));
    const auto after = counts();
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < members; ++i)
      if (after[i] == before[i] && !store_->check({beat_key(round, i) + "/left"})) still.push_back(i);
  } catch (const std::exception&) {
    return {};
  }
  return still;
}

void Liveness::await_others(int round, int members, int self, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  std::vector<int64_t> last(members, -1);
  std::vector<std::chrono::steady_clock::time_point> moved(members, std::chrono::steady_clock::now());
  try {
    while (std::chrono::steady_clock::now() < deadline) {
      bool waiting = false;
      for (int i = 0; i < members && !waiting; ++i) {
        if (i == self) continue;
        std::lock_guard<std::mutex> lock(mutex_);
        if (store_->check({beat_key(round, i) + "/left"})) continue;
        const int64_t count = store_->add(beat_key(round, i), 0);
        const auto now = std::chrono::steady_clock::now();
        if (count != last[i]) last[i] = count, moved[i] = now;
        // Still beating (not lost, not left): wait for it.
        waiting = now - moved[i] < std::chrono::duration<double>(kWindowSeconds);
      }
      if (!waiting) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
  }
}

}  // namespace dpxrun
