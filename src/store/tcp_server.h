// The server of dpx's TCP store (protocol in tcp_protocol.h): one thread, non-blocking sockets,
// so that no client can stall another.
//
// Note [Hostile clients]
// c10d's TCPStore server reads a request to its end before it serves anyone else, trusts announced
// lengths and listens on every interface; one client that sends half a request, announces 2 GiB or
// sends garbage stalls or breaks every rank of the job. This server instead
//   - binds only the address it was given;
//   - buffers each client's partial frame on its own, so a slow or silent client delays nobody;
//   - gives every client a deadline (TcpStoreOptions::client_deadline) to say hello and to finish
//     any frame it started, and drops it past that, or when a frame announces more than
//     kMaxFrameBytes, or when a body does not parse;
//   - drops a client that does not read its answers (its unsent output passes kMaxFrameBytes).
// Note [Job token]
// The hello carries the job's token; a client with another token is told so and dropped before it
// can read or write a key. The token keeps stray programs and other jobs out; it is no defence
// against someone who can read the job's environment.
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
};

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
