// A worker's sign of life for dpxrun: a thread that bumps this worker's key in the agent's store,
// so that the agent can tell a hung worker (deadlock, lost peer that never times out) from a slow
// one and restart the group (dpxrun --heartbeat-timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace dpx {

class Store;

struct HeartbeatOptions {
  // How often to beat; by default a fifth of DPX_HEARTBEAT_TIMEOUT.
  std::optional<std::chrono::milliseconds> interval;
  std::chrono::milliseconds store_timeout = std::chrono::seconds(10);
};

class Heartbeat {
 public:
  // Starts beating when the launcher asked for it (DPX_AGENT_STORE, DPX_HEARTBEAT_KEY and
  // DPX_HEARTBEAT_TIMEOUT set); otherwise active() is false and nothing runs.
  explicit Heartbeat(HeartbeatOptions options = {});
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  bool active() const { return thread_.joinable(); }
  // Stops beating: from here on the agent sees this worker as hung once the timeout passes.
  void stop();

 private:
  void run(std::chrono::milliseconds interval);

  std::shared_ptr<Store> store_;
  std::string key_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace dpx
