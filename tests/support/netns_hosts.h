// Two "hosts" for multi-node tests: network namespaces joined by a veth pair, 10.213.0.1 (a) and
// 10.213.0.2 (b), each with its own loopback and port space. Removed whatever happens.
#pragma once

#include <string>
#include <vector>

#include "launcher_harness.h"

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
  // Takes host a's link down: both hosts stay up but cannot reach each other.
  bool cut() const;

 private:
  static LaunchOptions gloo_if(const std::string& ifname);
  std::string ns_a_, ns_b_, if_a_, if_b_;
  bool ok_ = false;
};

}  // namespace dpx::test
