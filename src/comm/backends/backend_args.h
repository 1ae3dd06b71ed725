// What every backend's factory is made from (make_<backend>_group, declared in each backend's
// folder and called by comm/init/factory.cpp).
#pragma once

#include <memory>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"

namespace dpx::detail {

struct BackendArgs {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  ProcessGroup::Options options;
  // mpi only: the group's members as ranks of MPI_COMM_WORLD, in group-rank order (rank and size
  // are then this rank's place among them and their number); empty for all of MPI_COMM_WORLD.
  // Store-based backends need none: their store is already the group's.
  std::vector<int> members;
};

}  // namespace dpx::detail
