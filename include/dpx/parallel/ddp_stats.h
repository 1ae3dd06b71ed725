// Runtime statistics of a DistributedDataParallel module (PyTorch's DDP logging data, in C++).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpx {

struct DdpStats {
  std::vector<std::int64_t> bucket_sizes_bytes;   // current layout, bucket 0 first
  std::vector<std::size_t> bucket_num_parameters;
  std::int64_t iterations = 0;        // backward passes whose gradients were synchronised
  bool buckets_rebuilt = false;       // the one rebuild in observed gradient order happened
  // Averages over synchronised iterations, in milliseconds.
  double avg_forward_ms = 0;          // the wrapped forward, buffer broadcast included
  double avg_backward_compute_ms = 0; // end of forward to the last gradient being ready
  double avg_backward_comm_ms = 0;    // first bucket launched to every bucket reduced
  double avg_exposed_comm_ms = 0;     // communication not hidden behind backward compute
};

}  // namespace dpx
