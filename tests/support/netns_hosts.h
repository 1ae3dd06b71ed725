// Two "hosts" for multi-node tests: network namespaces joined by a veth pair, 10.213.0.1 (a) and
// 10.213.0.2 (b), each with its own loopback and port space, made and removed (whatever
// happens) by scripts/netns_pair.sh, as the benchmarks' are.
#pragma once

#include <string>
#include <vector>

#include "support/launcher_harness.h"

namespace dpx::test {

class TwoHosts {
 public:
  static constexpr const char* kAddrA = "10.213.0.1";
  static constexpr const char* kAddrB = "10.213.0.2";

  TwoHosts();
  ~TwoHosts();
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  // Why the namespaces cannot be made here ("" when they can): for GTEST_SKIP.
  static std::string why_not();
  bool ok() const { return ok_; }
  // Command prefixes that run a program on host a or b.
  std::vector<std::string> exec_a() const { return {"ip", "netns", "exec", ns_a_}; }
  std::vector<std::string> exec_b() const { return {"ip", "netns", "exec", ns_b_}; }
  // GLOO_SOCKET_IFNAME naming each host's interface.
  LaunchOptions env_a() const { return gloo_if(if_a_); }
  LaunchOptions env_b() const { return gloo_if(if_b_); }
  // The namespaces' names (under /var/run/netns/) and each host's interface.
  const std::string& netns_a() const { return ns_a_; }
  const std::string& netns_b() const { return ns_b_; }
  const std::string& ifname_a() const { return if_a_; }
  const std::string& ifname_b() const { return if_b_; }
  // Moves the calling process (forked child) onto host a or b (setns), with GLOO_SOCKET_IFNAME
  // naming that host's interface; throws std::runtime_error when it cannot.
  void enter_a() const { enter(ns_a_, if_a_); }
  void enter_b() const { enter(ns_b_, if_b_); }
  // Takes host a's link down: both hosts stay up but cannot reach each other.
  bool cut() const;
  // Makes `address` (in the hosts' subnet) a black hole seen from host b: b sends to a hardware
  // address nobody has, so a connection request there is never answered, never refused.
  bool black_hole_on_b(const std::string& address) const;

 private:
  static LaunchOptions gloo_if(const std::string& ifname);
  static void enter(const std::string& ns, const std::string& ifname);
  std::string ns_a_, ns_b_, if_a_, if_b_;
  bool ok_ = false;
};

}  // namespace dpx::test
