#include "support/netns_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace dpx::test {
namespace {

bool sh(const std::string& c) { return std::system(c.c_str()) == 0; }

// The one maker of namespace pairs, shared with the benchmarks.
const std::string kPair = "bash " DPX_SOURCE_DIR "/scripts/netns_pair.sh";

}  // namespace

TwoHosts::TwoHosts() {
  const std::string id = std::to_string(getpid() % 100000);
  ns_a_ = "dpxa" + id;
  ns_b_ = "dpxb" + id;
  if_a_ = "dva" + id;
  if_b_ = "dvb" + id;
  ok_ = sh(kPair + " up " + ns_a_ + " " + ns_b_ + " " + if_a_ + " " + if_b_ + " " + kAddrA + " " +
           kAddrB);
}

TwoHosts::~TwoHosts() { sh(kPair + " down " + ns_a_ + " " + ns_b_); }

std::string TwoHosts::why_not() {
  if (geteuid() != 0) return "network namespaces need root";
  if (std::system("ip -V >/dev/null 2>&1") != 0) return "the ip tool (iproute2) is missing";
  return "";
}

bool TwoHosts::cut() const { return sh("ip -n " + ns_a_ + " link set " + if_a_ + " down"); }

bool TwoHosts::black_hole_on_b(const std::string& address) const {
  return sh("ip -n " + ns_b_ + " neigh add " + address + " lladdr 02:00:00:00:00:99 dev " + if_b_ +
            " nud permanent");
}

void TwoHosts::enter(const std::string& ns, const std::string& ifname) {
  const std::string path = "/var/run/netns/" + ns;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot enter network namespace " + path + ": " + why);
  }
  ::close(fd);
  ::setenv("GLOO_SOCKET_IFNAME", ifname.c_str(), 1);
}

LaunchOptions TwoHosts::gloo_if(const std::string& ifname) {
  LaunchOptions o;
  o.set_env["GLOO_SOCKET_IFNAME"] = ifname;
  return o;
}

}  // namespace dpx::test
