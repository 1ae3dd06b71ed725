#include "comm/init/descriptors.h"

#include <c10/util/Exception.h>

#include "dpx/errors.h"
#include "store/tcp_server.h"

namespace dpx::detail {

int descriptors_needed(int world, bool serves_store) {
  const int own = 24 + 2 * (world - 1);
  return serves_store ? own + 4 + world : own;
}

int descriptor_limit_needed(int world, bool serves_store) {
  const int need = descriptors_needed(world, serves_store);
  // Strangers may hold limit / 4 (unidentified_cap): the rest must cover what the rank needs.
  return serves_store ? (need * 4 + 2) / 3 : need;
}

void check_descriptor_limit(int rank, int world, bool serves_store) {
  const int limit = descriptor_limit();
  const int needed = descriptor_limit_needed(world, serves_store);
  TORCH_CHECK(limit >= needed, where(rank, world), "this process may open at most ", limit,
              " files (ulimit -n), and a rank of a ", world, "-rank job needs about ",
              descriptors_needed(world, serves_store), " for its own work",
              serves_store ? ", with the rendezvous store it serves, which lets connections "
                             "that have not said who they are hold a quarter of the limit"
                           : "",
              ": raise the limit to at least ", needed, " (ulimit -n ", needed,
              " or more before starting the job; 1024 is the usual default)");
}

}  // namespace dpx::detail
