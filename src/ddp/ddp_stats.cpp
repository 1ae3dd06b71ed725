#include "dpx/ddp/ddp_stats.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace dpx {
namespace {

std::int64_t ns(double ms) { return std::llround(ms * 1e6); }

}  // namespace

std::string to_json(const DdpStats& s) {
  nlohmann::ordered_json j;
  j["rank"] = s.rank;
  j["world_size"] = s.world_size;
  j["backend_name"] = s.backend;
  j["iteration"] = s.iterations;
  j["num_parameter_tensors"] = s.num_parameter_tensors;
  j["total_parameter_size_bytes"] = s.total_parameter_size_bytes;
  j["bucket_cap_bytes"] = s.bucket_cap_bytes;
  j["find_unused_parameters"] = s.find_unused_parameters;
  j["gradient_as_bucket_view"] = s.gradient_as_bucket_view;
  j["static_graph"] = s.static_graph;
  j["comm_hook"] = s.comm_hook ? "registered" : "";
  j["bucket_sizes"] = s.bucket_sizes_bytes;
  j["bucket_num_parameters"] = s.bucket_num_parameters;
  j["has_rebuilt_buckets"] = s.buckets_rebuilt;
  j["unused_parameter_size"] = s.unused_parameter_bytes;
  j["unused_parameter_count"] = s.unused_parameters;
  j["avg_forward_compute_time"] = ns(s.avg_forward_ms);
  j["avg_backward_compute_time"] = ns(s.avg_backward_compute_ms);
  j["avg_backward_comm_time"] = ns(s.avg_backward_comm_ms);
  j["avg_backward_compute_comm_overlap_time"] = ns(s.avg_overlap_ms);
  j["avg_exposed_comm_time"] = ns(s.avg_exposed_comm_ms);
  j["forward_compute_time"] = ns(s.forward_ms);
  j["backward_compute_time"] = ns(s.backward_compute_ms);
  j["backward_comm_time"] = ns(s.backward_comm_ms);
  j["backward_compute_comm_overlap_time"] = ns(s.overlap_ms);
  j["exposed_comm_time"] = ns(s.exposed_comm_ms);
  return j.dump();
}

}  // namespace dpx
