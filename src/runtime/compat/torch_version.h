// What differs between the LibTorch releases dpx supports (1.13 to 2.15), in one place
// (docs/architecture.md): code elsewhere asks these names, never TORCH_VERSION_* itself.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/version.h>

namespace dpx::compat {

constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;  // 2.15 -> 215

// For the few differences a declaration must follow (virtual signatures), in src/runtime/compat/
// only.
#define DPX_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= (major) * 100 + (minor))

// Variables the torchrun of this LibTorch's PyTorch gives every worker beyond the launcher
// contract's (spec/launcher.md), each unless the launcher's own environment already sets it:
// the NCCL watchdog switch (TORCH_-prefixed from 2.2 on) and, from 2.9 on, the signals the
// elastic agent forwards to its workers (`--signals-to-handle`). Checked against torchrun 1.13
// and 2.15 by TorchrunInterop.SameEnvironmentAsDpxrun; the versions between follow the release
// each change came with.
inline std::vector<std::pair<std::string, std::string>> torchrun_defaults() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back(kTorchVersion >= 202 ? "TORCH_NCCL_ASYNC_ERROR_HANDLING"
                                        : "NCCL_ASYNC_ERROR_HANDLING",
                   "1");
  if (kTorchVersion >= 209) {
    out.emplace_back("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  }
  return out;
}

}  // namespace dpx::compat
