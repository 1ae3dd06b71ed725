// dpx-bench ddp: training throughput and CPU cost of dpx DDP against plain LibTorch, the
// hand-written "all-reduce every gradient after backward" loop and PyTorch's Python DDP (and, on
// request, PyTorch's own cost of DDP at 1 rank: Python DDP against the same loop without it).
// Configurations alternate within rounds, in an order rotated each round (this machine is
// noisy); medians, ratios and each round's ratios are reported. Every configuration runs in
// fresh processes forked (or, for Python, spawned) here.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "bench/command.h"
#include "bench/stats.h"
#include "bench/bench_models.h"
#include "dpx/dpx.h"

namespace dpx::bench::ddp_bench {
namespace {

struct Args {
  std::string backend = "gloo";
  int rounds = 3;
  // Timed steps per round; 0: the device's default (steps_of).
  int cnn_steps = 0;
  int mlp_steps = 0;
  std::vector<std::string> steps;  // --steps CONFIG:MODEL=N entries
  int warmup = 2;
  int batch = 64;
  int threads = 1;  // intra-op threads per process
  int mlp_width = 4096;
  int world = 2;  // ranks of the DDP, hand-written and Python configurations; independent processes
  std::string device = "cpu";  // or cuda: process r on GPU r (modulo the GPUs present)
  bool python = true;
  std::vector<std::string> models = {"cnn", "mlp"};
  // empty: all but the opt-in ones (is_opt_in)
  std::vector<std::string> configs;
  std::string timeline;  // --timeline PREFIX: ddp2-timeline writes PREFIX.<model>.rank<R>.json
};

// The "-retain" configurations keep freed memory in the process as dpx DDP does by default: the
// LibTorch ones through dpx's block cache (Note [CPU block cache] in
// src/runtime/memory/cpu_block_cache.h), Python through glibc's tunables. The other LibTorch ones,
// DDP or not, run DPX_MALLOC's policy (retain when unset, so they differ from "-retain" only
// under DPX_MALLOC=system); the other Python ones run glibc's defaults.
enum class Mode {
  kPlain, kPlainRetain, kPlainPair, kPlainPairRetain, kDdp1, kDdp1Reduce, kDdp1ReduceView,
  kDdp2, kDdp2View,
  kDdp2Timeline, kDdp2Nccl,
  kManual2,
  kManual2Retain,
  kPython2, kPython2Retain,
  kPythonPlain, kPython1
};

// Every configuration, in the first round's order.
const std::vector<Mode> kAllModes = {
    Mode::kPlain, Mode::kPlainRetain, Mode::kPlainPair, Mode::kPlainPairRetain, Mode::kDdp1,
    Mode::kDdp1Reduce, Mode::kDdp1ReduceView, Mode::kDdp2, Mode::kDdp2View, Mode::kDdp2Timeline, Mode::kDdp2Nccl,
    Mode::kManual2,
    Mode::kManual2Retain, Mode::kPython2, Mode::kPython2Retain, Mode::kPythonPlain,
    Mode::kPython1};

// Python DDP at 1 rank against Python without DDP prices PyTorch's own DDP where dpx's ddp1r
// runs, so that dpx's ratio can be read against it; two more Python starts per model and round
// are not worth it for every run, so --configs names them. ddp2-nccl needs CUDA and NCCL;
// ddp1r-view asks what ddp1r's copies into the buckets and back cost.
bool is_opt_in(Mode m) {
  return m == Mode::kPythonPlain || m == Mode::kPython1 || m == Mode::kDdp2Nccl ||
         m == Mode::kDdp1ReduceView;
}

const char* base_name_of(Mode m) {
  switch (m) {
    case Mode::kPlain: return "plain LibTorch, 1 process";
    case Mode::kPlainRetain: return "plain LibTorch, 1 process, retained memory";
    case Mode::kPlainPair: return "2 independent plain processes";
    case Mode::kPlainPairRetain: return "2 independent plain processes, retained memory";
    case Mode::kDdp1: return "dpx DDP, 1 rank";
    case Mode::kDdp1Reduce: return "dpx DDP, 1 rank, reduction on";
    case Mode::kDdp1ReduceView: return "dpx DDP, 1 rank, reduction on, gradient_as_bucket_view";
    case Mode::kDdp2: return "dpx DDP, 2 ranks";
    case Mode::kDdp2View: return "dpx DDP, 2 ranks, gradient_as_bucket_view";
    case Mode::kDdp2Timeline: return "dpx DDP, 2 ranks, timeline on";
    case Mode::kDdp2Nccl: return "dpx DDP, 2 ranks over nccl";
    case Mode::kManual2: return "hand-written all-reduce loop, 2 ranks";
    case Mode::kManual2Retain: return "hand-written all-reduce loop, 2 ranks, retained memory";
    case Mode::kPython2: return "Python DDP (gloo), 2 ranks";
    case Mode::kPython2Retain: return "Python DDP (gloo), 2 ranks, glibc keeping freed memory";
    case Mode::kPythonPlain: return "plain PyTorch (Python), 1 process";
    case Mode::kPython1: return "Python DDP, 1 rank";
  }
  return "?";
}

// The names above are written for 2 ranks; --world N says N.
std::string for_world(std::string text, int world) {
  if (world == 2) return text;
  for (const std::string from : {"2 ranks", "2 independent"}) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + 1)) {
      text.replace(at, 1, std::to_string(world));
    }
  }
  return text;
}

std::string name_of(Mode m, int world) { return for_world(base_name_of(m), world); }

int world_of(Mode m, int world) {
  const bool one = m == Mode::kPlain || m == Mode::kPlainRetain || m == Mode::kDdp1 ||
                   m == Mode::kDdp1Reduce || m == Mode::kDdp1ReduceView ||
                   m == Mode::kPythonPlain || m == Mode::kPython1;
  return one ? 1 : world;
}
bool is_pair(Mode m) { return m == Mode::kPlainPair || m == Mode::kPlainPairRetain; }
bool is_python(Mode m) {
  return m == Mode::kPython2 || m == Mode::kPython2Retain || m == Mode::kPythonPlain ||
         m == Mode::kPython1;
}
bool is_manual(Mode m) { return m == Mode::kManual2 || m == Mode::kManual2Retain; }
bool applies_retain(Mode m) {
  return m == Mode::kPlainRetain || m == Mode::kPlainPairRetain || m == Mode::kManual2Retain;
}
// The nearest a Python user gets to dpx's block cache without code: glibc told to keep freed
// memory (no mmap for malloc, no trimming below 2 GiB). It still faults where blocks no longer fit
// (Note [CPU block cache]); the benchmark prints page faults per step for every configuration.
constexpr const char* kRetainTunables =
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647";

bool is_ddp(Mode m) {
  return m == Mode::kDdp1 || m == Mode::kDdp1Reduce || m == Mode::kDdp1ReduceView ||
         m == Mode::kDdp2 || m == Mode::kDdp2View || m == Mode::kDdp2Timeline ||
         m == Mode::kDdp2Nccl;
}
bool communicates(Mode m) { return is_ddp(m) || is_manual(m); }

const char* key_of(Mode m) {
  switch (m) {
    case Mode::kPlain: return "plain";
    case Mode::kPlainRetain: return "plain-retain";
    case Mode::kPlainPair: return "pair";
    case Mode::kPlainPairRetain: return "pair-retain";
    case Mode::kDdp1: return "ddp1";
    case Mode::kDdp1Reduce: return "ddp1r";
    case Mode::kDdp1ReduceView: return "ddp1r-view";
    case Mode::kDdp2: return "ddp2";
    case Mode::kDdp2View: return "ddp2-view";
    case Mode::kDdp2Timeline: return "ddp2-timeline";
    case Mode::kDdp2Nccl: return "ddp2-nccl";
    case Mode::kManual2: return "manual";
    case Mode::kManual2Retain: return "manual-retain";
    case Mode::kPython2: return "python";
    case Mode::kPython2Retain: return "python-retain";
    case Mode::kPythonPlain: return "pyplain";
    case Mode::kPython1: return "python1";
  }
  return "?";
}

// Timed steps of `mode` on `model`: its --steps entry, else --cnn-steps or --mlp-steps. Their
// defaults suit the device: a GPU runs the CPU's 30 CNN steps in 35 ms, too short to trust, so
// with --device cuda every configuration runs 300 (the slow ones, such as 2 ranks sharing one
// GPU, are cut with --steps).
int steps_of(const Args& a, Mode mode, const std::string& model) {
  const std::string key = std::string(key_of(mode)) + ":" + model + "=";
  for (const auto& entry : a.steps) {
    if (entry.rfind(key, 0) == 0) return std::stoi(entry.substr(key.size()));
  }
  const bool cuda = a.device == "cuda";
  if (model == "cnn") return a.cnn_steps > 0 ? a.cnn_steps : (cuda ? 300 : 30);
  return a.mlp_steps > 0 ? a.mlp_steps : (cuda ? 300 : 4);
}

struct Sample {
  double samples_per_s = 0;
  double cpu_per_1000 = 0;  // user + system seconds of all processes per 1000 samples
  double faults_per_step = 0;  // minor page faults of all processes per training step
  double comm_ms = NAN, exposed_ms = NAN;
};

// This process's user + system CPU seconds (all threads) and minor page faults so far.
struct Usage {
  double cpu_seconds;
  long minor_faults;
};

Usage usage() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return {s(r.ru_utime) + s(r.ru_stime), r.ru_minflt};
}

// One training process. Writes "<seconds> <cpu seconds> <minor faults> <comm ms> <exposed ms>"
// to `out`.
template <typename Model>
void train(Model model, const Args& a, Mode mode, const std::string& model_name, int rank,
           std::uint16_t port, const std::string& out) {
  torch::set_num_threads(a.threads);
  // What init_process_group would choose for the process (dpx/runtime/process.h): SIGPIPE
  // ignored, and DPX_MALLOC's memory policy (retain when unset), as DDP programs get it. Every
  // LibTorch configuration gets the same policy, so that a ratio to plain measures DDP and not
  // two allocators; the "-retain" ones retain whatever DPX_MALLOC says.
  ProcessOptions process;
  if (applies_retain(mode)) process.memory_policy = MemoryPolicy::kRetain;
  init_process(process);
  const int world = world_of(mode, a.world);
  // Chosen in the forked child: the parent never makes a CUDA context (a child could not use it).
  const at::Device device = cuda::local_device(at::Device(a.device), rank);
  const bool nccl = mode == Mode::kDdp2Nccl;
  TORCH_CHECK(!nccl || device.is_cuda(), "ddp2-nccl needs --device cuda");
  if (nccl && cuda::device_count() < world) {
    // Ranks sharing a GPU: each a host of its own to NCCL, which otherwise refuses two ranks on
    // one GPU (Note [NCCL ranks sharing a GPU] in tests/support/nccl_ranks.h); set before NCCL
    // first runs in this process.
    ::setenv("NCCL_HOSTID", ("dpx-bench-host-" + std::to_string(rank)).c_str(), 1);
    ::setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    ::setenv("NCCL_IB_DISABLE", "1", 0);
  }
  if (!device.is_cpu()) model->to(device);
  std::shared_ptr<ProcessGroup> pg;
  if (communicates(mode)) {
    TcpStoreOptions so;
    so.port = port;
    ProcessGroup::Options po;
    po.device = device;
    pg = new_process_group(nccl ? "nccl" : a.backend, Store::tcp(so), rank, world, po);
  }
  // Ranks of one host share the steady clock: no alignment needed. The file is written after
  // the timed steps, and only when asked (--timeline).
  if (mode == Mode::kDdp2Timeline) {
    timeline::start(a.timeline.empty() ? out + ".trace" : a.timeline + "." + model_name, rank);
  }
  auto x = torch::randn({a.batch, 1, 28, 28}).to(device);
  auto y = torch::randint(10, {a.batch}).to(device);
  // The clock reads what the GPU has finished, not what was queued.
  auto finish_queued = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  DistributedDataParallel<typename Model::ContainedType> ddp = nullptr;  // empty: no DDP
  if (is_ddp(mode)) {
    DistributedDataParallelOptions options;
    // Gradients as views into the buckets: no copy into a bucket and back per parameter.
    options.gradient_as_bucket_view = mode == Mode::kDdp2View || mode == Mode::kDdp1ReduceView;
    ddp = DistributedDataParallel(model, pg, options);
    // One rank reduces nothing (Note [One rank] in src/ddp/reducer_step.cpp); PyTorch's DDP
    // still copies the gradients into buckets, all-reduces each bucket and copies them back,
    // which the built-in all-reduce hook makes dpx do too.
    if (mode == Mode::kDdp1Reduce || mode == Mode::kDdp1ReduceView) {
      ddp->register_comm_hook({}, hooks::allreduce_hook);
    }
  }
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto step = [&] {
    opt.zero_grad();
    auto logits = ddp ? ddp->forward(x) : model->forward(x);
    torch::nn::functional::cross_entropy(logits, y).backward();
    if (is_manual(mode)) {  // what LibTorch users write today
      for (auto& p : model->parameters()) {
        pg->allreduce(p.mutable_grad())->wait();
        p.mutable_grad().div_(world);
      }
    }
    timeline::Scope scope("optimizer.step");  // as the example does; free while off
    opt.step();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  finish_queued();
  if (pg) pg->barrier()->wait();
  const int steps = steps_of(a, mode, model_name);
  const auto stats0 = ddp ? ddp->stats() : DdpStats{};
  const Usage u0 = usage();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  finish_queued();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Usage u1 = usage();
  const double cpu = u1.cpu_seconds - u0.cpu_seconds;
  const long faults = u1.minor_faults - u0.minor_faults;
  double comm = NAN, exposed = NAN;
  // Averages over the sampled steps (Note [Step times]) among the timed ones: steps 3 to 10
  // after the default warm-up, and every 100th.
  const auto s1 = ddp ? ddp->stats() : DdpStats{};
  if (s1.timed_iterations > stats0.timed_iterations) {
    const double n0 = stats0.timed_iterations, n1 = s1.timed_iterations;
    comm = (s1.avg_backward_comm_ms * n1 - stats0.avg_backward_comm_ms * n0) / (n1 - n0);
    exposed = (s1.avg_exposed_comm_ms * n1 - stats0.avg_exposed_comm_ms * n0) / (n1 - n0);
  }
  if (pg) pg->barrier()->wait();
  if (mode == Mode::kDdp2Timeline && !a.timeline.empty()) timeline::write();
  std::ofstream(out) << secs << " " << cpu << " " << faults << " " << comm << " " << exposed
                     << "\n";
}

// Waits for `pids` (at most `timeout`), killing all on failure. Returns false on failure.
bool wait_all(std::vector<pid_t> pids, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool ok = true;
  for (std::size_t done = 0; done < pids.size();) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      ++done;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = false;
      if (!ok) break;
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ok = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!ok) {
    for (pid_t p : pids) ::kill(p, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0 || errno == EINTR) {
    }
  }
  return ok;
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path(buf, n > 0 ? n : 0);
  return path.substr(0, path.rfind('/'));
}

Sample run(const Args& a, Mode mode, const std::string& model, const std::string& dir) {
  const int procs = world_of(mode, a.world);
  const std::string prefix = dir + "/" + model + std::to_string(static_cast<int>(mode));
  std::shared_ptr<Store> server;
  if (communicates(mode)) {
    TcpStoreOptions so;
    so.is_server = true;
    server = Store::tcp(so);
  }
  const std::uint16_t port = server ? server->port() : 0;
  std::vector<pid_t> pids;
  std::fflush(stdout);
  if (is_python(mode)) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (mode == Mode::kPython2Retain) {
        const char* user = std::getenv("GLIBC_TUNABLES");
        const std::string tunables =
            user ? std::string(user) + ":" + kRetainTunables : std::string(kRetainTunables);
        ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
      }
      const std::string script = std::string(DPX_BENCH_SOURCE_DIR) + "/python/ddp_baseline.py";
      std::vector<std::string> argv = {DPX_PYTHON, script, "--model", model, "--world",
                                       std::to_string(procs), "--steps",
                                       std::to_string(steps_of(a, mode, model)),
                                       "--warmup", std::to_string(a.warmup), "--batch",
                                       std::to_string(a.batch), "--threads",
                                       std::to_string(a.threads), "--mlp-width",
                                       std::to_string(a.mlp_width), "--device", a.device,
                                       "--out", prefix};
      if (mode == Mode::kPythonPlain) argv.push_back("--plain");
      std::vector<char*> cargv;
      for (auto& s : argv) cargv.push_back(s.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  } else {
    for (int r = 0; r < procs; ++r) {
      pid_t pid = ::fork();
      if (pid == 0) {
        int code = 0;
        const std::string out = prefix + ".rank" + std::to_string(r);
        try {
          torch::manual_seed(0);
          const int rank = is_pair(mode) ? 0 : r;
          if (model == "cnn") {
            train(FashionCnn(), a, mode, model, rank, port, out);
          } else {
            train(WideMlp(a.mlp_width), a, mode, model, rank, port, out);
          }
        } catch (const std::exception& e) {
          // The parent reports it, once: a bad DPX_ variable fails every process alike.
          const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
          std::ofstream(out + ".error") << (c10_error ? c10_error->what_without_backtrace()
                                                      : e.what());
          code = 1;
        }
        std::fflush(stderr);
        ::_exit(code);
      }
      pids.push_back(pid);
    }
  }
  if (!wait_all(pids, std::chrono::seconds(900))) {
    std::string why;  // the first rank's error, if one was caught
    for (int r = 0; r < procs; ++r) {
      const std::string path = prefix + ".rank" + std::to_string(r) + ".error";
      std::ifstream in(path);
      std::string line;
      if (why.empty() && std::getline(in, line)) why = ": rank " + std::to_string(r) + ": " + line;
      std::remove(path.c_str());
    }
    TORCH_CHECK(false, name_of(mode, a.world), " (", model, ")",
                why.empty() ? " failed or timed out" : why);
  }
  double max_secs = 0, cpu = 0, faults = 0, comm = NAN, exposed = NAN;
  for (int r = 0; r < procs; ++r) {
    const std::string path = prefix + ".rank" + std::to_string(r);
    std::ifstream in(path);
    double secs = 0, c = 0, f = 0, cm = NAN, ex = NAN;
    in >> secs >> c >> f;
    if (!(in >> cm >> ex)) cm = ex = NAN;
    TORCH_CHECK(secs > 0, "no result in ", path);
    max_secs = std::max(max_secs, secs);
    cpu += c;
    faults += f;
    if (r == 0) comm = cm, exposed = ex;
    std::remove(path.c_str());
  }
  const int steps = steps_of(a, mode, model);
  const double samples = static_cast<double>(procs) * a.batch * steps;
  return {samples / max_secs, cpu / samples * 1000, faults / steps, comm, exposed};
}

void add_flags(CLI::App& app, Args& a) {
  const auto positive = at_least(1);
  app.add_option("--backend", a.backend, "gloo (default), shm, nccl or auto");
  app.add_option("--device", a.device, "cpu (default) or cuda: process r on GPU r (modulo the "
                 "GPUs; Python DDP too, over nccl, or gloo where ranks share a GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--rounds", a.rounds, "rounds, configurations alternated (default 3)")
      ->check(positive);
  app.add_option("--cnn-steps", a.cnn_steps, "timed steps of the CNN per round (default 30; "
                 "300 with --device cuda)")
      ->check(positive);
  app.add_option("--mlp-steps", a.mlp_steps, "timed steps of the MLP per round (default 4; "
                 "300 with --device cuda)")
      ->check(positive);
  app.add_option("--steps", a.steps, "CONFIG:MODEL=N,...: N timed steps for that configuration "
                 "and model instead (e.g. ddp2:mlp=20: 2 ranks sharing a GPU are slow)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const auto colon = v.find(':'), eq = v.find('=');
            const bool shaped = colon != std::string::npos && eq != std::string::npos &&
                                colon < eq && eq + 1 < v.size() && v.size() - eq <= 9 &&
                                v.find_first_not_of("0123456789", eq + 1) == std::string::npos;
            const std::string config = v.substr(0, colon);
            const std::string model = shaped ? v.substr(colon + 1, eq - colon - 1) : "";
            bool known = false;
            for (auto m : kAllModes) known = known || config == key_of(m);
            if (shaped && known && (model == "cnn" || model == "mlp") &&
                std::stoi(v.substr(eq + 1)) > 0) {
              return "";
            }
            return "expects CONFIG:MODEL=N (a configuration of --configs, cnn or mlp, N >= 1), "
                   "got '" + v + "'";
          },
          "CONFIG:MODEL=N"));
  app.add_option("--warmup", a.warmup, "untimed steps (default 2)")->check(positive);
  app.add_option("--batch", a.batch, "samples per rank and step (default 64)")
      ->check(positive);
  app.add_option("--threads", a.threads, "intra-op threads per process (default 1)")
      ->check(positive);
  app.add_option("--mlp-width", a.mlp_width, "hidden width of the MLP (default 4096)")
      ->check(positive);
  app.add_option("--world", a.world, "ranks of the DDP, hand-written and Python DDP "
                 "configurations but the 1-rank ones (ddp1, ddp1r, python1), and how many "
                 "independent processes (default 2)")
      ->check(at_least(2));
  app.add_flag("!--no-python", a.python, "skip the Python configurations (python, python-retain, "
               "pyplain, python1), even those --configs names");
  app.add_option("--models", a.models, "cnn,mlp (default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--timeline", a.timeline,
                 "ddp2-timeline writes its ranks' timelines to PREFIX.<model>.rank<R>.json");
  app.add_option("--configs", a.configs,
                 "a subset of plain,plain-retain,pair,pair-retain,ddp1,ddp1r,ddp1r-view,ddp2,"
                 "ddp2-view,"
                 "ddp2-timeline,ddp2-nccl,manual,manual-retain,python,python-retain,pyplain,"
                 "python1 (default all but pyplain, python1, ddp1r-view and ddp2-nccl: the same "
                 "loop in Python without DDP, and Python DDP on 1 rank, gloo on CPU and nccl on "
                 "CUDA, whose ratio is PyTorch's own cost of DDP, beside ddp1r/plain; ddp1r with "
                 "gradients as bucket views; and DDP over nccl with --device cuda, each rank a "
                 "host of its own to NCCL where ranks share a GPU, beside pair)")
      ->delimiter(',')
      ->check(CLI::IsMember({"plain", "plain-retain", "pair", "pair-retain", "ddp1", "ddp1r",
                             "ddp1r-view", "ddp2", "ddp2-view", "ddp2-timeline", "ddp2-nccl", "manual",
                             "manual-retain", "python", "python-retain", "pyplain", "python1"}));
}

void report(const Args& a, const std::string& model, const std::vector<Mode>& modes,
            std::map<Mode, std::vector<Sample>>& all) {
  std::map<Mode, Sample> med;
  for (auto m : modes) {
    std::vector<double> sps, cpu, faults, comm, exposed;
    for (const auto& s : all[m]) {
      sps.push_back(s.samples_per_s);
      cpu.push_back(s.cpu_per_1000);
      faults.push_back(s.faults_per_step);
      if (!std::isnan(s.comm_ms)) comm.push_back(s.comm_ms), exposed.push_back(s.exposed_ms);
    }
    med[m] = {median(sps), median(cpu), median(faults), median(comm), median(exposed)};
  }
  const bool retain = memory_policy_in_env() == MemoryPolicy::kRetain;
  std::printf("\n### %s (batch %d per process, %d intra-op thread(s), backend %s, device %s, "
              "%d rounds, DPX_MALLOC=%s)\n\n", model == "cnn" ? "Fashion-MNIST CNN" : "MLP",
              a.batch, a.threads, a.backend.c_str(), a.device.c_str(), a.rounds,
              retain ? "retain" : "system");
  std::printf("| configuration | samples/s | CPU s / 1000 samples | page faults / step | "
              "comm ms/iter | exposed ms/iter | timed steps/round |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (auto m : modes) {
    const auto& s = med[m];
    std::printf("| %s | %.1f | %.3f | %.0f | %s | %s | %d |\n", name_of(m, a.world).c_str(),
                s.samples_per_s,
                s.cpu_per_1000, s.faults_per_step,
                std::isnan(s.comm_ms) ? "" : std::to_string(s.comm_ms).substr(0, 7).c_str(),
                std::isnan(s.exposed_ms) ? "" : std::to_string(s.exposed_ms).substr(0, 7).c_str(),
                steps_of(a, m, model));
  }
  auto ratio = [&](Mode a_, Mode b_, bool cpu) {
    if (!med.count(a_) || !med.count(b_)) return static_cast<double>(NAN);
    return cpu ? med[a_].cpu_per_1000 / med[b_].cpu_per_1000
               : med[a_].samples_per_s / med[b_].samples_per_s;
  };
  // Each ratio prints only when both of its configurations ran (see --configs), the ratio of
  // the medians first, then each round's throughput ratio (configurations of a round run
  // close together, so their ratio is steadier than either's throughput).
  auto line = [&](const char* what, Mode a_, Mode b_) {
    if (!med.count(a_) || !med.count(b_)) return;
    std::string rounds;
    for (std::size_t r = 0; r < all[a_].size() && r < all[b_].size(); ++r) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.3f", r ? ", " : "",
                    all[a_][r].samples_per_s / all[b_][r].samples_per_s);
      rounds += buf;
    }
    std::printf("- %s: %.3f throughput, %.3f CPU per sample (rounds: %s)\n",
                for_world(what, a.world).c_str(), ratio(a_, b_, false), ratio(a_, b_, true),
                rounds.c_str());
  };
  std::printf("\n");
  line("dpx DDP 2 ranks / 2 independent processes", Mode::kDdp2, Mode::kPlainPair);
  line("dpx DDP 2 ranks over nccl / 2 independent processes", Mode::kDdp2Nccl, Mode::kPlainPair);
  line("dpx DDP 2 ranks / 2 independent processes, retained memory", Mode::kDdp2,
       Mode::kPlainPairRetain);
  line("dpx DDP 1 rank / plain", Mode::kDdp1, Mode::kPlain);
  line("dpx DDP 1 rank / plain, retained memory", Mode::kDdp1, Mode::kPlainRetain);
  line("dpx DDP 1 rank, reduction on / plain", Mode::kDdp1Reduce, Mode::kPlain);
  line("dpx DDP 1 rank, reduction on, gradient_as_bucket_view / plain", Mode::kDdp1ReduceView,
       Mode::kPlain);
  line("Python DDP 1 rank / Python plain", Mode::kPython1, Mode::kPythonPlain);
  line("dpx DDP 2 ranks / hand-written loop", Mode::kDdp2, Mode::kManual2);
  line("dpx DDP 2 ranks / hand-written loop, retained memory", Mode::kDdp2, Mode::kManual2Retain);
  line("dpx DDP 2 ranks, gradient_as_bucket_view / hand-written loop, retained memory",
       Mode::kDdp2View, Mode::kManual2Retain);
  line("dpx DDP 2 ranks, timeline on / off", Mode::kDdp2Timeline, Mode::kDdp2);
  line("dpx DDP 2 ranks / Python DDP", Mode::kDdp2, Mode::kPython2);
  line("dpx DDP 2 ranks / Python DDP, glibc keeping freed memory", Mode::kDdp2,
       Mode::kPython2Retain);
  std::printf("- %s: %.3f\n", for_world("dpx DDP 2 ranks exposed / total communication",
                                        a.world).c_str(),
              med.count(Mode::kDdp2) ? med[Mode::kDdp2].exposed_ms / med[Mode::kDdp2].comm_ms
                                     : static_cast<double>(NAN));
}

int run_ddp_bench(const Args& a, const std::vector<std::string>& argv) {
  char dir_template[] = "/tmp/dpx-bench-ddp-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::vector<Mode> modes;
  for (auto m : kAllModes) {
    if (!is_python(m)) modes.push_back(m);
  }
  if (a.python) {
    if (std::system(DPX_PYTHON " -c 'import torch.distributed' >/dev/null 2>&1") == 0) {
      for (auto m : kAllModes) {
        if (is_python(m)) modes.push_back(m);
      }
    } else {
      std::printf("SKIPPED Python DDP: " DPX_PYTHON " cannot import torch\n");
    }
  }
  std::vector<Mode> chosen;
  for (auto m : modes) {
    const bool named =
        std::find(a.configs.begin(), a.configs.end(), key_of(m)) != a.configs.end();
    if (a.configs.empty() ? !is_opt_in(m) : named) chosen.push_back(m);
  }
  modes = chosen;
  std::map<std::string, std::map<Mode, std::vector<Sample>>> results;
  for (int round = 0; round < a.rounds; ++round) {
    // Each round starts one configuration later, so that none always runs first (on a cold
    // machine) or always after the same one.
    auto order = modes;
    if (!order.empty()) {
      std::rotate(order.begin(), order.begin() + round % order.size(), order.end());
    }
    for (const auto& model : a.models) {
      TORCH_CHECK(model == "cnn" || model == "mlp", "unknown model ", model, "; use cnn,mlp");
      for (auto m : order) {
        auto s = run(a, m, model, dir);
        results[model][m].push_back(s);
        std::fprintf(stderr, "round %d %s %-40s %9.1f samples/s %7.3f cpu-s/1000 %8.0f faults/step\n",
                     round, model.c_str(), name_of(m, a.world).c_str(), s.samples_per_s,
                     s.cpu_per_1000,
                     s.faults_per_step);
      }
    }
  }
  ::rmdir(dir.c_str());
  std::printf("dpx-bench ddp");
  for (const auto& s : argv) std::printf(" %s", s.c_str());
  std::printf("\n");
  for (const auto& model : a.models) report(a, model, modes, results[model]);
  return 0;
}

const RegisterCommand kRegister("ddp", "DDP training throughput vs plain, hand-written, Python DDP",
                                [](CLI::App& app) -> Run {
                                  auto args = std::make_shared<Args>();
                                  add_flags(app, *args);
                                  return [args](const std::vector<std::string>& argv) {
                                    return run_ddp_bench(*args, argv);
                                  };
                                });

}  // namespace
}  // namespace dpx::bench::ddp_bench
