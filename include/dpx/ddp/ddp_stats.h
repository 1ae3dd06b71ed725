// Runtime statistics of a DistributedDataParallel module (PyTorch's DDP logging data, in C++).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpx {

struct DdpStats {
  std::vector<std::int64_t> bucket_sizes_bytes;   // current layout, bucket 0 first
  std::vector<std::size_t> bucket_num_parameters;
  std::int64_t iterations = 0;        // backward passes whose gradients were synchronised
  bool buckets_rebuilt = false;       // the one rebuild in observed gradient order happened
  // Averages over the sampled synchronised iterations that ran a backward here, as PyTorch's
  // avg_* runtime stats: the first ten, then every hundredth (a rank that has joined early
  // shadows the others' without timing them), in milliseconds. On CUDA, device times
  // (docs/ddp.md, "Statistics").
  std::int64_t timed_iterations = 0;  // how many iterations the averages run over
  double avg_forward_ms = 0;          // the wrapped forward, buffer broadcast included
  double avg_backward_compute_ms = 0; // end of forward to the last gradient being ready
  double avg_backward_comm_ms = 0;    // first bucket launched to every bucket reduced
  double avg_exposed_comm_ms = 0;     // communication not hidden behind backward compute
  // Communication hidden behind backward compute: first bucket launched to the last gradient
  // ready (Python's backward_compute_comm_overlap_time).
  double avg_overlap_ms = 0;
  // The same five times for the last sampled iteration alone.
  double forward_ms = 0, backward_compute_ms = 0, backward_comm_ms = 0, overlap_ms = 0,
         exposed_comm_ms = 0;
  // Parameters that got no gradient in the last iteration (found with find_unused_parameters
  // or static_graph; 0 otherwise), and their bytes.
  std::int64_t unused_parameters = 0;
  std::int64_t unused_parameter_bytes = 0;
  // The set-up, as Python's logging data records it.
  int rank = 0;
  int world_size = 1;
  std::string backend;
  std::int64_t num_parameter_tensors = 0;
  std::int64_t total_parameter_size_bytes = 0;
  std::int64_t bucket_cap_bytes = 0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  bool comm_hook = false;
};

// The statistics as one JSON object with the field names of PyTorch's DDP logging data
// (DistributedDataParallel._get_ddp_logging_data()) and its units: times in nanoseconds, sizes
// in bytes. Fields PyTorch lacks: avg_exposed_comm_time, exposed_comm_time,
// unused_parameter_count, bucket_num_parameters. docs/ddp.md, "Step report".
std::string to_json(const DdpStats& stats);

}  // namespace dpx
