#include "store/tcp_client.h"

#include <algorithm>
#include <thread>

#include "store/tcp_protocol.h"
#include "dpx/errors.h"

namespace dpx::detail {

using net::Clock;
namespace proto = store_protocol;

namespace {

std::string read_frame(int fd, Clock::time_point deadline) {
  char head[4];
  net::read_exact(fd, head, sizeof(head), deadline);
  const std::uint32_t n = proto::read_u32(head);
  if (n == 0 || n > proto::kMaxFrameBytes) {
    throw DistributedError("the server answered something that is not dpx's store protocol "
                           "(a frame of " + std::to_string(n) + " bytes)");
  }
  std::string body(n, '\0');
  net::read_exact(fd, body.data(), n, deadline);
  return body;
}

// The answer's payload after an ok status; the server's message as an error otherwise.
std::string payload(const std::string& body) {
  if (static_cast<std::uint8_t>(body[0]) == proto::kOk) return body.substr(1);
  proto::Reader r(body);
  r.u8();
  const std::string message = r.str();
  throw DistributedError(r.ok() ? message : "the server answered with a malformed error");
}

std::int64_t to_int(const std::string& p) {
  proto::Reader r(p);
  const std::int64_t v = r.i64();
  if (!r.done()) throw DistributedError("the server answered with a malformed integer");
  return v;
}

std::string to_str(const std::string& p) {
  proto::Reader r(p);
  std::string v = r.str();
  if (!r.done()) throw DistributedError("the server answered with a malformed value");
  return v;
}

proto::Writer& keys(proto::Writer& w, const std::vector<std::string>& ks) {
  w.i64(static_cast<std::int64_t>(ks.size()));
  for (const auto& k : ks) w.str(k);
  return w;
}

}  // namespace

TcpClient::TcpClient(const TcpClientOptions& options) : options_(options) {
  std::lock_guard<std::mutex> lock(mutex_);
  connect(Clock::now() + options_.timeout);
}

// A server crowded by connections that never say who they are may close this one before its
// hello arrives (Note [Out of descriptors] in tcp_server.cpp); it answers kBusy (read before the
// reset that the late hello draws), and the client connects again until its deadline.
void TcpClient::connect(Clock::time_point deadline) {
  std::string hello(1, static_cast<char>(proto::kPreamble));
  hello.append(proto::Writer().u8(proto::kHello).str(proto::kMagic).str(options_.token).frame());
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::string peer;
    net::Fd fd = net::connect_to(options_.host, options_.port, deadline, &peer);
    std::string answer;
    try {
      net::write_all(fd.get(), hello.data(), hello.size(), deadline);
      answer = read_frame(fd.get(), deadline);
    } catch (const TimeoutError&) {
      throw TimeoutError("a program at " + peer + " accepted the connection but did not answer "
                         "dpx's store handshake; is another program listening on this port?");
    } catch (const PeerLostError&) {
      throw DistributedError("the program listening at " + peer + " closed the connection at "
                             "dpx's store handshake; it is not a dpx store, or one that refused "
                             "this client");
    }
    if (static_cast<std::uint8_t>(answer[0]) == proto::kBusy && Clock::now() + pause < deadline) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
      continue;
    }
    payload(answer);  // a wrong job token throws the server's message (kBusy's, past the deadline)
    fd_ = std::move(fd);
    return;
  }
}

std::string TcpClient::call(const std::string& frame, std::chrono::milliseconds timeout) {
  // The server drops a client whose frame is over the limit, which this client would see as a
  // server gone away: say what is wrong instead, before anything is sent.
  if (frame.size() - 4 > proto::kMaxFrameBytes) {
    throw DistributedError("a store request of " + std::to_string(frame.size() - 4) +
                           " bytes is over the store's limit of " +
                           std::to_string(proto::kMaxFrameBytes >> 20) +
                           " MiB; keep large data out of the store (in files or collectives)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout;
  if (!fd_) connect(deadline);
  std::string body;
  try {
    net::write_all(fd_.get(), frame.data(), frame.size(), deadline);
    body = read_frame(fd_.get(), deadline);
  } catch (...) {
    fd_.reset();  // its answer, if it ever comes, must not be taken for the next call's
    throw;
  }
  return payload(body);
}

void TcpClient::set(const std::string& key, const std::string& value) {
  call(proto::Writer().u8(proto::kSet).str(key).str(value).frame(), options_.timeout);
}

std::string TcpClient::get(const std::string& key) {
  return to_str(call(proto::Writer().u8(proto::kGet).str(key).frame(), options_.timeout));
}

std::int64_t TcpClient::add(const std::string& key, std::int64_t delta) {
  return to_int(call(proto::Writer().u8(proto::kAdd).str(key).i64(delta).frame(),
                     options_.timeout));
}

std::string TcpClient::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  return to_str(call(
      proto::Writer().u8(proto::kCompareSet).str(key).str(expected).str(desired).frame(),
      options_.timeout));
}

bool TcpClient::check(const std::vector<std::string>& ks) {
  proto::Writer w;
  return to_int(call(keys(w.u8(proto::kCheck), ks).frame(), options_.timeout)) != 0;
}

void TcpClient::wait(const std::vector<std::string>& ks, std::chrono::milliseconds timeout) {
  proto::Writer w;
  call(keys(w.u8(proto::kWait), ks).frame(), timeout);
}

bool TcpClient::delete_key(const std::string& key) {
  return to_int(call(proto::Writer().u8(proto::kDelete).str(key).frame(), options_.timeout)) != 0;
}

std::int64_t TcpClient::num_keys() {
  return to_int(call(proto::Writer().u8(proto::kNumKeys).frame(), options_.timeout));
}

void TcpClient::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.timeout = timeout;
}

std::chrono::milliseconds TcpClient::timeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return options_.timeout;
}

}  // namespace dpx::detail
