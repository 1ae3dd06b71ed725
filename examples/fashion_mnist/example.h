// What main.cpp and fault_tolerant.cpp share: the flags, the network, the progress bar.
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "dpx/data/fashion_mnist.h"
#include "dpx/dpx.h"

namespace example {

struct Flags {
  int64_t epochs = 3;
  int64_t batch_size = 64;  // per rank
  double lr = 2e-3;  // Adam, for the global batch of 2 x 64
  std::string backend = "auto";
  std::string checkpoint_dir = "fashion_mnist_checkpoints";
  int64_t checkpoint_every = 200;  // steps; and at each epoch's end
  std::string metrics_file = "fashion_mnist_metrics.jsonl";
  std::string data_dir = dpx::FashionMNIST::kDefaultRoot;
  int64_t max_steps = -1;    // stop once this many steps were taken in total (smoke tests)
  int64_t train_limit = -1;  // use only the first N training and N/6 test images (smoke tests)
  std::string device = "cpu";  // or "cuda": GPU LOCAL_RANK (one per worker)
  int64_t report_every = 100;  // steps between DDP step reports in the metrics file
  std::string sharding = "none";  // none: a DDP replica per rank; full: fully_shard (FSDP)
  std::string checkpoint_format = "dpx";  // dpx: dpx's own files; dcp: PyTorch DCP folders
  bool checkpoint_async = false;          // dcp: written by a thread while training goes on
  int64_t seed = 0;  // the initial weights and the data's order
  bool fault_tolerant = false;  // under dpxrun --fault-tolerant: dpx::ft::Manager (fault_tolerant.cpp)
};

// conv 32 -> pool -> conv 64 -> pool -> fc 128 -> fc 10. Each layer is held as an FSDPModule: a
// plain module under DDP, a unit that --sharding full can shard.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  dpx::FSDPModule<torch::nn::Conv2dImpl> conv1, conv2;
  dpx::FSDPModule<torch::nn::LinearImpl> fc1, fc2;
};
TORCH_MODULE(Net);

// Fashion-MNIST's mean and standard deviation, which inputs are normalized with.
constexpr double kMean = 0.2860, kStd = 0.3530;

inline void progress_bar(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double rate,
                  double loss) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld  %.0f samples/s  loss %.4f",
               static_cast<long long>(epoch + 1), static_cast<long long>(epochs),
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
               static_cast<long long>(done), static_cast<long long>(total), rate, loss);
  if (!isatty(2) || done == total) std::fprintf(stderr, "\n");
}

// FNV-1a over the parameters' bytes, in order: equal on two ranks exactly when their weights are
// equal to the bit (the run's end compares replicas by it).
inline uint64_t parameter_hash(NetImpl& net) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& p : net.parameters()) {
    const auto bytes = p.detach().to(torch::kCPU).contiguous();
    const auto* b = static_cast<const unsigned char*>(bytes.data_ptr());
    for (size_t i = 0; i < bytes.nbytes(); ++i) hash = (hash ^ b[i]) * 1099511628211ull;
  }
  return hash;
}

inline std::string hex_digest(uint64_t hash) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// Training under dpxrun --fault-tolerant: replica groups that survive lost hosts.
int run_fault_tolerant(const Flags& flags);

}  // namespace example
