// What the translators of c10d's backend errors (gloo/translate.cpp, nccl/translate.cpp) share.
#pragma once

#include <exception>
#include <string>

namespace dpx::detail {

// The message of a c10d error without LibTorch's backtrace ("\nException raised from ...").
inline std::string backend_error_text(const std::exception& e) {
  std::string msg = e.what();
  if (auto nl = msg.find("\nException raised from"); nl != std::string::npos) msg.resize(nl);
  return msg;
}

inline bool contains(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}

}  // namespace dpx::detail
