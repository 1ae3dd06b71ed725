// c10d's backend errors (ProcessGroupGloo's, ProcessGroupNCCL's) as dpx's typed errors. c10d
// reports what happened only in its messages' words, so each backend is a table of the words
// that mean "a peer is gone" and "out of time". Plain string work, so that a machine without a
// GPU tests the nccl table too.
#pragma once

#include <chrono>
#include <exception>
#include <initializer_list>
#include <string>

namespace dpx::detail {

struct BackendErrorWords {
  const char* backend;                          // "gloo": what messages name
  std::initializer_list<const char*> peer_lost;  // -> PeerLostError
  const char* lost_says;                         // its message: "failed: <lost_says> (...)"
  std::initializer_list<const char*> timeout;    // -> TimeoutError
  bool timeout_first;  // which list decides when a message has words of both
};

// Rethrows `e` as PeerLostError or TimeoutError when its message (without LibTorch's
// backtrace) has one of the words, else as DistributedError with c10d's message kept; a dpx
// error passes through unchanged. `op` and `timeout` are what the message says was waited for.
[[noreturn]] void rethrow_backend_error(const std::exception& e, const BackendErrorWords& words,
                                        const std::string& where, const std::string& op,
                                        std::chrono::milliseconds timeout);

}  // namespace dpx::detail
