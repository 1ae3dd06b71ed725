// The client of dpx's TCP store (protocol in tcp_protocol.h). Every call ends by its deadline;
// the connection is opened on first use and again after a failed call, whose late answer would
// otherwise be read as the next call's.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "net/socket.h"
#include "store/store_impl.h"

namespace dpx::detail {

struct TcpClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
};

class TcpClient final : public StoreImpl {
 public:
  // Connects and says hello before returning, so a wrong address fails here.
  explicit TcpClient(const TcpClientOptions& options);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override;

 private:
  // Sends one request frame and returns the answer's body after its status byte.
  std::string call(const std::string& frame, std::chrono::milliseconds timeout);
  void connect(net::Clock::time_point deadline);

  TcpClientOptions options_;
  mutable std::mutex mutex_;
  net::Fd fd_;
};

}  // namespace dpx::detail
