// What every backend's factory is made from (make_<backend>_group, declared in each backend's
// folder and called by comm/init/factory.cpp).
#pragma once

#include <memory>

#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"

namespace dpx::detail {

struct BackendArgs {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  ProcessGroup::Options options;
};

}  // namespace dpx::detail
