// A dpx worker program under PyTorch's own launcher (the torchrun of the PyTorch this build's
// LibTorch comes from: 2.15 or 1.13, --no_python): the contract dpxrun implements is torchrun's,
// so both must give a dpx program what it needs.
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "support/launcher_harness.h"
#include "support/python_oracle.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

std::string why_no_torchrun() { return why_python_lacks(DPX_PYTHON, "torch.distributed.run"); }

// Underscored flags, which torchrun 1.13 and 2.x both accept; torchrun 1.13 on Python 3.11 also
// needs its workers' output redirected.
std::vector<std::string> torchrun(const std::string& logs, std::vector<std::string> flags,
                                  std::vector<std::string> worker) {
  std::vector<std::string> out = {DPX_PYTHON, "-m", "torch.distributed.run",
                                  "--no_python", "-r", "2", "-t", "1", "--log_dir", logs};
  out.insert(out.end(), flags.begin(), flags.end());
  out.push_back(test_worker_path());
  out.insert(out.end(), worker.begin(), worker.end());
  return out;
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

// What a launcher adds to its workers' environment: every variable the worker has that the test
// process does not. Not part of the contract: LC_CTYPE, which Python itself (not torchrun) sets
// when it coerces the C locale (PEP 538), and TMPDIR, which run_launcher gives each launcher.
std::map<std::string, std::string> added_by_launcher(std::map<std::string, std::string> env) {
  for (auto it = env.begin(); it != env.end();) {
    const bool inherited = std::getenv(it->first.c_str()) != nullptr &&
                           it->second == std::getenv(it->first.c_str());
    const bool not_contract = it->first == "LC_CTYPE" || it->first == "TMPDIR";
    it = inherited || not_contract ? env.erase(it) : std::next(it);
  }
  return env;
}

std::string keys(const std::map<std::string, std::string>& env) {
  std::string out;
  for (const auto& [k, v] : env) out += k + " ";
  return out;
}

// dpxrun adds exactly the variables torchrun adds, with the same values, for the same command
// line: checked against the installed torchrun itself, not against a list.
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
    auto torchrun_env = added_by_launcher(te[i]), dpxrun_env = added_by_launcher(de[i]);
    // dpxrun's own additions (its heartbeat) are not torchrun's business.
    for (auto it = dpxrun_env.begin(); it != dpxrun_env.end();) {
      it = it->first.rfind("DPX_", 0) == 0 ? dpxrun_env.erase(it) : std::next(it);
    }
    EXPECT_EQ(keys(dpxrun_env), keys(torchrun_env)) << "rank " << i;
    for (auto& [k, v] : torchrun_env) {
      if (k == "TORCHELASTIC_ERROR_FILE") {  // a path under each launcher's own log directory
        EXPECT_NE(dpxrun_env[k].find("/attempt_0/" + std::to_string(i) + "/error.json"),
                  std::string::npos);
        EXPECT_NE(v.find("/attempt_0/" + std::to_string(i) + "/error.json"), std::string::npos);
        continue;
      }
      EXPECT_EQ(dpxrun_env[k], v) << k << " of rank " << i;
    }
  }
}

}  // namespace
}  // namespace dpx::test
