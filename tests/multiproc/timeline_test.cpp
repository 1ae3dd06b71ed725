// The timeline (include/dpx/observe/timeline.h): two ranks train the MLP under DDP with the
// timeline on; each writes its file; the merged trace holds one row per rank with the step's
// events, the buckets' sizes and parameter names, on one clock.
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "multiproc/ddp_models.h"
#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

std::string temp_prefix() {
  return ::testing::TempDir() + "/dpx_timeline_" + std::to_string(::getpid());
}

TEST(Timeline, DdpStepOfTwoRanksMergesIntoOneTrace) {
  const std::string prefix = temp_prefix();
  test::StoreServer server;
  auto results = test::run_processes(2, [&](int rank) {
    auto store = server.client();
    auto pg = new_process_group("shm", store, rank, 2, test::with_timeout(std::chrono::seconds(30)));
    timeline::start(prefix, rank);
    const double offset = timeline::align_clock(*store, rank, 2);
    // One host, one steady clock: the measured offset is the measurement's own error.
    EXPECT_LT(std::abs(offset), 5000.0) << offset;
    torch::manual_seed(5);
    test::Mlp net;
    DistributedDataParallelOptions o;
    o.bucket_cap_mb = 0.004;  // several buckets, before and after the rebuild
    o.first_bucket_cap_mb = 0.004;
    DistributedDataParallel ddp(net, pg, o);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      sgd.zero_grad();
      ddp->forward(torch::randn({4, 16})).sum().backward();
      timeline::Scope s("optimizer.step");
      sgd.step();
    }
    EXPECT_EQ(timeline::write(), prefix + ".rank" + std::to_string(rank) + ".json");
  });
  test::expect_all_ok(results);

  const std::string merged = prefix + ".json";
  timeline::merge(merged, {prefix + ".rank0.json", prefix + ".rank1.json"});
  auto trace = nlohmann::json::parse(test::read_file(merged));
  std::map<std::pair<int, std::string>, int> count;
  std::set<std::string> names_in_buckets;
  double min_ts = 1e300;
  for (const auto& e : trace.at("traceEvents")) {
    const int pid = e.at("pid").get<int>();
    const std::string name = e.at("name").get<std::string>();
    ++count[{pid, name}];
    if (e.contains("ts")) min_ts = std::min(min_ts, e["ts"].get<double>());
    if (e.value("ph", "") == "X") EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();
    if (name == "allreduce") {
      EXPECT_GT(e.at("args").at("bytes").get<int>(), 0);
      for (const auto& p : e.at("args").at("params")) names_in_buckets.insert(p.get<std::string>());
    }
  }
  EXPECT_EQ(min_ts, 0);  // shifted to the earliest event
  for (int pid : {0, 1}) {
    EXPECT_EQ((count[{pid, "process_name"}]), 1);
    EXPECT_EQ((count[{pid, "forward"}]), 3);
    EXPECT_EQ((count[{pid, "backward"}]), 3);
    EXPECT_EQ((count[{pid, "optimizer.step"}]), 3);
    EXPECT_EQ((count[{pid, "wait for buckets"}]), 3);
    EXPECT_GE((count[{pid, "allreduce"}]), 6);  // at least two buckets per step
    EXPECT_EQ((count[{pid, "allreduce"}]), (count[{pid, "bucket ready"}]));
  }
  EXPECT_EQ(names_in_buckets, (std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight",
                                                     "fc2.bias", "fc3.weight", "fc3.bias"}));
  for (const auto& f : {merged, prefix + ".rank0.json", prefix + ".rank1.json"}) {
    std::remove(f.c_str());
  }
}

TEST(Timeline, MergeNamesAnIncompleteFile) {
  const std::string bad = temp_prefix() + ".bad.json";
  { std::ofstream(bad) << "{\"traceEvents\":[{\"name\":"; }
  try {
    timeline::merge(temp_prefix() + ".out.json", {bad});
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + " is not a complete trace"), std::string::npos)
        << e.what();
  }
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace dpx
