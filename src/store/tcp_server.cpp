#include "store/tcp_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>
#include <vector>

#include "store/socket.h"
#include "store/tcp_protocol.h"
#include "dpx/store/errors.h"

namespace dpx::detail {

using net::Clock;
namespace proto = store_protocol;

namespace {

constexpr auto kNoDeadline = Clock::time_point::max();

struct Client {
  net::Fd fd;
  std::string in;   // received, not yet handled
  std::string out;  // answers not yet sent
  bool hello = false;
  bool dead = false;
  bool close_after_send = false;
  Clock::time_point deadline = kNoDeadline;  // to say hello, or to finish a started frame
  std::uint8_t waiting_op = 0;               // kGet or kWait while its keys are missing
  std::vector<std::string> waiting_keys;
};

std::string ok() { return proto::Writer().u8(proto::kOk).frame(); }
std::string ok_int(std::int64_t v) { return proto::Writer().u8(proto::kOk).i64(v).frame(); }
std::string ok_str(const std::string& v) { return proto::Writer().u8(proto::kOk).str(v).frame(); }
std::string error(const std::string& m) { return proto::Writer().u8(proto::kError).str(m).frame(); }

}  // namespace

struct TcpServer::State {
  TcpServerOptions options;
  net::Fd listener;
  net::Fd wake;
  std::vector<std::unique_ptr<Client>> clients;
  std::unordered_map<std::string, std::string> data;
  bool accept_paused = false;  // out of descriptors: accept again once a client leaves

  void run();
  void accept_clients();
  void receive(Client& c);
  void handle_frames(Client& c);
  void handle(Client& c, const std::string& body);
  void handle_request(Client& c, std::uint8_t op, proto::Reader& r);
  bool add(Client& c, proto::Reader& r);
  bool compare_set(Client& c, proto::Reader& r);
  bool present(const std::vector<std::string>& keys) const;
  void answer_waiters();
  void send(Client& c, const std::string& frame);
  void flush(Client& c);
  void sweep(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
};

TcpServer::TcpServer(const TcpServerOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  state_->listener = net::listen_on(options.host, options.port);
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
      Client& c = *clients[i];
      const short ev = fds[i + 2].revents;
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

void TcpServer::State::accept_clients() {
  while (true) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) accept_paused = true;
      return;
    }
    auto c = std::make_unique<Client>();
    c->fd = net::Fd(fd);
    c->deadline = Clock::now() + options.client_deadline;  // to say hello
    clients.push_back(std::move(c));
  }
}

void TcpServer::State::receive(Client& c) {
  char buf[65536];
  while (!c.dead) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
      // A client that sends beyond one frame while its request waits gains nothing by it.
      if (c.in.size() > proto::kMaxFrameBytes + 4u) c.dead = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;  // closed or reset: a pending wait of its goes with it
  }
  if (!c.dead) handle_frames(c);
}

void TcpServer::State::handle_frames(Client& c) {
  while (!c.dead && c.waiting_op == 0 && !c.close_after_send && c.in.size() >= 4) {
    const std::uint32_t n = proto::read_u32(c.in.data());
    if (n > proto::kMaxFrameBytes || n == 0) {
      c.dead = true;
      return;
    }
    if (c.in.size() < 4u + n) break;
    const std::string body = c.in.substr(4, n);
    c.in.erase(0, 4u + n);
    handle(c, body);
  }
  if (c.hello) {
    // A frame that has started must finish within the deadline; between frames a client may
    // stay silent as long as it likes (ranks idle between store calls).
    if (c.in.empty()) c.deadline = kNoDeadline;
    else if (c.deadline == kNoDeadline) c.deadline = Clock::now() + options.client_deadline;
  }
}

void TcpServer::State::handle(Client& c, const std::string& body) {
  proto::Reader r(body);
  const std::uint8_t op = r.u8();
  if (c.hello) {
    handle_request(c, op, r);
    return;
  }
  const std::string magic = r.str();
  const std::string token = r.str();
  if (op != proto::kHello || !r.done() || magic != proto::kMagic) {
    c.dead = true;  // not a dpx store client
    return;
  }
  if (token != options.token) {
    c.close_after_send = true;
    send(c, error("the job token does not match: this store belongs to another job, or this "
                  "process has another DPX_STORE_TOKEN than the store's owner"));
    return;
  }
  c.hello = true;
  send(c, ok());
}

void TcpServer::State::handle_request(Client& c, std::uint8_t op, proto::Reader& r) {
  switch (op) {
    case proto::kSet: {
      std::string k = r.str(), v = r.str();
      if (!r.done()) break;
      data[std::move(k)] = std::move(v);
      send(c, ok());
      answer_waiters();
      return;
    }
    case proto::kGet:
    case proto::kWait: {
      std::vector<std::string> keys;
      if (op == proto::kGet) keys.push_back(r.str());
      else keys = r.strs();
      if (!r.done()) break;
      c.waiting_op = op;
      c.waiting_keys = std::move(keys);
      answer_waiters();
      return;
    }
    case proto::kAdd:
      if (!add(c, r)) break;
      return;
    case proto::kCompareSet:
      if (!compare_set(c, r)) break;
      return;
    case proto::kCheck: {
      const auto keys = r.strs();
      if (!r.done()) break;
      send(c, ok_int(present(keys) ? 1 : 0));
      return;
    }
    case proto::kDelete: {
      const std::string k = r.str();
      if (!r.done()) break;
      send(c, ok_int(static_cast<std::int64_t>(data.erase(k))));
      return;
    }
    case proto::kNumKeys:
      if (!r.done()) break;
      send(c, ok_int(static_cast<std::int64_t>(data.size())));
      return;
    default:
      break;
  }
  c.dead = true;  // an unknown op or a malformed body: the client is not speaking dpx's protocol
}

// False when the body is malformed.
bool TcpServer::State::add(Client& c, proto::Reader& r) {
  const std::string k = r.str();
  const std::int64_t delta = r.i64();
  if (!r.done()) return false;
  std::int64_t v = delta;
  auto it = data.find(k);
  if (it != data.end()) {
    try {
      v += std::stoll(it->second);
    } catch (const std::exception&) {
      send(c, error("key '" + k + "' does not hold an integer"));
      return true;
    }
  }
  data[k] = std::to_string(v);
  send(c, ok_int(v));
  answer_waiters();
  return true;
}

bool TcpServer::State::compare_set(Client& c, proto::Reader& r) {
  const std::string k = r.str(), expected = r.str(), desired = r.str();
  if (!r.done()) return false;
  auto it = data.find(k);
  if (it == data.end()) {
    // As c10d's TCPStore: an unset key takes `desired` only when `expected` is empty.
    if (expected.empty()) data[k] = desired;
    send(c, ok_str(expected.empty() ? desired : expected));
  } else {
    if (it->second == expected) it->second = desired;
    send(c, ok_str(it->second));
  }
  answer_waiters();
  return true;
}

bool TcpServer::State::present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data.count(k) > 0; });
}

void TcpServer::State::answer_waiters() {
  for (const auto& c : clients) {
    if (c->dead || c->waiting_op == 0 || !present(c->waiting_keys)) continue;
    send(*c, c->waiting_op == proto::kGet ? ok_str(data.at(c->waiting_keys[0])) : ok());
    c->waiting_op = 0;
    c->waiting_keys.clear();
    // Frames it sent behind the waiting one are handled on its next readable event or here.
    if (!c->in.empty()) handle_frames(*c);
  }
}

void TcpServer::State::send(Client& c, const std::string& frame) {
  c.out += frame;
  flush(c);
}

void TcpServer::State::flush(Client& c) {
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
