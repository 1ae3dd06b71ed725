#include "dpxrun/check.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dpxrun/net.h"

namespace dpxrun {
namespace {

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// One TCP connect to host:port bounded by `timeout`; "" when it was accepted, else why not.
std::string connect_once(const addrinfo& a, double timeout) {
  const int fd = ::socket(a.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  std::string why;
  if (::connect(fd, a.ai_addr, a.ai_addrlen) != 0 && errno != EINPROGRESS) {
    why = std::strerror(errno);
  } else {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout * 1000)) <= 0) {
      why = "no answer (connection timed out)";
    } else {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) why = std::strerror(err);
    }
  }
  ::close(fd);
  return why;
}

// Tries to reach host:port until `timeout` passes (the store's node may start later than this
// one); "" when it answered, else the last reason it did not.
std::string reach(const std::string& host, int port, double timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return std::string("the name does not resolve (") + ::gai_strerror(rc) + ")";
  const double deadline = seconds_now() + timeout;
  std::string why;
  while (true) {
    why = connect_once(*found, std::max(0.1, std::min(2.0, deadline - seconds_now())));
    if (why.empty() || seconds_now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a retry, not an ordering
  }
  ::freeaddrinfo(found);
  return why;
}

std::string problem(const std::string& what) {
  return "dpxrun --check: PROBLEM on host " + hostname() + ": " + what;
}

// Node 0 of a static rendezvous serves the store at --master-addr:--master-port.
void check_store_server(const std::string& host, int port, const char* flags,
                        std::vector<std::string>& out) {
  if (!is_local_host(host)) {
    out.push_back(problem(std::string(flags) + " names " + host + ", which is not an address "
                          "of this host, but this node serves the rendezvous store there; give "
                          "every node this host's own name or IP"));
  } else if (port != 0 && port_in_use(port)) {
    out.push_back(problem("port " + std::to_string(port) + " of this host is already taken by "
                          "another program, so the rendezvous store cannot listen on " + host +
                          ":" + std::to_string(port) + "; choose a free port (the same on every "
                          "node) or stop what holds it"));
  }
}

void check_store_client(const std::string& host, int port, const char* flags, double timeout,
                        std::vector<std::string>& out) {
  const std::string why = reach(host, port, timeout);
  if (why.empty()) return;
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", timeout);
  out.push_back(problem("cannot reach the rendezvous store at " + host + ":" +
                        std::to_string(port) + " (" + flags + ") within " + secs + " s: " + why +
                        "; check that it is the store node's address as this host reaches it, "
                        "that dpxrun runs there with the same port, and that no firewall blocks "
                        "the port"));
}

}  // namespace

std::vector<std::string> check_node(const Config& c) {
  std::vector<std::string> out;
  const double timeout = std::min(kCheckTimeout, c.timeouts.join);
  if (c.standalone) return out;
  if (c.is_static()) {
    const char* flags = "--master-addr, --master-port";
    if (c.node_rank == 0) {
      check_store_server(c.master_addr, c.master_port, flags, out);
    } else {
      check_store_client(c.master_addr, c.master_port, flags, timeout, out);
    }
    return out;
  }
  // c10d: the first agent on the endpoint's host serves it; a port already taken there may be
  // another agent of this job, so it is probed like a remote endpoint.
  if (!is_local_host(c.rdzv_host) || (c.rdzv_port != 0 && port_in_use(c.rdzv_port))) {
    check_store_client(c.rdzv_host, c.rdzv_port, "--rdzv-endpoint", timeout, out);
  }
  return out;
}

bool check_node_before_rendezvous(const Config& config) {
  const auto problems = check_node(config);
  for (const auto& p : problems) std::printf("%s\n", p.c_str());
  if (!problems.empty()) {
    say_check_result(1);
    return false;
  }
  ::setenv(kCheckWorkerVariable, "1", 1);
  return true;
}

void say_check_result(int exit_code) {
  std::printf("dpxrun --check: %s\n",
              exit_code == 0 ? "this node found no problem"
                             : "this node found problems; the lines above say what to do");
  std::fflush(stdout);
}

}  // namespace dpxrun
