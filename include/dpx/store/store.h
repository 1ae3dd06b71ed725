// A key-value store shared by the ranks of a job: rendezvous, the rank-0 model check,
// shared-memory set-up, heartbeats. The TCP store is dpx's own (bounded, with deadlines, a job
// token and a bind address; docs/backends.md "Stores"), or c10d's TCPStore where a PyTorch
// program must be able to connect; file and hash stores are c10d's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpx/store/types.h"

namespace dpx {

namespace detail {
class StoreImpl;
struct StoreAccess;
}  // namespace detail

struct TcpStoreOptions {
  // The client connects here; the server listens on this address only (not on every interface).
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the server picks a free port, read it back with port()
  bool is_server = false;
  // Every blocking call (connect, get, wait, ...) ends by this timeout with a TimeoutError.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // The job's secret: the server refuses clients that present another one.
  std::string token;
  // How long the server lets a client take to say hello, or to finish a request it started,
  // before it drops that client.
  std::chrono::milliseconds client_deadline = std::chrono::seconds(10);
  // How long the server lets a new connection take to say who it is (a dpx client's hello, a
  // c10d client's first request), and how many may wait to do so; the oldest beyond that is
  // dropped (docs/backends.md "Stores").
  std::chrono::milliseconds hello_deadline = std::chrono::seconds(2);
  int max_unidentified = 128;
  // The server also serves clients of c10d's TCPStore protocol (PyTorch programs, LibTorch's
  // TCPStore), which present no token and may touch only the keys such clients use ("/..." and
  // "init/"), so the token still guards the rest (dpxrun's static rendezvous store).
  bool accept_c10d_clients = false;
  // Speak c10d's TCPStore protocol instead (to serve, or join, a store that PyTorch programs
  // use, such as torchrun's agent store). Then none of the above holds but `host`, `port`,
  // `is_server` and `timeout`: the server listens on every interface, has no token, and trusts
  // every client (docs/backends.md "Stores").
  bool c10d_protocol = false;
  int world_size = -1;        // c10d protocol only, with wait_workers
  bool wait_workers = false;  // c10d protocol only: the server waits for world_size clients
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
  // and `expected` is empty), else the current value; for an unset key and a non-empty
  // `expected`, `expected` (as c10d's TCPStore answers).
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool check(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool delete_key(const std::string& key);
  // The number of keys the store holds, over every prefix (as c10d's getNumKeys counts).
  std::int64_t num_keys();

  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;

  // The TCP store's port (the real one when 0 was asked for); 0 for other stores.
  std::uint16_t port() const { return port_; }
  // What errors name: "tcp://host:port", "file:///path", "hash", "prefix/<base>".
  const std::string& describe() const { return describe_; }

 private:
  friend struct detail::StoreAccess;

  Store(std::shared_ptr<detail::StoreImpl> impl, std::string describe, std::uint16_t port,
        std::shared_ptr<void> owned);

  std::shared_ptr<void> owned_;  // a TCP store's server, or a prefix store's base
  std::shared_ptr<detail::StoreImpl> impl_;
  std::string describe_;
  std::uint16_t port_;
};

}  // namespace dpx
