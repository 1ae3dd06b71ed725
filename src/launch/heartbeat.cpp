#include "dpx/launch/heartbeat.h"

#include <c10/util/Exception.h>

#include "store/agent_store.h"
#include "dpx/store/store.h"
#include "runtime/env_read.h"

namespace dpx {

Heartbeat::Heartbeat(HeartbeatOptions options) {
  // dpxrun sets all three (Note [Environment] in dpx/runtime/env.h); unset outside dpxrun.
  const auto agent_store = detail::env_string("DPX_AGENT_STORE");
  const auto heartbeat_key = detail::env_string("DPX_HEARTBEAT_KEY");
  const auto heartbeat_timeout = detail::env_positive("DPX_HEARTBEAT_TIMEOUT");
  if (!agent_store || !heartbeat_key || !heartbeat_timeout) {
    return;
  }
  store_ = detail::connect_agent_store(*agent_store, "DPX_AGENT_STORE", options.store_timeout);
  key_ = *heartbeat_key;
  auto interval = options.interval.value_or(std::chrono::milliseconds(
      static_cast<long>(*heartbeat_timeout * 1000 / 5)));
  interval = std::max(interval, std::chrono::milliseconds(10));
  store_->set(key_, "0");
  thread_ = std::thread([this, interval] { run(interval); });
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Heartbeat::run(std::chrono::milliseconds interval) {
  long beat = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    try {
      store_->set(key_, std::to_string(++beat));
    } catch (const std::exception&) {
      // The agent went away: nobody is listening, and the worker learns of it from its group.
      return;
    }
  }
}

}  // namespace dpx
