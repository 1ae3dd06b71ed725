// Raw TCP connections for tests that play a hostile or foreign client of a store: what they send
// is up to the test, byte for byte.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dpx/store/store.h"

namespace dpx::test {

// An IPv4 socket closed at scope exit.
struct Socket {
  int fd = -1;
  Socket() = default;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
};

// Connects to ip:port (blocking; a gtest failure if it cannot) and sends `bytes`.
Socket raw_client(int port, const std::string& bytes, const char* ip = "127.0.0.1");

// A program that listens on 127.0.0.1 (a free port, written to `port`) and never answers.
Socket foreign_listener(int& port);

// dpx's own store client of 127.0.0.1:port, presenting `token`.
std::shared_ptr<Store> store_client(int port, const std::string& token = "",
                                    std::chrono::milliseconds timeout = std::chrono::seconds(10));

// dpx's opening of a connection: the preamble and a hello with `token`.
std::string dpx_hello(const std::string& token);

// Waits (up to `limit`) until the server closes `fd`, reading and dropping what it sends first.
bool closed_by_server(int fd, std::chrono::milliseconds limit);

// Reads what arrives on `fd` within `limit` ("" when nothing does).
std::string read_some(int fd, std::chrono::milliseconds limit);

}  // namespace dpx::test
