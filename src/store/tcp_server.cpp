#include "store/tcp_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "store/tcp_protocol.h"
#include "store/tcp_server_state.h"
#include "dpx/errors.h"

namespace dpx::detail {

using net::Clock;
namespace proto = store_protocol;

int descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
}

int unidentified_cap(int max_unidentified) {
  return std::max(1, std::min(max_unidentified, descriptor_limit() / 4));
}

TcpServer::TcpServer(const TcpServerOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  state_->unidentified_cap = unidentified_cap(options.max_unidentified);
  state_->listener = net::listen_on(options.host, options.port);
  state_->reserve = net::Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  port_ = net::local_port(state_->listener.get());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw DistributedError("TCP store server: pipe2 failed");
  }
  state_->wake = net::Fd(fds[0]);
  wake_write_ = fds[1];
  owner_pid_ = ::getpid();
  thread_ = std::thread([s = state_.get()] { s->run(); });
}

// Note [Forked copies]
// A child forked from the server's process inherits this object (and the wake pipe) but not the
// thread. Destroying that copy must neither stop the parent's thread through the shared pipe nor
// join a thread the child does not have.
TcpServer::~TcpServer() {
  if (::getpid() != owner_pid_) {
    thread_.detach();
    ::close(wake_write_);
    return;
  }
  const char byte = 0;
  (void)!::write(wake_write_, &byte, 1);
  if (thread_.joinable()) thread_.join();
  ::close(wake_write_);
}

void TcpServer::State::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake.get(), POLLIN, 0});
    fds.push_back({accept_paused ? -1 : listener.get(), POLLIN, 0});
    for (const auto& c : clients) {
      fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    }
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (rc < 0 && errno != EINTR) return;  // cannot happen with valid descriptors
    if (fds[0].revents != 0) return;
    // Clients first: accepting may grow `clients`, whose poll entries are not in `fds` yet.
    const std::size_t polled = fds.size() - 2;
    for (std::size_t i = 0; i < polled; ++i) {
      ServerClient& c = *clients[i];
      const short ev = fds[i + 2].revents;
      if (c.dead) continue;  // pushed out while accepting (make_room)
      if (ev & (POLLIN | POLLHUP | POLLERR)) receive(c);
      if ((ev & POLLOUT) && !c.dead) flush(c);
    }
    if (fds[1].revents & POLLIN) accept_clients();
    sweep(Clock::now());
  }
}

int TcpServer::State::poll_timeout_ms(Clock::time_point now) const {
  auto next = kNoDeadline;
  for (const auto& c : clients) next = std::min(next, c->deadline);
  if (next == kNoDeadline) return -1;
  if (next <= now) return 0;
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
}

// Note [Out of descriptors]
// Connections that never say who they are (a port scanner, a flood, a stuck client) hold a
// descriptor each until their hello deadline. With a low `ulimit -n` they used to exhaust the
// process's descriptors, and accept() then failed for every client, the job's own included,
// until the flood's deadline passed. So:
//   1. at most a quarter of the process's descriptor limit (ulimit -n), and never more than
//      max_unidentified, connections may wait to say who they are; one more pushes out the
//      oldest of them, and the server says so once on stderr. The server shares its process with
//      a rank (or dpxrun's agent), whose own segments, sockets and files must always find a
//      descriptor: strangers may take a quarter, the job's own clients (identified at once, step
//      2) are never counted, and set-up refuses a limit too low for the rest
//      (Note [Descriptor budget] in src/comm/init/descriptors.h);
//   2. a connection's first bytes are read as soon as it is accepted, so a client that sent its
//      hello with its connection (dpx's and c10d's clients do) is identified at once and is never
//      pushed out by the connections that follow it;
//   3. when accept() fails for want of descriptors, a spare descriptor kept for the purpose is
//      given up to accept the connection that waits, if any (accept() fails for want of a
//      descriptor even when none waits). Then the oldest unidentified connection is closed to
//      make room for it; if there is none, the newcomer is told why it cannot be served (dpx's
//      client shows that message) and closed. Accepting pauses only when the spare cannot be
//      taken again, until a client leaves;
//   4. a connection is not pushed out for want of its hello before what it sent since it was
//      accepted has been read: a client descheduled between connect() and send() (a loaded
//      machine) may see dozens of newer connections accepted first. The one pushed out is sent
//      kBusy, and dpx's client connects again until its deadline, so a flood can delay the
//      job's own clients but never turn them away.
void TcpServer::State::accept_clients() {
  while (true) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if ((errno == EMFILE || errno == ENFILE) && accept_without_descriptors()) continue;
    return;  // EAGAIN: nobody else is waiting
  }
}

// Step 3 of Note [Out of descriptors]; false when nothing more can be accepted now.
bool TcpServer::State::accept_without_descriptors() {
  reserve.reset();
  const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    if (make_room()) {
      admit(fd);
    } else {
      refuse(fd);
    }
  }
  reserve = net::Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!reserve) accept_paused = true;
  return fd >= 0 && reserve;
}

void TcpServer::State::admit(int fd) {
  auto c = std::make_unique<ServerClient>();
  c->fd = net::Fd(fd);
  c->accepted = Clock::now();
  c->deadline = c->accepted + options.hello_deadline;
  ServerClient& admitted = *c;
  clients.push_back(std::move(c));
  int unidentified = 0;
  for (const auto& x : clients) unidentified += !x->dead && !x->identified;
  if (unidentified > unidentified_cap) {
    make_room();
    say_cap_once();
  }
  receive(admitted);
}

void TcpServer::State::say_cap_once() {
  if (said_cap) return;
  said_cap = true;
  const std::string line = "dpx store server (" + options.host + ":" +
      std::to_string(net::local_port(listener.get())) + "): more than " +
      std::to_string(unidentified_cap) + " connections have not said who they are; the oldest "
      "is closed as each new one arrives, so that they cannot take the file descriptors this "
      "process needs (at most a quarter of ulimit -n = " + std::to_string(descriptor_limit()) +
      " wait at once). The job's own clients identify themselves at once and are served.\n";
  std::fputs(line.c_str(), stderr);  // one write: no interleaving with other threads' lines
}

// Closes the oldest connection that has not said who it is; false when there is none.
// Step 4 of Note [Out of descriptors]: what it sent since it was accepted is read first, and the
// one closed is told it may come back.
bool TcpServer::State::make_room() {
  while (true) {
    ServerClient* oldest = nullptr;
    for (const auto& c : clients) {
      if (c->dead || c->identified) continue;
      if (oldest == nullptr || c->accepted < oldest->accepted) oldest = c.get();
    }
    if (oldest == nullptr) return false;
    receive(*oldest);
    if (oldest->identified) continue;  // its hello had just arrived
    if (!oldest->dead) {
      const std::string busy = proto::Writer().u8(proto::kBusy).str(
          "the store server closed this connection before its hello arrived, to make room for "
          "newer ones (too many connections have not said who they are); connect again").frame();
      (void)!::send(oldest->fd.get(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    oldest->dead = true;
    oldest->fd.reset();  // now: accept() needs the descriptor
    return true;
  }
}

// Tells a connection the server cannot serve why, and closes it. Its hello is read first (it
// comes with the connection): closing a socket with unread data resets the connection, and the
// reset could overtake the message.
void TcpServer::State::refuse(int fd) {
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  if (::poll(&p, 1, 100) > 0) {
    while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
  }
  const std::string why = proto::Writer().u8(proto::kError).str(
      "the store server has run out of file descriptors (its limit, ulimit -n, is " +
      std::to_string(descriptor_limit()) + "), all held by clients it serves; raise ulimit -n where "
      "the store runs (rank 0, or the launcher)").frame();
  (void)!::send(fd, why.data(), why.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

void TcpServer::State::receive(ServerClient& c) {
  char buf[65536];
  while (!c.dead) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
      // A client that sends beyond one request while its last one waits gains nothing by it.
      if (c.in.size() > proto::kMaxFrameBytes + 64u) c.dead = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;  // closed or reset: a pending wait of its goes with it
  }
  if (!c.dead) handle_input(c);
}

void TcpServer::State::handle_input(ServerClient& c) {
  if (c.speaks == Speaks::kUnknown && !identify(c)) return;
  if (c.speaks == Speaks::kDpx) {
    handle_dpx_frames(c);
  } else {
    handle_c10d_requests(c);
  }
  if (c.identified) {
    // A request that has started must finish within the deadline; between requests a client
    // may stay silent as long as it likes (ranks idle between store calls).
    if (c.in.empty()) c.deadline = kNoDeadline;
    else if (c.deadline == kNoDeadline) c.deadline = Clock::now() + options.client_deadline;
  }
}

// Tells the protocol by the first byte (Note [c10d clients] in tcp_server.h); false while that
// cannot be told yet, or when the client speaks neither (it is dropped).
bool TcpServer::State::identify(ServerClient& c) {
  if (c.in.empty()) return false;
  if (static_cast<std::uint8_t>(c.in[0]) == proto::kPreamble) {
    c.in.erase(0, 1);
    c.speaks = Speaks::kDpx;
    return true;
  }
  c10d_wire::Dialect dialect{};
  const c10d_wire::Parse p =
      options.accept_c10d_clients ? c10d_wire::detect(c.in, dialect) : c10d_wire::Parse::kBad;
  if (p == c10d_wire::Parse::kBad) c.dead = true;  // neither: garbage, HTTP, a port scanner
  if (p != c10d_wire::Parse::kDone) return false;
  c.speaks = dialect == c10d_wire::Dialect::kV2 ? Speaks::kC10dV2 : Speaks::kC10dV1;
  return true;
}

void TcpServer::State::handle_dpx_frames(ServerClient& c) {
  while (!c.dead && !c.pending && !c.close_after_send && c.in.size() >= 4) {
    const std::uint32_t n = proto::read_u32(c.in.data());
    if (n > proto::kMaxFrameBytes || n == 0) {
      c.dead = true;
      return;
    }
    if (c.in.size() < 4u + n) break;
    const std::string body = c.in.substr(4, n);
    c.in.erase(0, 4u + n);
    if (!c.identified) {
      handle_hello(c, body);
      continue;
    }
    StoreRequest r;
    if (!decode_dpx_request(body, r)) {
      c.dead = true;  // an unknown op or a malformed body: not dpx's protocol
      return;
    }
    execute(c, r);
  }
}

void TcpServer::State::handle_hello(ServerClient& c, const std::string& body) {
  proto::Reader r(body);
  const std::uint8_t op = r.u8();
  const std::string magic = r.str();
  const std::string token = r.str();
  if (op != proto::kHello || !r.done() || magic != proto::kMagic) {
    c.dead = true;  // not a dpx store client
    return;
  }
  if (token != options.token) {
    c.close_after_send = true;
    send(c, proto::Writer().u8(proto::kError).str(
        "the job token does not match: this store belongs to another job, or this process has "
        "another DPX_STORE_TOKEN than the store's owner").frame());
    return;
  }
  c.identified = true;
  send(c, proto::Writer().u8(proto::kOk).frame());
}

// A c10d client sends its next request only after its last call returned: a request that comes
// while a wait is pending means the client gave up on that wait (PyTorch 1.x just stops reading,
// 2.x sends CANCEL_WAIT first), so the wait is dropped rather than answered late, where the
// client would take its answer for the next call's (Note [c10d wire]).
void TcpServer::State::handle_c10d_requests(ServerClient& c) {
  const auto dialect =
      c.speaks == Speaks::kC10dV2 ? c10d_wire::Dialect::kV2 : c10d_wire::Dialect::kV1;
  while (!c.dead && !c.in.empty()) {
    StoreRequest r;
    std::size_t used = 0;
    const c10d_wire::Parse p = c10d_wire::parse(c.in, dialect, r, used);
    if (p == c10d_wire::Parse::kBad) c.dead = true;
    if (p != c10d_wire::Parse::kDone) return;
    if (r.op != StoreRequest::Op::kCancelWait) c.pending.reset();
    c.in.erase(0, used);
    c.identified = true;
    execute(c, r);
  }
}

void TcpServer::State::send(ServerClient& c, const std::string& bytes) {
  c.out += bytes;
  flush(c);
}

void TcpServer::State::flush(ServerClient& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;
    return;
  }
  if (c.out.size() > 2u * proto::kMaxFrameBytes) c.dead = true;  // it does not read its answers
  if (c.out.empty() && c.close_after_send) c.dead = true;
}

void TcpServer::State::sweep(Clock::time_point now) {
  const auto before = clients.size();
  clients.erase(std::remove_if(clients.begin(), clients.end(),
                               [&](const auto& c) { return c->dead || c->deadline <= now; }),
                clients.end());
  if (clients.size() < before) accept_paused = false;
}

}  // namespace dpx::detail
