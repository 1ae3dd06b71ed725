// Runs a function in a forked child under a CPU-time limit, an address-space limit and a
// wall-clock deadline, and says how it ended: for readers of untrusted files, which must not
// crash, hang or exhaust memory whatever the file holds (the checkpoint tests and the pickle
// fuzzer). The child does no intra-op parallel work (OpenMP does not survive fork).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace dpx::test {

struct ChildLimits {
  int cpu_seconds = 10;                         // RLIMIT_CPU: SIGXCPU past it
  double wall_seconds = 60;                     // then SIGKILL (a hang, or a starved machine)
  size_t extra_address_space = size_t{1} << 30;  // RLIMIT_AS: the parent's size plus this
};

struct ChildResult {
  enum Kind { kExited, kSignaled, kTimedOut, kOutOfMemory } kind = kExited;
  int code = -1;        // kExited: the body's return value
  int signal = 0;       // kSignaled
  double seconds = 0;   // wall-clock
  std::string message;  // what the body wrote to `message` (at most 4 KiB)
  bool exited(int c) const { return kind == kExited && code == c; }
  std::string describe() const;
};

// `body` runs in the child; its return value is the exit code. An exception escaping it ends
// the child with code 125 (std::bad_alloc: kOutOfMemory), its what() as the message.
ChildResult run_bounded(const std::function<int(std::string& message)>& body,
                        const ChildLimits& limits = {});

}  // namespace dpx::test
