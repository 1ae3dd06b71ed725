// The state a joining replica group takes from a peer (Note [Fault-tolerant steps], 5).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpx/ft/manager.h"

namespace dpx::ft {

struct Manager::State {
  torch::nn::Module* module = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  std::vector<at::Tensor> extra;

  // The parameters, buffers, optimizer state and extra tensors as torch::save's bytes.
  std::string save() const;
  // Copies `bytes` (from save() of an identical model) into the registered tensors in place.
  void load(const std::string& bytes);
};

namespace detail {
std::uint64_t checksum(const void* data, std::size_t n);
}

}  // namespace dpx::ft
