// `auto` backend selection: shm when every rank shares this host. Hostnames alone can repeat
// across containers or machines, so the kernel's boot id goes with it.
#include <unistd.h>

#include <climits>
#include <fstream>
#include <string>
#include <vector>

#include "comm/backends.h"

namespace dpx::detail {

std::string host_identity() {
  char host[HOST_NAME_MAX + 1] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(host) + "/" + boot_id;
}

bool all_ranks_on_one_host(const BackendArgs& args) {
  if (args.size == 1) return true;
  Store& store = *args.store;
  const auto gen = std::to_string(store.add("auto/gen/" + std::to_string(args.rank), 1));
  const std::string prefix = "auto/" + gen + "/host/";
  const std::string mine = host_identity();
  store.set(prefix + std::to_string(args.rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < args.size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, args.options.timeout);
  for (const auto& k : keys) {
    if (store.get(k) != mine) return false;
  }
  return true;
}

}  // namespace dpx::detail
