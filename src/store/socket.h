// Blocking-with-a-deadline socket helpers for dpx's TCP store: every wait ends by a deadline,
// every failure is a typed exception naming the peer.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace dpx::detail::net {

using Clock = std::chrono::steady_clock;

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release();
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A listening socket bound to `host` (the first of its addresses that binds) and `port` (0: a
// free one). Throws DistributedError naming the address (and saying "already in use" for
// EADDRINUSE).
Fd listen_on(const std::string& host, int port);
int local_port(int fd);

// Connects to host:port, retrying refused connections until the deadline (the server may not be
// up yet). Throws TimeoutError at the deadline, DistributedError if the host does not resolve.
Fd connect_to(const std::string& host, int port, Clock::time_point deadline);

// Writes or reads exactly `n` bytes before the deadline. Throw TimeoutError at the deadline and
// PeerLostError when the peer closed or reset the connection.
void write_all(int fd, const char* data, std::size_t n, Clock::time_point deadline);
void read_exact(int fd, char* data, std::size_t n, Clock::time_point deadline);

}  // namespace dpx::detail::net
