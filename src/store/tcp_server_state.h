// The inside of TcpServer (tcp_server.h), shared by its connection handling (tcp_server.cpp)
// and its execution of requests (tcp_server_ops.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/c10d_wire.h"
#include "net/socket.h"
#include "store/store_request.h"
#include "store/tcp_server.h"

namespace dpx::detail {

constexpr auto kNoDeadline = net::Clock::time_point::max();

enum class Speaks { kUnknown, kDpx, kC10dV1, kC10dV2 };

struct ServerClient {
  net::Fd fd;
  std::string in;   // received, not yet handled
  std::string out;  // answers not yet sent
  Speaks speaks = Speaks::kUnknown;
  bool identified = false;  // dpx: its hello was accepted; c10d: a first request parsed
  bool dead = false;
  bool close_after_send = false;
  net::Clock::time_point accepted;
  net::Clock::time_point deadline = kNoDeadline;  // to say who it is, or to finish a request
  std::optional<StoreRequest> pending;  // a get, wait or multi-get whose keys are missing

  bool c10d() const { return speaks == Speaks::kC10dV1 || speaks == Speaks::kC10dV2; }
};

struct TcpServer::State {
  TcpServerOptions options;
  net::Fd listener;
  net::Fd wake;
  net::Fd reserve;  // a spare descriptor (Note [Out of descriptors] in tcp_server.cpp)
  std::vector<std::unique_ptr<ServerClient>> clients;
  std::unordered_map<std::string, std::string> data;
  bool accept_paused = false;  // out of descriptors: accept again once a client leaves
  int unidentified_cap = 1;     // step 1 of Note [Out of descriptors]
  bool said_cap = false;        // the line that says strangers are being pushed out, once

  // tcp_server.cpp: connections.
  void run();
  void accept_clients();
  void admit(int fd);
  bool accept_without_descriptors();
  bool make_room();
  void say_cap_once();
  void refuse(int fd);
  void receive(ServerClient& c);
  void handle_input(ServerClient& c);
  bool identify(ServerClient& c);
  void handle_dpx_frames(ServerClient& c);
  void handle_c10d_requests(ServerClient& c);
  void handle_hello(ServerClient& c, const std::string& body);
  void send(ServerClient& c, const std::string& bytes);
  void flush(ServerClient& c);
  void sweep(net::Clock::time_point now);
  int poll_timeout_ms(net::Clock::time_point now) const;

  // tcp_server_ops.cpp: requests.
  void execute(ServerClient& c, StoreRequest& r);
  bool present(const std::vector<std::string>& keys) const;
  void answer_waiters();
  void answer_pending(ServerClient& c);
  void answer_int(ServerClient& c, std::int64_t v);
  void answer_str(ServerClient& c, const std::string& v);
  void answer_done(ServerClient& c, StoreRequest::Op op);
  void answer_error(ServerClient& c, const std::string& message);
};

// dpx's request body (after its op byte) as a StoreRequest; false when it does not parse.
bool decode_dpx_request(const std::string& body, StoreRequest& out);

}  // namespace dpx::detail
