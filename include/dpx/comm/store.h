// A key-value store shared by the ranks of a job: rendezvous, the rank-0 model check,
// shared-memory segment names, heartbeats. Thin wrapper over c10d's stores, so that LibTorch
// version differences stay in src/comm/store/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "dpx/comm/types.h"

namespace c10d {
class Store;
}

namespace dpx {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the server picks a free port, read it back with port()
  bool is_server = false;
  int world_size = -1;  // with wait_workers: how many clients the server waits for
  bool wait_workers = false;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

class Store {
 public:
  static std::shared_ptr<Store> tcp(const TcpStoreOptions& options);
  static std::shared_ptr<Store> file(const std::string& path, int world_size);
  static std::shared_ptr<Store> hash();
  static std::shared_ptr<Store> prefix(const std::string& prefix, std::shared_ptr<Store> base);

  ~Store();

  void set(const std::string& key, const std::string& value);
  // Waits up to timeout() for the key.
  std::string get(const std::string& key);
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Returns the value now stored under `key`: `desired` if it held `expected` (or was unset
  // and `expected` is empty), else the current value.
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool check(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool delete_key(const std::string& key);

  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;

  // The TCP store's port (the real one when 0 was asked for); 0 for other stores.
  std::uint16_t port() const { return port_; }
  // What errors name: "tcp://host:port", "file:///path", "hash", "prefix/<base>".
  const std::string& describe() const { return describe_; }

  const c10::intrusive_ptr<c10d::Store>& c10d_store() const { return impl_; }

 private:
  Store(c10::intrusive_ptr<c10d::Store> impl, std::string describe, std::uint16_t port,
        std::shared_ptr<Store> base);

  c10::intrusive_ptr<c10d::Store> impl_;
  std::string describe_;
  std::uint16_t port_;
  std::shared_ptr<Store> base_;  // keeps a prefix store's base alive
};

}  // namespace dpx
