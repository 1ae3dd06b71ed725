#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "dpx/errors.h"

namespace dpx::detail::net {

std::string address(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const std::string& host, int port, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &out.list);
  if (rc != 0) {
    throw DistributedError("the host name '" + host + "' does not resolve (" +
                           ::gai_strerror(rc) + "); check the address");
  }
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, left.count()));
}

// Waits until `fd` is ready for `events`; false at the deadline.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the following read or write report the error
  }
}

[[noreturn]] void throw_io(int e, const char* what) {
  if (e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == 0) {
    throw PeerLostError(std::string("the connection was closed by the other side during ") + what);
  }
  throw DistributedError(std::string(what) + " failed: " + std::strerror(e));
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  }
  return false;
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Note [Listening on a name]
// A host name other than "localhost" that resolves to loopback here (Debian maps a machine's own
// name to 127.0.1.1) names this machine to the other hosts, which reach it at another address:
// listening on loopback would refuse them. Such a name is served on every interface (dual-stack),
// still behind the job token; an IP address or "localhost" is served on exactly that address.
bool serve_everywhere(const std::string& host, const AddrInfo& ai) {
  if (host == "localhost" || is_ip_literal(host)) return false;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    if (!is_loopback(a->ai_addr)) return false;
  }
  return ai.list != nullptr;
}

}  // namespace

Fd listen_on(const std::string& host, int port) {
  AddrInfo ai;
  resolve(host, port, ai);
  if (serve_everywhere(host, ai)) {
    AddrInfo any;
    resolve("::", port, any);  // dual-stack: IPv4 clients arrive as ::ffff:a.b.c.d
    Fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int zero = 0, one = 1;
    if (fd && ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0) {
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd.get(), any.list->ai_addr, any.list->ai_addrlen) == 0 &&
          ::listen(fd.get(), 512) == 0) {
        return fd;
      }
      if (errno == EADDRINUSE) {
        throw DistributedError("the port is already in use (" + address(host, port) +
                               "). Pick another MASTER_PORT, or port 0 for a free one.");
      }
    }
    ::freeaddrinfo(ai.list);  // no IPv6 here: every IPv4 interface
    ai.list = nullptr;
    resolve("0.0.0.0", port, ai);
  }
  int last_error = 0;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = errno;
      continue;
    }
    // Reuse a port in TIME_WAIT; a port another socket listens on still fails with EADDRINUSE.
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 512) == 0) {
      return fd;
    }
    last_error = errno;
  }
  if (last_error == EADDRINUSE) {
    throw DistributedError("the port is already in use (" + address(host, port) +
                           "). Pick another MASTER_PORT, or port 0 for a free one.");
  }
  throw DistributedError("cannot listen on " + address(host, port) + ": " +
                         std::strerror(last_error) +
                         "; the address must be one of this machine's own");
}

std::vector<Address> resolve_tcp(const std::string& host, int port) {
  AddrInfo ai;
  resolve(host, port, ai);
  std::vector<Address> out;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    Address x;
    std::memcpy(&x.addr, a->ai_addr, a->ai_addrlen);
    x.len = a->ai_addrlen;
    char text[NI_MAXHOST] = {0};
    ::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
    x.text = address(text, port);
    out.push_back(x);
  }
  return out;
}

int local_port(int fd) {
  sockaddr_storage s{};
  socklen_t len = sizeof(s);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len);
  if (s.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&s)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&s)->sin_port);
}

void write_all(int fd, const char* data, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) throw TimeoutError("the request could not be sent");
      continue;
    }
    throw_io(errno, "sending a request");
  }
}

void read_exact(int fd, char* data, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, data, n, 0);
    if (r > 0) {
      data += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) throw_io(0, "reading the answer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) throw TimeoutError("no answer came");
      continue;
    }
    throw_io(errno, "reading the answer");
  }
}

}  // namespace dpx::detail::net
