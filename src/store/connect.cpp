// Connecting to a store whose host name has several addresses.
//
// Note [Several addresses]
// A name may resolve to several addresses (IPv6 and IPv4, several interfaces in /etc/hosts or
// DNS), and some may never answer: a black-holed route or a firewall that drops the connection
// request leaves connect() waiting until the kernel gives up, minutes later. Trying the
// addresses one after the other with the store's whole deadline spent that deadline on the
// first dead one. So, as browsers do ("Happy Eyeballs", RFC 8305), the attempts overlap: the
// next address is tried kStagger after the last one started, or at once when one fails; an
// address that refuses (its server may still be starting) is tried again after a backoff,
// while silent ones stay pending. The first connection made wins; at the deadline the error
// says what each address did.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "dpx/errors.h"

namespace dpx::detail::net {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kStagger{250};
constexpr milliseconds kFirstBackoff{10};
constexpr milliseconds kMaxBackoff{250};

struct Attempt {
  const Address* address = nullptr;
  Fd fd;                      // set while a connection request is pending
  Clock::time_point next_try;  // when to try again, while none is pending
  milliseconds backoff = kFirstBackoff;
  int error = 0;     // how the last attempt failed; 0: none failed yet
  bool tried = false;
};

// Starts a non-blocking connect; true when it completed at once (then `a.fd` is connected).
bool start(Attempt& a) {
  a.tried = true;
  const auto* sa = reinterpret_cast<const sockaddr*>(&a.address->addr);
  Fd fd(::socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    a.error = errno;
    return false;
  }
  if (::connect(fd.get(), sa, a.address->len) == 0) {
    a.fd = std::move(fd);
    return true;
  }
  if (errno == EINPROGRESS) {
    a.fd = std::move(fd);
  } else {
    a.error = errno;
  }
  return false;
}

void failed(Attempt& a, int error, Clock::time_point now) {
  a.fd.reset();
  a.error = error;
  a.next_try = now + a.backoff;
  a.backoff = std::min(a.backoff * 2, kMaxBackoff);
}

// The first address not tried yet is tried now rather than at its staggered time.
void bring_forward(std::vector<Attempt>& attempts, Clock::time_point now) {
  for (auto& a : attempts) {
    if (!a.tried) {
      a.next_try = std::min(a.next_try, now);
      return;
    }
  }
}

std::string what_each_did(const std::vector<Attempt>& attempts) {
  std::string out;
  for (const auto& a : attempts) {
    if (!out.empty()) out += "; ";
    out += a.address->text + ": ";
    if (a.fd) out += "no answer to the connection request (dropped on the way, or a firewall)";
    else if (a.error != 0) out += std::strerror(a.error);
    else out += "not tried before the deadline";
  }
  return out;
}

Fd connected(Attempt& a, std::string* connected_to) {
  const int one = 1;
  ::setsockopt(a.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connected_to != nullptr) *connected_to = a.address->text;
  return std::move(a.fd);
}

}  // namespace

Fd connect_to(const std::string& host, int port, Clock::time_point deadline,
              std::string* connected_to) {
  const std::vector<Address> addresses = resolve_tcp(host, port);
  std::vector<Attempt> attempts(addresses.size());
  const auto begin = Clock::now();
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    attempts[i].address = &addresses[i];
    attempts[i].next_try = begin + kStagger * static_cast<int>(i);
  }
  std::vector<pollfd> fds;
  std::vector<Attempt*> pending;
  while (true) {
    auto now = Clock::now();
    auto wake = deadline;
    for (auto& a : attempts) {
      if (!a.fd && a.next_try <= now) {
        if (start(a)) return connected(a, connected_to);
        if (!a.fd) {
          failed(a, a.error, now);
          bring_forward(attempts, now);
        }
      }
      if (!a.fd) wake = std::min(wake, a.next_try);
    }
    if (now >= deadline) break;
    fds.clear();
    pending.clear();
    for (auto& a : attempts) {
      if (!a.fd) continue;
      fds.push_back({a.fd.get(), POLLOUT, 0});
      pending.push_back(&a);
    }
    const auto wait = std::chrono::duration_cast<milliseconds>(wake - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(wait, 0) + 1)) <= 0) {
      continue;  // a timer is due, or EINTR
    }
    now = Clock::now();
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) return connected(*pending[i], connected_to);
      failed(*pending[i], err, now);
      bring_forward(attempts, now);
    }
  }
  throw TimeoutError("nobody accepted a connection at " + address(host, port) +
                     " before the deadline (" + what_each_did(attempts) + ")");
}

}  // namespace dpx::detail::net
