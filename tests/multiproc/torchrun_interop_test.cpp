// A dpx worker program under PyTorch's own launcher (torchrun 1.13, --no_python): the contract
// dpxrun implements is torchrun's, so both must give a dpx program what it needs.
#include <cstdlib>
#include <fstream>
#include <set>

#include "launcher_harness.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

std::string why_no_torchrun() {
  if (std::system("/usr/bin/python3 -c 'import torch.distributed.run' >/dev/null 2>&1") != 0) {
    return "python3-torch is not installed (/usr/bin/python3 cannot import torch.distributed.run)";
  }
  return "";
}

// Python 3.11 with torchrun 1.13 wants underscored flags and redirected worker output.
std::vector<std::string> torchrun(const std::string& logs, std::vector<std::string> flags,
                                  std::vector<std::string> worker) {
  std::vector<std::string> out = {"/usr/bin/python3", "-m", "torch.distributed.run",
                                  "--no_python", "-r", "2", "-t", "1", "--log_dir", logs};
  out.insert(out.end(), flags.begin(), flags.end());
  out.push_back(test_worker_path());
  out.insert(out.end(), worker.begin(), worker.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TorchrunInterop, DpxWorkerAllReducesUnderTorchrunStandalone) {
  if (auto why = why_no_torchrun(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir, logs;
  auto r = run_launcher(torchrun(logs.path(), {"--standalone", "--nproc_per_node", "2"},
                                 {"allreduce", dir.path()}),
                        seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/sum_0"), "3 2\n");
  EXPECT_EQ(read_file(dir.path() + "/sum_1"), "3 2\n");
}

TEST(TorchrunInterop, DpxWorkerUsesTorchrunsAgentStoreInStaticMode) {
  if (auto why = why_no_torchrun(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir, logs;
  auto r = run_launcher(
      torchrun(logs.path(),
               {"--nnodes", "1", "--nproc_per_node", "2", "--master_port",
                std::to_string(free_tcp_port())},
               {"allreduce", dir.path()}),
      seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/sum_1"), "3 2\n");
}

// The keys and values dpxrun sets are the ones torchrun sets, for the same command line.
TEST(TorchrunInterop, SameEnvironmentAsDpxrun) {
  if (auto why = why_no_torchrun(); !why.empty()) GTEST_SKIP() << why;
  TempDir from_torchrun, from_dpxrun, logs;
  const std::string port = std::to_string(free_tcp_port());
  const std::vector<std::string> flags = {"--nnodes", "1", "--nproc_per_node", "2",
                                          "--max_restarts", "3", "--master_port", port};
  auto t = run_launcher(torchrun(logs.path(), flags, {"env", from_torchrun.path()}), seconds(120));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  std::vector<std::string> d = {dpxrun_path()};
  d.insert(d.end(), flags.begin(), flags.end());
  d.insert(d.end(), {test_worker_path(), "env", from_dpxrun.path()});
  auto r = run_launcher(d, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto te = read_worker_envs(from_torchrun.path()), de = read_worker_envs(from_dpxrun.path());
  ASSERT_EQ(te.size(), 2u);
  ASSERT_EQ(de.size(), 2u);
  auto by_rank = [](auto& v) {
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a["RANK"] < b["RANK"]; });
  };
  by_rank(te);
  by_rank(de);
  for (int i = 0; i < 2; ++i) {
    for (auto& [k, v] : te[i]) {
      if (k == "TORCHELASTIC_ERROR_FILE") {  // a path under each launcher's own log directory
        EXPECT_NE(de[i][k].find("/attempt_0/" + std::to_string(i) + "/error.json"),
                  std::string::npos);
        EXPECT_NE(v.find("/attempt_0/" + std::to_string(i) + "/error.json"), std::string::npos);
        continue;
      }
      EXPECT_EQ(de[i][k], v) << k << " of rank " << i;
    }
  }
}

}  // namespace
}  // namespace dpx::test
