// The worker program of the launcher tests: one mode per behaviour the tests need.
//   env DIR                 record the contract's environment in DIR, exit 0
//   fail-until N DIR        record; rank 1 fails (exit 3, error file) while restart count < N
//   throw                   uncaught exception (the error handler writes the error file)
//   segv                    crash with SIGSEGV (the error handler writes the error file)
//   sleep DIR [stubborn]    record pid in DIR, sleep (stubborn: ignore SIGINT and SIGTERM)
//   wait-world W DIR        record; exit 0 once WORLD_SIZE >= W, else wait to be restarted
//   allreduce DIR [SECONDS] gloo all-reduce of rank+1, write the sum to DIR; repeat SECONDS
//                           (first attempt only)
//   hang DIR                heartbeat for a moment, then stop beating and sleep
//   print                   one line on stdout and one on stderr
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "dpx/dpx.h"

namespace {

const char* kVars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                       "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
                       "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                       "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                       "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                       "OMP_NUM_THREADS"};

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

// DIR/env_<restart>_<rank>_<pid>: one KEY=value per line.
void record(const std::string& dir) {
  const std::string path = dir + "/env_" + var("TORCHELASTIC_RESTART_COUNT") + "_" + var("RANK") +
                           "_" + std::to_string(getpid());
  std::ofstream out(path + ".tmp");
  for (const char* k : kVars) out << k << "=" << var(k) << "\n";
  // dpxrun's own, recorded only when set: torchrun sets no such variable.
  if (const char* token = std::getenv("DPX_STORE_TOKEN")) out << "DPX_STORE_TOKEN=" << token << "\n";
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a file
}

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(s * 1000)));
}

void wait_for_rank0(const std::string& dir, int restart) {
  const std::string prefix = "env_" + std::to_string(restart) + "_0_";
  for (int i = 0; i < 1000; ++i) {  // at most 10 s
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.find(".tmp") == std::string::npos) return;
    }
    sleep_s(0.01);
  }
}

int allreduce(const std::string& dir, double seconds) {
  dpx::InitOptions o;
  o.backend = "gloo";
  o.timeout = std::chrono::seconds(5);
  auto pg = dpx::init_process_group(o);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  double sum = 0;
  bool announced = false;
  do {
    auto t = torch::full({4}, static_cast<float>(pg->rank() + 1));
    pg->allreduce(t)->wait();
    sum = t[0].item<double>();
    if (!announced) {  // tests wait for this before they break something
      std::ofstream(dir + "/running_" + var("RANK") + "_" + var("TORCHELASTIC_RESTART_COUNT"));
      announced = true;
    }
    sleep_s(0.02);
  } while (std::chrono::steady_clock::now() < until);
  std::ofstream(dir + "/sum_" + var("RANK")) << sum << " " << pg->size() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dpx::install_error_handler();
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg2 = argc > 2 ? argv[2] : "", arg3 = argc > 3 ? argv[3] : "";
  if (mode == "env") {
    record(arg2);
    return 0;
  }
  if (mode == "fail-until") {
    record(arg3);
    const int restart = std::atoi(var("TORCHELASTIC_RESTART_COUNT").c_str());
    if (var("RANK") == "1" && restart < std::atoi(arg2.c_str())) {
      wait_for_rank0(arg3, restart);  // so that every attempt is seen starting both ranks
      dpx::record_error("RuntimeError: rank 1 fails at restart " + std::to_string(restart));
      return 3;
    }
    return 0;
  }
  if (mode == "throw") {
    throw std::runtime_error("worker " + var("RANK") + " threw on purpose");
  }
  if (mode == "segv") {
    raise(SIGSEGV);
  }
  if (mode == "sleep") {
    if (arg3 == "stubborn") {  // only SIGKILL ends it
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, SIG_IGN);
    }
    std::ofstream(arg2 + "/pid_" + var("RANK")) << getpid() << "\n";
    sleep_s(60);
    return 0;
  }
  if (mode == "wait-world") {
    record(arg3);
    if (std::atoi(var("WORLD_SIZE").c_str()) >= std::atoi(arg2.c_str())) return 0;
    sleep_s(60);
    return 1;
  }
  if (mode == "allreduce") {  // SECONDS applies to the first attempt only: restarts finish fast
    const bool first = var("TORCHELASTIC_RESTART_COUNT") == "0";
    return allreduce(arg2, argc > 3 && first ? std::atof(arg3.c_str()) : 0);
  }
  if (mode == "hang") {
    {
      dpx::Heartbeat beat;
      std::ofstream(arg2 + "/beating_" + var("RANK")) << (beat.active() ? "yes" : "no") << "\n";
      sleep_s(0.5);
    }
    sleep_s(60);
    return 0;
  }
  if (mode == "print") {
    std::printf("hello from rank %s\n", var("RANK").c_str());
    std::fprintf(stderr, "complaint from rank %s\n", var("RANK").c_str());
    return 0;
  }
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
