// Programs started by mpirun and srun with no wrapper (Note [Schedulers]) and `srun dpxrun`
// (Note [srun dpxrun]) train exactly as under dpxrun; Slurm runs as a private cluster on this
// machine (tests/support/slurm_cluster.h).
#include <algorithm>
#include <fstream>
#include <iterator>

#include "support/launcher_harness.h"
#include "support/slurm_cluster.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;
using Env = std::map<std::string, std::string>;

// Nothing of the test process's own launcher contract leaks into the job.
LaunchOptions clean(LaunchOptions o = {}) {
  o.unset_env.insert(o.unset_env.end(), {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"});
  return o;
}

// The parameters after test_worker's `train` on two ranks started by dpxrun: the reference.
const std::string& reference_params() {
  static const std::string params = [] {
    TempDir dir;
    auto r = run_launcher({dpxrun_path(), "--standalone", "--nproc-per-node", "2",
                           test_worker_path(), "train", dir.path()},
                          seconds(120), clean());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_file(dir.path() + "/params");
  }();
  return params;
}

TEST(Schedulers, MpirunStartsRanksWithNoWrapper) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const std::string& expected = reference_params();
  ASSERT_FALSE(expected.empty());
  TempDir dir;
  // No MASTER_*: one host, so the master is 127.0.0.1, on a port derived from the MPI job id.
  auto r = run_launcher({"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                         test_worker_path(), "train", dir.path()},
                        seconds(120), clean());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/params"), expected);
}

TEST(Schedulers, SrunStartsRanksWithNoWrapper) {
  SlurmCluster slurm;
  if (!slurm.why_not().empty()) GTEST_SKIP() << slurm.why_not();
  const std::string& expected = reference_params();
  ASSERT_FALSE(expected.empty());
  TempDir dir;
  auto r = run_launcher({"srun", "--nodes", "1", "--ntasks", "2", "--time", "2",
                         test_worker_path(), "train", dir.path()},
                        seconds(120), clean(slurm.env()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/params"), expected);
}

TEST(Schedulers, SrunDpxrunDerivesNodesAndRendezvousFromSlurm) {
  SlurmCluster slurm;
  if (!slurm.why_not().empty()) GTEST_SKIP() << slurm.why_not();
  const std::string& expected = reference_params();
  ASSERT_FALSE(expected.empty());
  TempDir dir;
  auto r = run_launcher({"srun", "--nodes", "1", "--ntasks-per-node", "1", "--time", "2",
                         dpxrun_path(), "--nproc-per-node", "2", test_worker_path(), "train",
                         dir.path()},
                        seconds(120), clean(slurm.env()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/params"), expected);
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "dpxrun: Slurm job [0-9]+: --nnodes 1 --rdzv-id slurm-[0-9]+ "
                            "--node-rank 0 --master-addr " + slurm.node() +
                            " --master-port [0-9]+"));
}

// The batch script of docs/launcher.md ("Slurm and mpirun") on one node: a check, then training.
TEST(Schedulers, SbatchScriptAsDocumented) {
  SlurmCluster slurm;
  if (!slurm.why_not().empty()) GTEST_SKIP() << slurm.why_not();
  const std::string& expected = reference_params();
  ASSERT_FALSE(expected.empty());
  TempDir dir;
  const std::string script = dir.path() + "/job.sh";
  // The trap reports the script's exit status in a file: waiting for it is faster than
  // sbatch --wait, which polls the controller at growing intervals.
  std::ofstream(script) << "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n"
                        << "#SBATCH --time=2\n#SBATCH --output=" << dir.path() << "/out.txt\n"
                        << "set -euo pipefail\n"
                        << "trap 'echo $? > " << dir.path() << "/status.tmp && mv "
                        << dir.path() << "/status.tmp " << dir.path() << "/status' EXIT\n"
                        << "srun " << dpxrun_path() << " --check --nproc-per-node 2\n"
                        << "srun " << dpxrun_path() << " --nproc-per-node 2 --max-restarts 2 "
                        << test_worker_path() << " train " << dir.path() << "\n";
  auto r = run_launcher({"sbatch", script}, seconds(30), clean(slurm.env()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const bool ended = wait_until([&] { return !read_file(dir.path() + "/status").empty(); },
                                seconds(120));
  const std::string out = read_file(dir.path() + "/out.txt");
  ASSERT_TRUE(ended) << out;
  ASSERT_EQ(read_file(dir.path() + "/status"), "0\n") << out;
  EXPECT_NE(out.find("dpxrun --check: this node found no problem"), std::string::npos) << out;
  EXPECT_EQ(read_file(dir.path() + "/params"), expected) << out;
}

// The mpi backend started by Slurm itself (srun --mpi=pmix, no mpirun): MPI's world comes from
// PMIx, and the ranks train exactly as dpxrun's do over shm. Skipped where dpx has no MPI or
// Slurm has no pmix plugin.
TEST(Schedulers, SrunPmixStartsTheMpiBackend) {
  if (!DPX_TEST_WITH_MPI) GTEST_SKIP() << "dpx built without an MPI";
  SlurmCluster slurm;
  if (!slurm.why_not().empty()) GTEST_SKIP() << slurm.why_not();
  LaunchOptions list = clean(slurm.env());
  auto plugins = run_launcher({"srun", "--mpi=list"}, seconds(30), list);
  if (plugins.output.find("pmix") == std::string::npos) {
    GTEST_SKIP() << "this Slurm has no pmix plugin:\n" << plugins.output;
  }
  const std::string& expected = reference_params();
  ASSERT_FALSE(expected.empty());
  TempDir dir;
  LaunchOptions o = clean(slurm.env());
  o.set_env["DPX_TEST_BACKEND"] = "mpi";
  auto r = run_launcher({"srun", "--mpi=pmix", "--nodes", "1", "--ntasks", "2", "--time", "2",
                         test_worker_path(), "train", dir.path()},
                        seconds(120), o);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/backend"), "mpi") << r.output;
  EXPECT_EQ(read_file(dir.path() + "/params"), expected) << r.output;
}

// A Slurm step's variables as srun sets them, without a cluster: what dpxrun derives.
LaunchOptions fake_step(const std::string& tasks, int port) {
  LaunchOptions o = clean();
  o.set_env = {{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"},
               {"SLURM_NODEID", "0"}, {"SLURM_STEP_NUM_NODES", "1"},
               {"SLURM_STEP_NUM_TASKS", tasks}, {"SLURM_STEP_NODELIST", "localhost"},
               {"MASTER_PORT", std::to_string(port)}};
  o.unset_env.erase(std::remove(o.unset_env.begin(), o.unset_env.end(), "MASTER_PORT"),
                    o.unset_env.end());
  return o;
}

TEST(Schedulers, DpxrunInAFakeSlurmStepTakesItsNodesAndMaster) {
  TempDir dir;
  const int port = free_tcp_port();
  auto r = run_launcher({dpxrun_path(), "--nproc-per-node", "2", "--monitor-interval", "0.05",
                         test_worker_path(), "env", dir.path()},
                        seconds(60), fake_step("1", port));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto envs = read_worker_envs(dir.path());
  ASSERT_EQ(envs.size(), 2u);
  for (auto& e : envs) {
    EXPECT_EQ(e["MASTER_ADDR"], "localhost");
    EXPECT_EQ(e["MASTER_PORT"], std::to_string(port));  // MASTER_PORT wins over the job's port
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "slurm-77");
    EXPECT_EQ(e["WORLD_SIZE"], "2");
  }
}

TEST(Schedulers, DpxrunInASlurmStepWithTwoTasksPerNodeSaysWhatToDo) {
  auto r = run_launcher({dpxrun_path(), test_worker_path(), "print"}, seconds(30),
                        fake_step("2", free_tcp_port()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "dpxrun: error: this Slurm step runs 2 tasks on 1 nodes, but dpxrun is one agent per "
            "node: start it with srun --ntasks-per-node=1 dpxrun ... (and --nproc-per-node for "
            "the workers of each node) (see dpxrun --help)\n");
}

// srun's variables are read once for dpxrun and for its workers (slurm_step()); a malformed or
// missing one is dpxrun's one-line usage error that names it.
TEST(Schedulers, DpxrunInASlurmStepWithABadVariableNamesIt) {
  auto bad_nodes = fake_step("1", free_tcp_port());
  bad_nodes.set_env["SLURM_STEP_NUM_NODES"] = "two";
  auto r = run_launcher({dpxrun_path(), test_worker_path(), "print"}, seconds(30), bad_nodes);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "dpxrun: error: environment variable SLURM_STEP_NUM_NODES must be an "
                      "integer, got 'two' (see dpxrun --help)\n");

  auto no_node = fake_step("1", free_tcp_port());
  no_node.set_env.erase("SLURM_NODEID");
  r = run_launcher({dpxrun_path(), test_worker_path(), "print"}, seconds(30), no_node);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "dpxrun: error: Slurm gives no node index (SLURM_NODEID) (see dpxrun "
                      "--help)\n");
}

}  // namespace
}  // namespace dpx::test
