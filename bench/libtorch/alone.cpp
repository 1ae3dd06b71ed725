// A LibTorch process that loads nothing else: the baseline of a rank's memory (bench/pss.sh,
// docs/scaling.md). Linked as a user links LibTorch (the `torch` target: the CUDA libraries come
// with a CUDA build), it runs one small operation on one thread, as a rank would before its
// first real work, and prints its /proc/self/smaps_rollup figures as one line of JSON, in KiB.
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <string>

int main() {
  torch::set_num_threads(1);
  const auto sum = (torch::ones({64, 64}) * 2).sum().item<double>();
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key, line;
  std::cout << "{\"check\": " << sum;
  while (rollup >> key) {
    long kib = 0;
    if (key.back() == ':' && (rollup >> kib)) {
      std::cout << ", \"" << key.substr(0, key.size() - 1) << "_kib\": " << kib;
    }
    std::getline(rollup, line);
  }
  std::cout << "}\n";
}
