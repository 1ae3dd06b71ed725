#include "comm/plan/placement.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <map>
#include <set>

#include "store/round.h"
#include "runtime/cuda/local_device.h"

namespace dpx::detail {

std::string namespace_of(const char* kind) {
  char buf[64] = {0};
  const std::string link = std::string("/proc/self/ns/") + kind;
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

bool HostLayout::shares_a_host() const {
  for (const auto& ranks : ranks_of) {
    if (ranks.size() > 1) return true;
  }
  return false;
}

HostLayout host_layout(const std::vector<std::string>& identities) {
  TORCH_INTERNAL_ASSERT(!identities.empty(), "host_layout of no ranks");
  HostLayout l;
  std::map<std::string, int> host_index;
  for (int r = 0; r < static_cast<int>(identities.size()); ++r) {
    auto [it, added] = host_index.emplace(identities[r], l.hosts());
    if (added) l.ranks_of.emplace_back();
    auto& ranks = l.ranks_of[it->second];
    l.host_of.push_back(it->second);
    l.local_rank_of.push_back(static_cast<int>(ranks.size()));
    ranks.push_back(r);
  }
  return l;
}

// Note [What a host is]
// Two ranks are on one host when they share the hostname, the kernel (boot id), the network
// namespace and the pid namespace. Hostnames alone repeat across containers and machines, so
// the boot id goes with them. The namespaces go with them because a host, to dpx, is what the
// shm backend can join and what the network sees as one machine:
//  - shm set-up opens rank 0's memory file through /proc/<pid>/fd, which fails across pid
//    namespaces (containers on one machine): such ranks must not be put on shm by `auto`.
//  - shared memory itself does cross network namespaces (the namespaces of one kernel share
//    /proc and memory), but ranks in separate network namespaces are containers, pods, or the
//    emulated hosts dpx's multi-host tests and benchmarks run on (tests/support/netns_hosts.h):
//    with the same hostname and boot id they would look like one host, `auto` would join them
//    with shm, and the multi-host paths (gloo, hierarchical) would never run there. Splitting
//    them costs shm's speed only to ranks that share a pid namespace across network
//    namespaces, which `DPX_BACKEND=shm` still joins.
std::string host_identity() {
  char host[HOST_NAME_MAX + 1] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(host) + "/" + boot_id + "/" + namespace_of("net") + "/" +
         namespace_of("pid");
}

std::string device_identity(const c10::Device& device) {
  return device.is_cpu() ? "cpu" : gpu_identity(device.index());
}

Placement placement_of(const std::vector<std::string>& entries) {
  std::vector<std::string> hosts;
  std::set<std::string> seen;  // "host\ndevice"
  Placement p;
  for (const auto& e : entries) {
    hosts.push_back(e.substr(0, e.find('\n')));
    if (!seen.insert(e).second) p.device_shared = true;
  }
  p.hosts = host_layout(hosts);
  return p;
}

Placement gather_placement(Store& store, int rank, int size, const c10::Device& device,
                           std::chrono::milliseconds timeout) {
  return placement_of(store_all_gather(store, "placement", rank, size,
                                       host_identity() + "\n" + device_identity(device), timeout));
}

}  // namespace dpx::detail
