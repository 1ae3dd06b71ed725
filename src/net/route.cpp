#include "net/route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace dpx::detail {
namespace {

std::string numeric(const sockaddr* a, socklen_t len) {
  char buf[NI_MAXHOST] = {0};
  if (::getnameinfo(a, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

// The source address of a UDP socket connected to the first address of `family` for `host`.
std::optional<std::string> route_for(const std::string& host, int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  // Any port: connect() on a UDP socket only picks the route, it sends nothing.
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  std::optional<std::string> out;
  for (addrinfo* a = found; a != nullptr && !out; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage self{};
    socklen_t len = sizeof(self);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0) {
      std::string s = numeric(reinterpret_cast<sockaddr*>(&self), len);
      if (!s.empty()) out = std::move(s);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

}  // namespace

std::optional<std::string> local_address_toward(const std::string& host) {
  if (auto v4 = route_for(host, AF_INET)) return v4;
  return route_for(host, AF_INET6);
}

bool is_loopback_address(const std::string& address) {
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

bool names_loopback(const std::string& host) {
  return host == "localhost" || is_loopback_address(host);
}

std::string interface_of(const std::string& address) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string out;
  for (ifaddrs* i = all; i != nullptr && out.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::string a = numeric(i->ifa_addr, len);
    // getnameinfo writes link-local IPv6 addresses as "fe80::1%eth0".
    if (auto pct = a.find('%'); pct != std::string::npos) a.resize(pct);
    if (a == address) out = i->ifa_name;
  }
  ::freeifaddrs(all);
  return out;
}

}  // namespace dpx::detail
