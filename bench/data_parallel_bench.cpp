// dpx-bench dp: training samples/s of the Fashion-MNIST CNN on synthetic data, in one run
// alternating DataParallel on CPU replicas with one process at 1 and at 2 intra-op threads, or
// (--device cuda) DataParallel with its replicas sharing cuda:0 against the module alone there.
#include <torch/torch.h>

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/command.h"
#include "bench/stats.h"
#include "dpx/data_parallel/data_parallel.h"
#include "dpx/runtime/memory_policy.h"

namespace dpx::bench::data_parallel_bench {
namespace {

// conv 32, conv 64, max-pool, fc 128, fc 10: PyTorch's MNIST example network, as FashionCnn in
// bench_models.h, but Cloneable (DataParallel replicates it). Not the CNN of
// examples/fashion_mnist, which pads its convolutions and pools after each.
struct CnnImpl : torch::nn::Cloneable<CnnImpl> {
  CnnImpl() { reset(); }
  void reset() override {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(64 * 12 * 12, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::max_pool2d(torch::relu(conv2(x)), 2).flatten(1);
    return torch::log_softmax(fc2(torch::relu(fc1(x))), 1);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

struct Args {
  int64_t batch = 128;
  int64_t steps = 10;   // timed steps per configuration and round
  int64_t rounds = 5;
  int64_t warmup = 2;   // untimed steps per configuration before the first round
  int64_t replicas = 2;
  std::string device = "cpu";  // cpu, or cuda: replicas share cuda:0
};

void add_flags(CLI::App& app, Args& args) {
  app.add_option("--batch", args.batch, "samples per step (default 128)")
      ->check(at_least(1));
  app.add_option("--steps", args.steps, "timed steps per configuration and round (default 10)")
      ->check(at_least(1));
  app.add_option("--rounds", args.rounds, "rounds (default 5)")->check(at_least(1));
  app.add_option("--warmup", args.warmup, "untimed steps per configuration (default 2)")
      ->check(at_least(0));
  app.add_option("--replicas", args.replicas, "CPU replicas of DataParallel (default 2)")
      ->check(at_least(1));
  app.add_option("--device", args.device,
                 "cpu (CPU replicas against one process) or cuda (replicas sharing cuda:0 "
                 "against the module alone on cuda:0); default cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

torch::Device replica_device(const Args& args) {
  return args.device == "cuda" ? torch::Device("cuda:0") : torch::Device(torch::kCPU);
}

// The whole step must have run when the clock stops: CUDA kernels run after the host returns.
void finish_work(const Args& args) {
  if (args.device == "cuda") {
    torch::cuda::synchronize();
  }
}

// One configuration: a model, its optimizer, and how to run a forward.
struct Config {
  std::string name;
  int intra_op_threads;  // of the calling thread
  Cnn net;
  std::unique_ptr<torch::optim::SGD> opt;
  DataParallel<CnnImpl> dp = nullptr;  // empty: the plain module
  std::vector<double> samples_per_s;
  std::vector<double> busy;  // process CPU time / wall time: how many cores the steps kept busy

  torch::Tensor forward(const torch::Tensor& x) { return dp ? dp->forward(x) : net->forward(x); }

  void step(const torch::Tensor& x, const torch::Tensor& y) {
    opt->zero_grad();
    torch::nll_loss(forward(x), y).backward();
    opt->step();
  }
};

// Gives a configuration's thread count to OpenBLAS's own pool too (Debian's libblas.so.3 is the
// pthread OpenBLAS, which at::set_num_threads does not reach), so "1 thread" means one thread.
bool set_blas_threads(int threads) {
  using Set = void (*)(int);
  static const auto set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set) {
    set(threads);
  }
  return set != nullptr;
}

void use_threads(int threads) {
  at::set_num_threads(threads);
  set_blas_threads(threads);
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The same step on the same weights with and without DataParallel: gradients must agree.
double max_grad_difference(const Cnn& init, const Args& args, const torch::Tensor& x,
                           const torch::Tensor& y) {
  Cnn plain(std::dynamic_pointer_cast<CnnImpl>(init->clone()));
  Cnn wrapped(std::dynamic_pointer_cast<CnnImpl>(init->clone()));
  plain->to(replica_device(args));
  wrapped->to(replica_device(args));
  DataParallelOptions options;
  options.devices.assign(args.replicas, replica_device(args));
  DataParallel dp(wrapped, options);
  torch::nll_loss(plain->forward(x), y).backward();
  torch::nll_loss(dp->forward(x), y).backward();
  double worst = 0;
  auto a = plain->parameters();
  auto b = wrapped->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i].grad() - b[i].grad()).abs().max().item<double>());
  }
  return worst;
}

int run(const Args& args) {
  // One process: DPX_MALLOC's policy (retain when unset) holds for every configuration alike.
  const MemoryPolicy policy = apply_memory_policy();
  const bool cuda = args.device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::fprintf(stderr, "dpx-bench dp: --device cuda needs a GPU, and CUDA sees none here\n");
    return 1;
  }
  torch::manual_seed(0);
  auto x = torch::randn({args.batch, 1, 28, 28}).to(replica_device(args));
  auto y = torch::randint(10, {args.batch}).to(replica_device(args));
  Cnn init;

  std::vector<Config> configs;
  auto add = [&](std::string name, int threads, bool data_parallel) {
    Config c{std::move(name), threads, Cnn(std::dynamic_pointer_cast<CnnImpl>(init->clone()))};
    c.net->to(replica_device(args));
    c.opt = std::make_unique<torch::optim::SGD>(c.net->parameters(),
                                                torch::optim::SGDOptions(0.01).momentum(0.9));
    if (data_parallel) {
      DataParallelOptions options;
      options.devices.assign(args.replicas, replica_device(args));
      options.threads_per_replica = 1;
      c.dp = DataParallel(c.net, options);
    }
    configs.push_back(std::move(c));
  };
  if (cuda) {
    // The baseline is the module alone on the GPU; the host threads matter little there.
    add("module alone on cuda:0", 1, false);
    add("DataParallel, " + std::to_string(args.replicas) + " replicas sharing cuda:0", 1, true);
  } else {
    add("single process, 1 intra-op thread", 1, false);
    add("single process, 2 intra-op threads", 2, false);
    add("DataParallel, " + std::to_string(args.replicas) + " CPU replicas x 1 thread", 1, true);
  }

  std::printf("# dpx-bench dp: Fashion-MNIST CNN, synthetic 28x28 batch %lld, SGD momentum; "
              "%lld rounds x %lld steps, configurations alternated\n",
              static_cast<long long>(args.batch), static_cast<long long>(args.rounds),
              static_cast<long long>(args.steps));
  std::printf("# intra-op threads: at::set_num_threads%s per configuration\n",
              set_blas_threads(1) ? " and openblas_set_num_threads" : "");
  std::printf("# allocator: %s for every configuration (DPX_MALLOC; docs/ddp.md)\n",
              policy == MemoryPolicy::kRetain ? "freed memory retained"
                                                             : "glibc's defaults");
  const double difference = max_grad_difference(init, args, x, y);
  std::printf("# check: max |grad difference| DataParallel vs plain, one step: %.3g\n",
              difference);
  if (!(difference < 1e-4)) {
    std::fprintf(stderr, "dpx-bench dp: DataParallel's gradients differ from the module's\n");
    return 1;
  }
  for (auto& c : configs) {
    use_threads(c.intra_op_threads);
    for (int64_t i = 0; i < args.warmup; ++i) {
      c.step(x, y);
    }
    finish_work(args);
  }
  for (int64_t round = 0; round < args.rounds; ++round) {
    for (auto& c : configs) {
      use_threads(c.intra_op_threads);
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = cpu_seconds();
      for (int64_t i = 0; i < args.steps; ++i) {
        c.step(x, y);
      }
      finish_work(args);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      c.samples_per_s.push_back(static_cast<double>(args.batch * args.steps) / took.count());
      c.busy.push_back((cpu_seconds() - cpu_start) / took.count());
    }
  }
  const double one = median(configs[0].samples_per_s);
  if (cuda) {
    std::printf("%-44s %12s %12s %10s\n", "configuration", "samples/s", "vs alone", "cores busy");
    for (const auto& c : configs) {
      const double m = median(c.samples_per_s);
      std::printf("%-44s %12.1f %11.2fx %10.2f\n", c.name.c_str(), m, m / one, median(c.busy));
    }
    return 0;
  }
  const double two = median(configs[1].samples_per_s);
  std::printf("%-44s %12s %10s %10s %10s\n", "configuration", "samples/s", "vs 1 thr",
              "vs 2 thr", "cores busy");
  for (const auto& c : configs) {
    const double m = median(c.samples_per_s);
    std::printf("%-44s %12.1f %9.2fx %9.2fx %10.2f\n", c.name.c_str(), m, m / one, m / two,
                median(c.busy));
  }
  return 0;
}

const RegisterCommand kRegister("dp", "DataParallel vs one process: CNN training samples/s",
                                [](CLI::App& app) -> Run {
                                  auto args = std::make_shared<Args>();
                                  add_flags(app, *args);
                                  return [args](const std::vector<std::string>&) {
                                    return run(*args);
                                  };
                                });

}  // namespace
}  // namespace dpx::bench::data_parallel_bench
