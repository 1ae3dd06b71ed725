// The errors dpx raises, in one header at the bottom of the library so that every layer throws
// them without including another layer. Callers' mistakes are TORCH_CHECK (c10::Error); faults of
// a job at run time are the small typed family below, so an agent or a training loop can tell a
// lost peer from a bug (as Gloo separates IoException from its assertions).
//
//   std::runtime_error
//     DistributedError          a fault of the group at run time
//       TimeoutError            a blocking call ran out of time
//       PeerLostError           a peer died or closed its connection
//       MismatchError           ranks called different collectives
//       ProcessFailedError      a worker of dpx::spawn failed
//     CheckpointError           a checkpoint file missing, truncated or corrupt
//   c10::Error
//     ReplicaError              a replica's forward or backward threw (DataParallel)
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
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

// Ranks called different collectives (another op, size, dtype, root or order). Every rank
// raises it before any data moves, and the group stays usable (Note [Consistency]).
class MismatchError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// A worker of spawn() failed: `rank` is the first one that did, `message` what it threw (from
// its error file), or its exit code / signal when it left no message.
class ProcessFailedError : public DistributedError {
 public:
  ProcessFailedError(const std::string& what, int rank, int exit_code, int signal)
      : DistributedError(what), rank(rank), exit_code(exit_code), signal(signal) {}
  int rank;
  int exit_code;  // -1 when killed by a signal
  int signal;
};

// A checkpoint file that is missing, truncated or corrupt; the message names the file.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An exception thrown by a replica's forward (or, under DataParallel, its backward), re-raised
// in the caller: "Caught <type> in replica N on device <dev>.", then the original message.
// The original exception stays available through original().
class ReplicaError : public c10::Error {
 public:
  ReplicaError(int64_t replica, c10::Device device, std::exception_ptr original);
  int64_t replica() const { return replica_; }
  c10::Device device() const { return device_; }
  std::exception_ptr original() const { return original_; }

 private:
  int64_t replica_;
  c10::Device device_;
  std::exception_ptr original_;
};

}  // namespace dpx
