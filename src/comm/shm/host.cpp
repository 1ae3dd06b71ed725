// Host identities, and the `auto` backend choice on the CPU made from them.
#include <unistd.h>

#include <climits>
#include <fstream>
#include <string>
#include <vector>

#include "comm/backends.h"
#include "comm/host_layout.h"
#include "comm/store/round.h"

namespace dpx::detail {
namespace {

// "net:[4026531833]", or "" where /proc does not say.
std::string namespace_of(const char* kind) {
  char buf[64] = {0};
  const std::string link = std::string("/proc/self/ns/") + kind;
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

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

std::vector<std::string> gather_host_identities(const BackendArgs& args) {
  return store_all_gather(*args.store, "auto", args.rank, args.size, host_identity(),
                          args.options.timeout);
}

bool all_ranks_on_one_host(const BackendArgs& args) {
  return host_layout(gather_host_identities(args)).hosts() == 1;
}

std::shared_ptr<ProcessGroup> make_cpu_group(const std::string& backend,
                                             const BackendArgs& args) {
  if (backend == "shm") return make_shm_group(args);
  if (backend == "gloo") return make_gloo_group(args);
  const HostLayout layout = host_layout(gather_host_identities(args));
  const std::string b = choose_cpu_backend(backend, layout);
  if (b == "shm") return make_shm_group(args);
  if (b == "gloo") return make_gloo_group(args);
  return make_hierarchical_group(args, layout);
}

}  // namespace dpx::detail
