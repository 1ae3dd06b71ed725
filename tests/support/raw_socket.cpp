#include "support/raw_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/tcp_protocol.h"

namespace dpx::test {
namespace {

using Clock = std::chrono::steady_clock;
namespace proto = detail::store_protocol;

sockaddr_in ipv4(int port, const char* ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.fd;
    o.fd = -1;
  }
  return *this;
}

Socket::~Socket() {
  if (fd >= 0) ::close(fd);
}

Socket raw_client(int port, const std::string& bytes, const char* ip) {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  auto a = ipv4(port, ip);
  EXPECT_EQ(::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  if (!bytes.empty()) {
    EXPECT_EQ(::send(s.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  return s;
}

Socket foreign_listener(int& port) {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  auto a = ipv4(0, "127.0.0.1");
  EXPECT_EQ(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(s.fd, 16), 0);
  socklen_t len = sizeof(a);
  ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

std::string dpx_hello(const std::string& token) {
  return std::string(1, static_cast<char>(proto::kPreamble)) +
         proto::Writer().u8(proto::kHello).str(proto::kMagic).str(token).frame();
}

bool closed_by_server(int fd, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  char buf[256];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
  return false;
}

std::string read_some(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return "";
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

std::shared_ptr<Store> store_client(int port, const std::string& token,
                                    std::chrono::milliseconds timeout) {
  TcpStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.token = token;
  o.timeout = timeout;
  return Store::tcp(o);
}

}  // namespace dpx::test
