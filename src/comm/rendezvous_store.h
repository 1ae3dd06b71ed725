// The store init_process_group() would connect to, and this process's rank and world size in
// it, for callers that build several groups on one store (dpxrun --check's worker).
#pragma once

#include <memory>

#include "dpx/comm/init.h"
#include "dpx/store/store.h"

namespace dpx::detail {

struct StoreAndRank {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
};

// As init_process_group(opts) connects (env://, tcp://, file:// or opts.store), without
// making a group.
StoreAndRank rendezvous_store(const InitOptions& opts);

}  // namespace dpx::detail
