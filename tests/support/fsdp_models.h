// Models for the fully_shard tests: units of several sizes whose rows do not divide by the
// world sizes tested (2, 3, 4), a unit with a frozen parameter, parameters outside any unit
// (the root's), a buffer, and a variant with a tied parameter.
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <string>
#include <vector>

#include "dpx/fsdp/fully_shard.h"

namespace dpx::test {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out, bool frozen_bias = false)
      : fc(register_module("fc", torch::nn::Linear(in, out))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out})))) {
    if (frozen_bias) fc->bias.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(norm(fc(x))); }
  torch::nn::Linear fc;
  torch::nn::LayerNorm norm;
};

// embed (root) -> blocks 13, 3 (frozen bias), 9 rows -> head (root) * scale (a buffer). With
// `tied`, the head multiplies by embed's weight (one parameter, two names), both in the root.
struct ShardNetImpl : torch::nn::Module {
  explicit ShardNetImpl(bool tied = false) : tied_(tied) {
    embed = register_module("embed", torch::nn::Linear(6, 8));
    const std::vector<std::pair<int64_t, int64_t>> sizes = {{8, 13}, {13, 3}, {3, 9}};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      blocks.emplace_back(register_module(
          "blocks" + std::to_string(i),
          std::make_shared<BlockImpl>(sizes[i].first, sizes[i].second, i == 1)));
    }
    head = register_module("head", torch::nn::Linear(9, tied ? 8 : 4));
    if (tied) head_weight = register_parameter("head_weight", embed->weight);
    scale = register_buffer("scale", torch::linspace(0.5, 1.5, tied ? 6 : 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = embed(x);
    for (auto& b : blocks) h = b(h);
    h = head(h);
    if (tied_) h = torch::matmul(h, head_weight);  // [.., 8] x [8, 6]
    return h * scale;
  }
  bool tied_;
  torch::nn::Linear embed{nullptr}, head{nullptr};
  std::vector<dpx::FSDPModule<BlockImpl>> blocks;
  torch::Tensor head_weight, scale;
};
TORCH_MODULE(ShardNet);

// The same initial model for every caller (threads as ranks share torch's generator).
inline ShardNet make_shard_net(bool tied = false, torch::Dtype dtype = torch::kDouble) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  torch::manual_seed(7);
  ShardNet net(tied);
  net->to(dtype);
  return net;
}

// Applies fully_shard to the blocks, then to the root.
inline dpx::FSDPModule<ShardNetImpl> shard(ShardNet& net, std::shared_ptr<ProcessGroup> pg,
                                           const FullyShardOptions& options = {}) {
  for (auto& b : net->blocks) dpx::fully_shard(b, pg, options);
  return dpx::fully_shard(net, pg, options);
}

inline std::vector<std::pair<std::string, torch::Tensor>> named_state(torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

// Each parameter once (a tied one has two names), as Python's module.parameters() lists them.
inline std::vector<torch::Tensor> unique_parameters(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) {
    bool seen = false;
    for (const auto& q : out) seen = seen || q.is_same(p);
    if (!seen) out.push_back(p);
  }
  return out;
}

// The optimizers of the parity tests (tests/python/fsdp_reference.py uses the same).
inline std::unique_ptr<torch::optim::Optimizer> sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
}
inline std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::AdamW>(params,
                                               torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

}  // namespace dpx::test
