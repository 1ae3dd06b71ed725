#include "store/job_token.h"

#include "runtime/env_read.h"

namespace dpx::detail {

// Read here rather than in dpx::Env: only the store's creation needs them.
std::string job_token_from_env() {
  for (const char* name : {"DPX_STORE_TOKEN", "TORCHELASTIC_RUN_ID"}) {
    if (auto v = env_string(name)) return *v;
  }
  return "";
}

}  // namespace dpx::detail
