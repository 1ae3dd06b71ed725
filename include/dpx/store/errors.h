// Errors of the distributed layer. Callers' mistakes are TORCH_CHECK (c10::Error); faults of
// the group at run time are this small typed family, so an agent or a training loop can tell a
// lost peer from a bug (as Gloo separates IoException from its assertions). The store raises
// them first; dpx/comm/errors.h adds the one only collectives raise.
#pragma once

#include <stdexcept>
#include <string>

namespace dpx {

// "[rank R/W host:pid] ", the prefix of every message the library raises.
std::string where(int rank, int world_size);

class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A blocking call ran out of time (store, collective, rendezvous).
class TimeoutError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// A peer process died or closed its connection while a collective needed it.
class PeerLostError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

}  // namespace dpx
