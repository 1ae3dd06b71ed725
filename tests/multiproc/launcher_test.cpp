// dpxrun on one node: the worker environment, flags and PET_* variables, restarts, the failure
// summary, signals, logs and hung-worker detection. Real processes; every run is bounded.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "support/harness.h"
#include "support/launcher_harness.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;
using Env = std::map<std::string, std::string>;

std::vector<Env> by_rank(std::vector<Env> envs) {
  std::sort(envs.begin(), envs.end(),
            [](const Env& a, const Env& b) { return std::stoi(a.at("RANK")) < std::stoi(b.at("RANK")); });
  return envs;
}

TEST(Launcher, StaticSingleNodeEnvironment) {
  TempDir dir;
  const int port = free_tcp_port();
  auto r = run_launcher(dpxrun_cmd({"--nproc-per-node", "2", "--master-port", std::to_string(port)},
                            {"env", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto envs = by_rank(read_worker_envs(dir.path()));
  ASSERT_EQ(envs.size(), 2u) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    Env& e = envs[rank];
    const std::string s = std::to_string(rank);
    EXPECT_EQ(e["RANK"], s);
    EXPECT_EQ(e["LOCAL_RANK"], s);
    EXPECT_EQ(e["WORLD_SIZE"], "2");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_RANK"], "0");
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(e["ROLE_RANK"], s);
    EXPECT_EQ(e["ROLE_NAME"], "default");
    EXPECT_EQ(e["ROLE_WORLD_SIZE"], "2");
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["MASTER_PORT"], std::to_string(port));
    EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "none");
    EXPECT_EQ(e["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_NE(e["TORCHELASTIC_ERROR_FILE"].find("/attempt_0/" + s + "/error.json"),
              std::string::npos) << e["TORCHELASTIC_ERROR_FILE"];
    EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
  }
  EXPECT_NE(r.output.find("OMP_NUM_THREADS=1"), std::string::npos) << r.output;
}

TEST(Launcher, StandaloneUsesFreshStoreAndRandomRunId) {
  TempDir dir;
  LaunchOptions o;
  o.set_env["OMP_NUM_THREADS"] = "3";
  o.unset_env.clear();
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc_per_node=3"}, {"env", dir.path()}),
                        seconds(60), o);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto envs = by_rank(read_worker_envs(dir.path()));
  ASSERT_EQ(envs.size(), 3u);
  for (auto& e : envs) {
    EXPECT_EQ(e["WORLD_SIZE"], "3");
    EXPECT_EQ(e["TORCHELASTIC_USE_AGENT_STORE"], "False");
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], envs[0]["TORCHELASTIC_RUN_ID"]);
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"].size(), 36u);
    EXPECT_EQ(e["MASTER_PORT"], envs[0]["MASTER_PORT"]);
    EXPECT_NE(e["MASTER_PORT"], "0");
    EXPECT_EQ(e["OMP_NUM_THREADS"], "3");  // the user's value is kept
  }
}

TEST(Launcher, PetVariablesWorkAndFlagsWin) {
  {
    TempDir dir;
    LaunchOptions o;
    o.set_env = {{"PET_NPROC_PER_NODE", "3"}, {"PET_STANDALONE", "1"}, {"PET_MAX_RESTARTS", "4"}};
    auto r = run_launcher(dpxrun_cmd({}, {"env", dir.path()}), seconds(60), o);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto envs = read_worker_envs(dir.path());
    ASSERT_EQ(envs.size(), 3u);
    EXPECT_EQ(envs[0]["TORCHELASTIC_MAX_RESTARTS"], "4");
    EXPECT_EQ(envs[0]["TORCHELASTIC_USE_AGENT_STORE"], "False");
  }
  {
    TempDir dir;
    LaunchOptions o;
    o.set_env = {{"PET_NPROC_PER_NODE", "auto"}, {"PET_RDZV_BACKEND", "c10d"},
                 {"PET_RDZV_ENDPOINT", "127.0.0.1:0"}, {"PET_RDZV_ID", "pet"}};
    auto r = run_launcher(dpxrun_cmd({}, {"env", dir.path()}), seconds(60), o);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto envs = read_worker_envs(dir.path());
    EXPECT_EQ(envs.size(), std::thread::hardware_concurrency());
    EXPECT_EQ(envs[0]["TORCHELASTIC_RUN_ID"], "pet");
  }
  {
    TempDir dir;
    LaunchOptions o;
    o.set_env = {{"PET_NPROC_PER_NODE", "3"}, {"PET_MAX_RESTARTS", "4"}};
    auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "1", "--max_restarts=2"},
                              {"env", dir.path()}),
                          seconds(60), o);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto envs = read_worker_envs(dir.path());
    ASSERT_EQ(envs.size(), 1u);
    EXPECT_EQ(envs[0]["TORCHELASTIC_MAX_RESTARTS"], "2");
  }
}

// torchrun's spellings, and PROGRAM's own arguments passed on untouched even where they look
// like dpxrun's flags.
TEST(Launcher, TorchrunSpellingsAndProgramArgumentsPassThrough) {
  TempDir dir;
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc_per_node=2", "-r3", "--no-python", "-m",
                             "--max_restarts", "1", "--monitor-interval=0.05"},
                            {"env", dir.path(), "--lr", "1", "--nproc-per-node", "5", "-m"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto envs = read_worker_envs(dir.path());
  ASSERT_EQ(envs.size(), 2u) << r.output;
  for (auto& e : envs) {
    EXPECT_EQ(e["ARGS"], "--lr 1 --nproc-per-node 5 -m");
    EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "1");
  }
  TempDir dir2;
  r = run_launcher(dpxrun_cmd({"--standalone", "--"}, {"env", dir2.path(), "--standalone"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  envs = read_worker_envs(dir2.path());
  ASSERT_EQ(envs.size(), 1u) << r.output;
  EXPECT_EQ(envs[0]["ARGS"], "--standalone");
}

TEST(Launcher, HelpListsTheFlagsAndExitsZero) {
  for (const std::string flag : {"-h", "--help"}) {
    auto r = run_launcher({dpxrun_path(), flag}, seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const char* text : {"--nproc-per-node", "-r, --redirects", "--rdzv-conf", "PET_",
                             "--stop-grace"}) {
      EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
    }
  }
}

TEST(Launcher, BadFlagsAreClearErrors) {
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nnodes", "2:1"}, "0 < MIN <= MAX"},
      {{"--nproc-per-node", "many"}, "expected an integer, cpu, gpu or auto"},
      {{"--frobnicate", "1"}, "unknown flag '--frobnicate'"},
      {{"--rdzv-backend", "c10d"}, "needs --rdzv-endpoint"},
      {{"--nnodes", "1:2"}, "static rendezvous needs a fixed number of nodes"},
      {{"-r", "7"}, "0 (none), 1 (stdout), 2 (stderr)"},
      {{"--standalone=maybe"}, "--standalone expects 1/0 or true/false, got 'maybe'"},
      {{"--frobnicate=1"}, "unknown flag '--frobnicate=1'"},
  };
  for (const auto& c : cases) {
    auto r = run_launcher(dpxrun_cmd(c.flags, {"env", "/nonexistent"}), seconds(30));
    EXPECT_EQ(r.exit_code, 2) << c.says << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;  // one line
  }
  auto missing = run_launcher({dpxrun_path(), "--standalone", "--nproc-per-node"}, seconds(30));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--nproc-per-node"), std::string::npos) << missing.output;
  EXPECT_EQ(std::count(missing.output.begin(), missing.output.end(), '\n'), 1) << missing.output;
  auto r = run_launcher({dpxrun_path(), "--standalone", "/no/such/program"}, seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("'/no/such/program' not found"), std::string::npos) << r.output;
}

// torchrun's counts: `gpu` is the GPUs the launcher sees and an error without any, `auto` the
// GPUs when there are some, else the CPUs. Here with CUDA_VISIBLE_DEVICES empty (no GPU
// visible on any machine); LauncherCuda.NprocPerNodeGpuAndAutoCountGpus with GPUs.
TEST(Launcher, NprocPerNodeGpuWithoutGpusIsAClearError) {
  LaunchOptions o;
  o.set_env["CUDA_VISIBLE_DEVICES"] = "";
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "gpu"}, {"env", "/nonexistent"}),
                        seconds(30), o);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node gpu: CUDA is not available"), std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  TempDir dir;
  auto a = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "auto"}, {"env", dir.path()}),
                        seconds(60), o);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(read_worker_envs(dir.path()).size(),
            std::max(1u, std::thread::hardware_concurrency()));
}

TEST(LauncherCuda, NprocPerNodeGpuAndAutoCountGpus) {
  const int gpus = gpus_seen_by_a_child();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string nproc : {"gpu", "auto"}) {
    TempDir dir;
    auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", nproc}, {"env", dir.path()}),
                          seconds(60));
    ASSERT_EQ(r.exit_code, 0) << nproc << "\n" << r.output;
    auto envs = read_worker_envs(dir.path());
    ASSERT_EQ(envs.size(), static_cast<size_t>(gpus)) << nproc << "\n" << r.output;
    EXPECT_EQ(envs[0]["LOCAL_WORLD_SIZE"], std::to_string(gpus));
  }
}

// nan passed the old `x < 0` check, and --monitor-interval nan or join_timeout=nan then made the
// agent wait forever; each must be refused at once (bounded by the run's timeout here).
TEST(Launcher, DurationsMustBeFiniteAndNonNegative) {
  const std::vector<std::vector<std::string>> cases = {
      {"--monitor-interval", "nan"},      {"--monitor-interval", "inf"},
      {"--monitor-interval", "-1"},       {"--rdzv-conf", "join_timeout=nan"},
      {"--rdzv-conf", "join_timeout=inf"}, {"--rdzv-conf", "last_call_timeout=-2"},
      {"--rdzv-conf", "close_timeout=1e300"}, {"--stop-grace", "nan"},
      {"--stop-grace", "-inf"},           {"--heartbeat-timeout", "inf"},
      {"--exit-barrier-timeout", "NaN"},
  };
  for (const auto& flags : cases) {
    auto all = flags;
    all.insert(all.begin(), "--standalone");
    auto r = run_launcher(dpxrun_cmd(all, {"env", "/nonexistent"}), seconds(30));
    EXPECT_FALSE(r.timed_out) << flags[0] << " " << flags[1];
    EXPECT_EQ(r.exit_code, 2) << flags[0] << " " << flags[1] << "\n" << r.output;
    EXPECT_NE(r.output.find("expects a number of seconds from 0 to 1e8, got '"),
              std::string::npos) << r.output;
  }
  LaunchOptions o;
  o.set_env["PET_MONITOR_INTERVAL"] = "nan";
  auto r = run_launcher(dpxrun_cmd({"--standalone"}, {"env", "/nonexistent"}), seconds(30), o);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("got 'nan'"), std::string::npos) << r.output;
}

TEST(Launcher, FailedWorkerRestartsGroupWithCountRaisedAndNewPort) {
  TempDir dir;
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                             "--monitor-interval", "0.05", "--stop-grace", "2"},
                            {"fail-until", "2", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, std::set<std::string>> ports;  // restart count -> MASTER_PORTs
  std::map<std::string, int> starts;
  for (auto& e : read_worker_envs(dir.path())) {
    ports[e["TORCHELASTIC_RESTART_COUNT"]].insert(e["MASTER_PORT"]);
    ++starts[e["TORCHELASTIC_RESTART_COUNT"]];
    EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "2");
  }
  ASSERT_EQ(starts.size(), 3u) << r.output;  // attempts 0, 1, 2
  for (const auto& [count, n] : starts) EXPECT_EQ(n, 2) << "restart " << count;
  std::set<std::string> all;
  for (const auto& [count, p] : ports) {
    EXPECT_EQ(p.size(), 1u) << "restart " << count << ": one port per round";
    all.insert(p.begin(), p.end());
  }
  EXPECT_EQ(all.size(), 3u) << "each round picks a fresh MASTER_PORT";
  EXPECT_NE(r.output.find("restarting the worker group (1 of --max-restarts 2)"),
            std::string::npos) << r.output;
}

TEST(Launcher, RestartsExhaustedFailWithSummary) {
  TempDir dir;
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                             "--monitor-interval", "0.05", "--stop-grace", "2"},
                            {"fail-until", "9", dir.path()}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(read_worker_envs(dir.path()).size(), 4u);
  for (const char* s : {"FAILED", "Root Cause (first observed failure):", "rank      : 1 (local_rank: 1)",
                        "exitcode  : 3", "RuntimeError: rank 1 fails at restart 1",
                        "attempt_1/1/error.json", "host      : "}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
}

TEST(Launcher, ErrorHandlerReportsUncaughtExceptionAndCrash) {
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--monitor-interval", "0.05"}, {"throw"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("std::runtime_error: worker 0 threw on purpose"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("exitcode  : -6"), std::string::npos) << r.output;  // abort()
  auto s = run_launcher(dpxrun_cmd({"--standalone", "--monitor-interval", "0.05"}, {"segv"}));
  EXPECT_EQ(s.exit_code, 1) << s.output;
  EXPECT_NE(s.output.find("FatalSignal: process got signal SEGV (11)"), std::string::npos)
      << s.output;
  EXPECT_NE(s.output.find("exitcode  : -11"), std::string::npos) << s.output;
}

TEST(Launcher, AWorkerWithoutAnErrorFileIsDescribedByWhatItDid) {
  // Handler installed, code returned from main: nothing was thrown, which is what dpxrun says.
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--monitor-interval", "0.05"}, {"return", "7"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("exitcode  : 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the worker exited with code 7 without throwing, so no error file was "
                          "written (its error handler was installed"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("install_error_handler() to get one"), std::string::npos) << r.output;
  // No handler: the hint stays.
  auto b = run_launcher(dpxrun_cmd({"--standalone", "--monitor-interval", "0.05"},
                                   {"return-bare", "5"}));
  EXPECT_EQ(b.exit_code, 1) << b.output;
  EXPECT_NE(b.output.find("the worker exited with code 5 and wrote no error file (call "
                          "dpx::install_error_handler() to get one)"), std::string::npos)
      << b.output;
}

// Starts 3 sleeping workers, sends SIGINT to dpxrun, returns the exit and the workers' pids.
LaunchResult interrupt_sleepers(const std::string& dir, const std::string& how,
                                std::vector<pid_t>& pids) {
  Launch l(dpxrun_cmd({"--standalone", "--nproc-per-node", "3", "--stop-grace", "1"},
               {"sleep", dir, how}));
  const bool started = wait_until([&] {
    pids.clear();
    for (int r = 0; r < 3; ++r) {
      std::ifstream in(dir + "/pid_" + std::to_string(r));
      pid_t p = 0;
      if (in >> p) pids.push_back(p);
    }
    return pids.size() == 3;
  }, seconds(30));
  EXPECT_TRUE(started) << l.output_so_far();
  kill(l.pid(), SIGINT);
  return l.wait(seconds(10));
}

TEST(Launcher, SigintReachesEveryWorkerAndLeavesNoOrphan) {
  for (const char* how : {"plain", "stubborn"}) {  // stubborn workers need the SIGKILL
    TempDir dir;
    std::vector<pid_t> pids;
    auto r = interrupt_sleepers(dir.path(), how, pids);
    EXPECT_FALSE(r.timed_out) << how;
    EXPECT_EQ(r.exit_code, 128 + SIGINT) << how << "\n" << r.output;
    EXPECT_NE(r.output.find("got SIGINT; forwarding it to the workers"), std::string::npos);
    for (pid_t p : pids) EXPECT_FALSE(process_exists(p)) << how << " worker " << p << " survived";
  }
}

TEST(Launcher, ConsoleLinesArePrefixedAndLogFilesFollowTorchrunLayout) {
  TempDir logs;
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path(),
                             "-r1", "--tee", "0:2"},
                            {"print"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // stdout of both ranks only in files; stderr of rank 0 teed (file + console), rank 1 console.
  EXPECT_EQ(r.output.find("hello from rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[default0]:complaint from rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[default1]:complaint from rank 1"), std::string::npos) << r.output;
  const auto runs = list_dir(logs.path());
  ASSERT_EQ(runs.size(), 1u);
  const std::string attempt = logs.path() + "/" + runs[0] + "/attempt_0/";
  EXPECT_EQ(read_file(attempt + "0/stdout.log"), "hello from rank 0\n");
  EXPECT_EQ(read_file(attempt + "1/stdout.log"), "hello from rank 1\n");
  EXPECT_EQ(read_file(attempt + "0/stderr.log"), "complaint from rank 0\n");
  EXPECT_FALSE(path_exists(attempt + "1/stderr.log"));
}

TEST(Launcher, HungWorkerIsDetectedByHeartbeat) {
  TempDir dir;
  auto r = run_launcher(dpxrun_cmd({"--standalone", "--heartbeat-timeout", "1", "--stop-grace", "1",
                             "--monitor-interval", "0.05"},
                            {"hang", dir.path()}),
                        seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(read_file(dir.path() + "/beating_0"), "yes\n");
  EXPECT_NE(r.output.find("hung: no heartbeat for"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpx::test
