// The server of dpx's TCP store (protocol in tcp_protocol.h): one thread, non-blocking sockets,
// so that no client can stall another.
//
// Note [Hostile clients]
// c10d's TCPStore server reads a request to its end before it serves anyone else, trusts announced
// lengths and listens on every interface; one client that sends half a request, announces 2 GiB or
// sends garbage stalls or breaks every rank of the job. This server instead
//   - binds only the address it was given;
//   - buffers each client's partial frame on its own, so a slow or silent client delays nobody;
//   - gives a new connection a short deadline (TcpStoreOptions::hello_deadline) to say who it is,
//     and every client a deadline (client_deadline) to finish any request it started; drops it
//     past that, or when a frame announces more than kMaxFrameBytes, or when a body does not
//     parse;
//   - drops a client that does not read its answers (its unsent output passes kMaxFrameBytes);
//   - keeps accepting when connections that never say who they are pile up or descriptors run
//     out (Note [Out of descriptors] in tcp_server.cpp).
// Note [Job token]
// The hello carries the job's token; a client with another token is told so and dropped before it
// can read or write a key. The token keeps stray programs and other jobs out; it is no defence
// against someone who can read the job's environment.
// Note [c10d clients]
// A server made with accept_c10d_clients also serves clients that speak c10d's TCPStore protocol
// (c10d_wire.h), told apart by their first byte (dpx's clients open with kPreamble). Those cannot
// present a token, so they may touch only the keys c10d's clients use: "/..." (TCPStore puts "/"
// before every key of its users) and "init/" (its count of workers); a client that names another
// key is dropped, so the job token still guards everything else (dpxrun's own rendezvous keys).
// The other limits hold for them as for dpx's clients.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace dpx::detail {

struct TcpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  std::chrono::milliseconds client_deadline = std::chrono::seconds(10);
  std::chrono::milliseconds hello_deadline = std::chrono::seconds(2);
  bool accept_c10d_clients = false;  // Note [c10d clients]
  // Connections not yet identified (no hello, no first request) beyond this, or beyond a quarter
  // of ulimit -n, push out the oldest.
  int max_unidentified = 128;
};

// This process's descriptor limit (RLIMIT_NOFILE's soft limit, ulimit -n).
int descriptor_limit();
// How many connections may wait to say who they are (Note [Out of descriptors]): a quarter of
// descriptor_limit(), at most max_unidentified, at least 1.
int unidentified_cap(int max_unidentified);

class TcpServer {
 public:
  // Listens at once (throws DistributedError when the address cannot be bound) and serves
  // on its own thread until destroyed.
  explicit TcpServer(const TcpServerOptions& options);
  ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  int port() const { return port_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  int port_ = 0;
  int wake_write_ = -1;  // a byte here ends the thread
  int owner_pid_ = -1;   // Note [Forked copies] in tcp_server.cpp
  std::thread thread_;
};

}  // namespace dpx::detail
