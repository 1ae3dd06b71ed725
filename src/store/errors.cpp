#include "dpx/store/errors.h"

#include <unistd.h>

#include <climits>

namespace dpx {

std::string where(int rank, int world_size) {
  char host[HOST_NAME_MAX + 1] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    host[0] = '?';
  }
  return "[rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " " + host + ":" +
         std::to_string(getpid()) + "] ";
}

}  // namespace dpx
