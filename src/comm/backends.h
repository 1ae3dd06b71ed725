// The factories of the built-in backends, one per folder under src/comm/.
#pragma once

#include <memory>
#include <string>

#include "dpx/comm/process_group.h"
#include "dpx/comm/store.h"

namespace dpx::detail {

struct BackendArgs {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  ProcessGroup::Options options;
};

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args);
std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args);

// Whether every rank runs on this host (same hostname and boot id), agreed through the store.
bool all_ranks_on_one_host(const BackendArgs& args);

}  // namespace dpx::detail
