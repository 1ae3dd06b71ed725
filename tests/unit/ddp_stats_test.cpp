// dpx::to_json(DdpStats): the field names and units of PyTorch's DDP logging data.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dpx/ddp/ddp_stats.h"

namespace dpx {
namespace {

TEST(DdpStatsJson, PythonNamesAndNanoseconds) {
  DdpStats s;
  s.rank = 1;
  s.world_size = 4;
  s.backend = "shm";
  s.iterations = 12;
  s.bucket_sizes_bytes = {1611304, 75264};
  s.bucket_num_parameters = {4, 4};
  s.buckets_rebuilt = true;
  s.avg_forward_ms = 2.5;
  s.avg_backward_compute_ms = 7.25;
  s.avg_backward_comm_ms = 1.125;
  s.avg_overlap_ms = 0.875;
  s.avg_exposed_comm_ms = 0.25;
  s.forward_ms = 3;
  s.unused_parameters = 2;
  s.unused_parameter_bytes = 48;
  s.bucket_cap_bytes = 25 << 20;
  s.find_unused_parameters = true;
  const auto j = nlohmann::json::parse(to_json(s));
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["backend_name"], "shm");
  EXPECT_EQ(j["iteration"], 12);
  EXPECT_EQ(j["bucket_sizes"], nlohmann::json({1611304, 75264}));
  EXPECT_EQ(j["has_rebuilt_buckets"], true);
  EXPECT_EQ(j["avg_forward_compute_time"], 2500000);
  EXPECT_EQ(j["avg_backward_compute_time"], 7250000);
  EXPECT_EQ(j["avg_backward_comm_time"], 1125000);
  EXPECT_EQ(j["avg_backward_compute_comm_overlap_time"], 875000);
  EXPECT_EQ(j["avg_exposed_comm_time"], 250000);
  EXPECT_EQ(j["forward_compute_time"], 3000000);
  EXPECT_EQ(j["unused_parameter_size"], 48);
  EXPECT_EQ(j["unused_parameter_count"], 2);
  EXPECT_EQ(j["bucket_cap_bytes"], 25 << 20);
  EXPECT_EQ(j["find_unused_parameters"], true);
  EXPECT_EQ(j["comm_hook"], "");
}

}  // namespace
}  // namespace dpx
