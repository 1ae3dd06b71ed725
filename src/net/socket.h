// Blocking-with-a-deadline socket helpers for dpx's TCP store: every wait ends by a deadline,
// every failure is a typed exception naming the peer.
#pragma once

#include <sys/socket.h>

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

// "host:port", "[v6]:port".
std::string address(const std::string& host, int port);

// One of the addresses a host name resolves to, and how errors name it ("10.0.0.1:29500").
struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;
};

// The TCP addresses of host:port, in getaddrinfo's order. Throws DistributedError if the host
// does not resolve.
std::vector<Address> resolve_tcp(const std::string& host, int port);

// A listening socket bound to `host` (the first of its addresses that binds) and `port` (0: a
// free one). Throws DistributedError naming the address (and saying "already in use" for
// EADDRINUSE).
Fd listen_on(const std::string& host, int port);
int local_port(int fd);

// Connects to host:port, retrying refused connections until the deadline (the server may not be
// up yet), trying the host's addresses side by side (Note [Several addresses] in connect.cpp).
// Sets `connected_to` to the address that answered. Throws TimeoutError at the deadline, naming
// what each address did, and DistributedError if the host does not resolve.
Fd connect_to(const std::string& host, int port, Clock::time_point deadline,
              std::string* connected_to = nullptr);

// Writes or reads exactly `n` bytes before the deadline. Throw TimeoutError at the deadline and
// PeerLostError when the peer closed or reset the connection.
void write_all(int fd, const char* data, std::size_t n, Clock::time_point deadline);
void read_exact(int fd, char* data, std::size_t n, Clock::time_point deadline);

}  // namespace dpx::detail::net
