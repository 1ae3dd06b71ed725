// The worker program of the launcher tests: one mode per behaviour the tests need.
//   env DIR [ARGS...]       record the environment (every variable) and ARGS in DIR, exit 0
//   fail-until N DIR        record; rank 1 fails (exit 3, error file) while restart count < N
//   throw                   uncaught exception (the error handler writes the error file)
//   segv                    crash with SIGSEGV (the error handler writes the error file)
//   sleep DIR [stubborn]    record pid in DIR, sleep (stubborn: ignore SIGINT and SIGTERM)
//   wait-world W DIR        record; exit 0 once WORLD_SIZE >= W, else wait to be restarted
//   allreduce DIR [SECONDS] gloo all-reduce of rank+1, write the sum to DIR; repeat SECONDS
//                           (first attempt only)
//   hang DIR                heartbeat for a moment, then stop beating and sleep
//   train DIR               DDP on gloo, 20 SGD steps of a small MLP on per-rank data; rank 0
//                           writes the parameters (exact hex floats) to DIR/params
//   print                   one line on stdout and one on stderr
//   return N                exit N from main without throwing, the error handler installed
//   return-bare N           the same without installing it
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "dpx/dpx.h"

namespace {

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

// The words after DIR in `env` mode, joined by spaces: what the launcher passed through.
std::string g_args;

// DIR/env_<restart>_<rank>_<pid>: one KEY=value per line, every variable of the environment
// (the interop test compares the whole set a launcher adds) less multi-line values, ARGS last.
void record(const std::string& dir) {
  const std::string path = dir + "/env_" + var("TORCHELASTIC_RESTART_COUNT") + "_" + var("RANK") +
                           "_" + std::to_string(getpid());
  std::ofstream out(path + ".tmp");
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strchr(*e, '\n') == nullptr) out << *e << "\n";
  }
  out << "ARGS=" << g_args << "\n";
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a file
}

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(s * 1000)));
}

void wait_for_rank0(const std::string& dir, int restart) {
  const std::string prefix = "env_" + std::to_string(restart) + "_0_";
  for (int i = 0; i < 1000; ++i) {  // at most 10 s
    for (const auto& name : dpx::list_dir(dir)) {
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
  bool go_on = true;
  while (go_on) {
    auto t = torch::full({4}, static_cast<float>(pg->rank() + 1));
    pg->allreduce(t)->wait();
    sum = t[0].item<double>();
    if (!announced) {  // tests wait for this before they break something
      std::ofstream(dir + "/running_" + var("RANK") + "_" + var("TORCHELASTIC_RESTART_COUNT"));
      announced = true;
    }
    sleep_s(0.02);
    // Every rank takes the same decision: its own clock alone would let one rank start an
    // all-reduce that a rank which has already stopped never joins.
    auto more = torch::full({1}, std::chrono::steady_clock::now() < until ? 1.0f : 0.0f);
    pg->allreduce(more)->wait();
    go_on = more.item<float>() > 0;
  }
  std::ofstream(dir + "/sum_" + var("RANK")) << sum << " " << pg->size() << "\n";
  return 0;
}

struct MlpImpl : torch::nn::Module {
  MlpImpl() : a(register_module("a", torch::nn::Linear(8, 16))),
              b(register_module("b", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x))); }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Mlp);

// The same job whatever the hosts: the result depends only on WORLD_SIZE (the gloo sum of two
// ranks is exact in either order), so runs on one host and on several compare bit for bit.
// DPX_TEST_BACKEND picks another backend (mpi, under srun --mpi=pmix); the one used is written
// to <dir>/backend.
int train(const std::string& dir) {
  dpx::InitOptions o;
  const char* backend = std::getenv("DPX_TEST_BACKEND");
  o.backend = backend ? backend : "gloo";
  o.timeout = std::chrono::seconds(10);
  auto pg = dpx::init_process_group(o);
  torch::manual_seed(0);
  Mlp net;
  dpx::DistributedDataParallel ddp(net, pg);
  torch::optim::SGD opt(ddp->parameters(), 0.1);
  torch::manual_seed(100 + pg->rank());
  for (int step = 0; step < 20; ++step) {
    auto x = torch::randn({4, 8}), y = torch::randn({4, 1});
    opt.zero_grad();
    torch::mse_loss(ddp->forward(x), y).backward();
    opt.step();
  }
  if (pg->rank() != 0) return 0;
  std::ofstream(dir + "/backend") << pg->backend();
  std::ofstream out(dir + "/params.tmp");
  for (const auto& p : net->parameters()) {
    auto flat = p.detach().contiguous().view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%a\n", flat[i].item<float>());
      out << buf;
    }
  }
  out.close();
  std::rename((dir + "/params.tmp").c_str(), (dir + "/params").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg2 = argc > 2 ? argv[2] : "", arg3 = argc > 3 ? argv[3] : "";
  if (mode == "return-bare") return std::atoi(arg2.c_str());
  dpx::install_error_handler();
  if (mode == "return") {
    std::fprintf(stderr, "test_worker: returning %s\n", arg2.c_str());
    return std::atoi(arg2.c_str());
  }
  if (mode == "env") {
    for (int i = 3; i < argc; ++i) g_args += std::string(i > 3 ? " " : "") + argv[i];
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
  if (mode == "train") {
    return train(arg2);
  }
  if (mode == "print") {
    std::printf("hello from rank %s\n", var("RANK").c_str());
    std::fprintf(stderr, "complaint from rank %s\n", var("RANK").c_str());
    return 0;
  }
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
