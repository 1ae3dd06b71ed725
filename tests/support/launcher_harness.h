// Running dpxrun (or any launcher) as a real process in tests: bounded by a timeout, its whole
// process tree killed whatever happens, output captured.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpx/runtime/files.h"
#include "support/temp_dir.h"

namespace dpx::test {

std::string dpxrun_path();
// `prefix... dpxrun flags... test_worker worker...`
std::vector<std::string> dpxrun_cmd(std::vector<std::string> flags, std::vector<std::string> worker,
                                    std::vector<std::string> prefix = {});
std::string test_worker_path();

struct LaunchResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr, interleaved
};

struct LaunchOptions {
  std::map<std::string, std::string> set_env;
  std::vector<std::string> unset_env = {"OMP_NUM_THREADS"};
};

// A launcher process in the background, in its own process group. The destructor SIGKILLs the
// group (its workers die with it through PR_SET_PDEATHSIG).
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& argv, LaunchOptions options = {});
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // Waits for the exit; on timeout the process group is killed and timed_out is set.
  LaunchResult wait(std::chrono::milliseconds timeout);
  std::string output_so_far() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::string tmpdir_;  // the launcher's TMPDIR: log dirs it keeps after a failure go with it
  bool reaped_ = false;
  LaunchResult result_;
};

LaunchResult run_launcher(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60),
                          LaunchOptions options = {});

// The env_* files test_worker's `record` writes: one map per worker start.
std::vector<std::map<std::string, std::string>> read_worker_envs(const std::string& dir);

int free_tcp_port();
// Whether something accepts TCP connections on 127.0.0.1:port.
bool port_listening(int port);
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);
bool process_exists(pid_t pid);

}  // namespace dpx::test
