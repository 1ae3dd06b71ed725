// Fashion-MNIST on every rank of a job with DistributedDataParallel: the main job of dpx.
// Run under a launcher:  dpxrun --nproc-per-node 2 build/examples/fashion_mnist/fashion_mnist
// With --sharding full the model is sharded with dpx::fully_shard (FSDP) instead of replicated.
// It resumes from the newest checkpoint in --checkpoint-dir (so a restarted job continues; with
// --checkpoint-format dcp they are PyTorch DCP folders, which Python's dcp.load reads),
// shows a progress bar on rank 0 and appends metrics as JSON lines (scripts/plot_metrics.sh).
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dpx/data/fashion_mnist.h"  // the data set, not part of dpx.h
#include "dpx/dpx.h"
#include "examples/common/run_main.h"  // parsing and one-line errors, shared with dist_mnist
#include "examples/fashion_mnist/example.h"  // the flags, the network, the progress bar

namespace {

using example::Flags;
using example::Net;
using example::NetImpl;
using example::progress_bar;


// Checks with messages that say what was expected (CLI11's own number checks print the range up
// to 1.8e308, and let nan through).
CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        int64_t x = 0;
        const bool ok = CLI::detail::lexical_cast(v, x) && x >= min;
        return ok ? "" : "expects an integer >= " + std::to_string(min) + ", got '" + v + "'";
      },
      ">=" + std::to_string(min));
}
const CLI::Validator kPositiveFinite(
    [](std::string& v) -> std::string {
      double x = 0;
      const bool ok = CLI::detail::lexical_cast(v, x) && std::isfinite(x) && x > 0;
      return ok ? "" : "expects a finite number > 0, got '" + v + "'";
    },
    ">0");

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--epochs", f.epochs, "epochs to train (default 3)")
      ->check(integer_at_least(0));
  app.add_option("--batch-size", f.batch_size, "samples per rank and step (default 64)")
      ->check(integer_at_least(1));
  app.add_option("--lr", f.lr, "Adam's learning rate (default 2e-3)")->check(kPositiveFinite);
  app.add_option("--backend", f.backend, "auto (default), shm, gloo, nccl, mpi (under mpirun), or "
                 "hierarchical-mpi (under mpirun, with MASTER_ADDR and MASTER_PORT)");
  app.add_option("--checkpoint-dir", f.checkpoint_dir, "where checkpoints go and resume from");
  app.add_option("--checkpoint-every", f.checkpoint_every, "steps between checkpoints")
      ->check(integer_at_least(1));
  app.add_option("--metrics-file", f.metrics_file, "JSON lines appended by rank 0");
  app.add_option("--data-dir", f.data_dir, "the directory of the IDX .gz files")
      ->check(CLI::ExistingDirectory);
  app.add_option("--max-steps", f.max_steps, "stop after this many steps in all (-1: no limit)")
      ->check(integer_at_least(-1));
  app.add_option("--train-limit", f.train_limit, "use the first N train, N/6 test images")
      ->check(integer_at_least(-1));
  app.add_option("--device", f.device, "cpu (default) or cuda: GPU LOCAL_RANK, one per worker")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--sharding", f.sharding, "none (default: DDP, every rank a replica) or full "
                 "(fully_shard: every rank 1/N of each layer and of Adam's state)")
      ->check(CLI::IsMember({"none", "full"}));
  app.add_option("--checkpoint-format", f.checkpoint_format, "dpx (default: one file a step, or "
                 "dpx's sharded folders with --sharding full) or dcp (a folder a step that "
                 "Python's torch.distributed.checkpoint.load reads, on any number of ranks)")
      ->check(CLI::IsMember({"dpx", "dcp"}));
  app.add_flag("--checkpoint-async", f.checkpoint_async, "with --checkpoint-format dcp: each save "
               "copies the state to host memory and a thread writes it while training goes on")
      ->needs(app.get_option("--checkpoint-format"));
  app.add_option("--seed", f.seed, "the initial weights and the data order (default 0)")
      ->check(integer_at_least(0));
  app.add_flag("--fault-tolerant", f.fault_tolerant, "under dpxrun --fault-tolerant: each node a "
               "replica group that the others train on without (docs/fault_tolerance.md)");
  app.add_option("--report-every", f.report_every, "steps between DDP step reports (metrics)")
      ->check(integer_at_least(1));
}

// One line per record, as scripts/plot_metrics.sh reads them.
void append_metrics(std::ofstream& out, const nlohmann::ordered_json& record) {
  out << record.dump() << std::endl;
}


// Normalized with Fashion-MNIST's mean and std, stacked into batches.
auto prepared(dpx::FashionMNIST data) {
  return std::move(data).map(torch::data::transforms::Normalize<>(example::kMean, example::kStd))
      .map(torch::data::transforms::Stack<>());
}


// The data sets, and this rank's sampler over the training set. --train-limit shrinks both
// without a copy: the sampler draws from the first train_size images only, evaluation reads the
// first test_size.
struct Data {
  Data(const Flags& flags, const dpx::ProcessGroup& pg)
      : train(flags.data_dir, dpx::FashionMNIST::Mode::kTrain),
        test(flags.data_dir, dpx::FashionMNIST::Mode::kTest),
        train_size(flags.train_limit > 0 ? flags.train_limit : *train.size()),
        test_size(flags.train_limit > 0 ? std::max<int64_t>(1, flags.train_limit / 6)
                                        : *test.size()),
        sampler(train_size, pg.size(), pg.rank(),
                {.shuffle = true, .seed = static_cast<uint64_t>(flags.seed)}) {}
  dpx::FashionMNIST train, test;
  size_t train_size;
  int64_t test_size;
  dpx::DistributedSampler sampler;
};

// The model as this rank trains it (--sharding): a DDP replica of net, or net sharded by
// fully_shard with its layers as the units; and its checkpoints (--checkpoint-format): the whole
// model, or every rank its shards (which resume on any number of ranks); or, with dcp, PyTorch's
// DCP folders, sharded or not, which resume on any number of ranks and load in Python.
class Model {
 public:
  Model(Net net, std::shared_ptr<dpx::ProcessGroup> pg, const Flags& flags, torch::Device device)
      : net_(net) {
    if (flags.sharding == "full") {
      for (auto* unit : {&net->conv1, &net->conv2}) dpx::fully_shard(*unit, pg);
      for (auto* unit : {&net->fc1, &net->fc2}) dpx::fully_shard(*unit, pg);
      sharded_ = dpx::fully_shard(net, pg);
    } else {
      ddp_ = dpx::DistributedDataParallel(net, pg);
    }
    if (flags.checkpoint_format == "dcp") {
      checkpoints_ = std::make_unique<dpx::DcpCheckpointer>(
          dpx::DcpCheckpointerOptions{.directory = flags.checkpoint_dir,
                                      .async_save = flags.checkpoint_async}, pg);
    } else if (sharded_) {
      checkpoints_ = std::make_unique<dpx::ShardedCheckpointer>(
          dpx::ShardedCheckpointerOptions{.directory = flags.checkpoint_dir}, pg);
    } else {
      checkpoints_ = std::make_unique<dpx::Checkpointer>(
          dpx::CheckpointerOptions{.directory = flags.checkpoint_dir, .map_location = device}, pg);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) { return ddp_ ? ddp_->forward(x) : sharded_(x); }
  // DDP's step statistics; null under fully_shard.
  const dpx::DistributedDataParallel<NetImpl>& ddp() const { return ddp_; }

  std::optional<dpx::TrainingProgress> load_latest(torch::optim::Optimizer& optimizer) {
    return checkpoints_->load_latest(*net_, optimizer);
  }
  void save(const torch::optim::Optimizer& optimizer, const dpx::TrainingProgress& progress) {
    checkpoints_->save(*net_, optimizer, progress);
  }
  // Once training ends: the last save is complete on disk (or its failure thrown).
  void wait_for_checkpoints() { checkpoints_->wait(); }
  // The whole trained model in torch.save's form, written by rank 0 (collective when sharded).
  void save_for_python(const std::string& path, bool lead) {
    if (sharded_) return dpx::save_full_state_dict(*net_, path);
    if (lead) dpx::save_state_dict(*net_, path);
  }

 private:
  Net net_;
  dpx::DistributedDataParallel<NetImpl> ddp_{nullptr};
  dpx::FSDPModule<NetImpl> sharded_{nullptr};
  std::unique_ptr<dpx::TrainingCheckpointer> checkpoints_;
};

// Test loss and accuracy over the first n test images: each rank takes its shard (without the
// sampler's padding, so nothing counts twice) and the sums are all-reduced.
std::pair<double, double> evaluate(Model& model, Net& net, const dpx::FashionMNIST& test,
                                   dpx::ProcessGroup& pg, int64_t n) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<int64_t> mine;
  for (int64_t i = pg.rank(); i < n; i += pg.size()) mine.push_back(i);  // = the sampler's shard
  auto index = torch::tensor(mine, torch::kInt64);
  const auto device = pg.options().device;
  // loss, correct, count; on the group's device, which all-reduces them
  auto sums = torch::zeros({3}, torch::TensorOptions(torch::kFloat64).device(device));
  for (const auto& chunk : index.split(1000)) {
    auto x = ((test.images(chunk) - example::kMean) / example::kStd).to(device);
    auto y = test.targets().index_select(0, chunk).to(device);
    auto out = model.forward(x);
    sums[0] += torch::nn::functional::cross_entropy(out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
    sums[1] += out.argmax(1).eq(y).sum().item<double>();
    sums[2] += static_cast<double>(chunk.numel());
  }
  pg.allreduce(sums)->wait();
  net->train();
  return {sums[0].item<double>() / sums[2].item<double>(),
          sums[1].item<double>() / sums[2].item<double>()};
}

// `cpu` all-reduced over `pg`, on the group's device (a CUDA group reduces device tensors).
torch::Tensor reduced(dpx::ProcessGroup& pg, const torch::Tensor& cpu, dpx::ReduceOp op) {
  auto on_device = cpu.to(pg.options().device);
  pg.allreduce(on_device, {.op = op})->wait();
  return on_device.cpu();
}

// When this rank reached each point of its set-up, in seconds since the epoch (one clock for all
// processes of a machine): the process's start (the kernel's record), main(), the process group
// made, the data read, the first collective done (the model's broadcast). Rank 0 reports each
// point's last rank, so the launch (agents to the last process started), LibTorch's loading,
// the group's set-up and the data's reading can be told apart (bench/cluster_scaling.sh).
struct SetupTimes {
  static constexpr int kPoints = 5;
  double at[kPoints] = {process_started(), now(), 0, 0, 0};
  static double now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  // Now less the process's age: /proc/self/stat's start time (clock ticks after boot) against
  // CLOCK_BOOTTIME (/proc/stat's boot time has whole seconds only).
  static double process_started() {
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {}), field;
    const auto paren = text.rfind(')');
    std::istringstream fields(paren == std::string::npos ? "" : text.substr(paren + 1));
    for (int i = 3; i <= 22 && fields >> field; ++i) {}  // field 22: starttime
    timespec boot{};
    clock_gettime(CLOCK_BOOTTIME, &boot);
    char* end = nullptr;
    const double ticks = std::strtod(field.c_str(), &end);
    if (field.empty() || *end != '\0') return now();  // no /proc: main() is the start
    return now() - (boot.tv_sec + boot.tv_nsec * 1e-9 - ticks / sysconf(_SC_CLK_TCK));
  }
};

// Collective: every point's first and last rank, as the "setup" metrics record (seconds since
// the epoch).
nlohmann::ordered_json setup_record(SetupTimes t, dpx::ProcessGroup& pg) {
  t.at[4] = SetupTimes::now();
  constexpr int n = SetupTimes::kPoints;
  auto both = torch::empty({2 * n}, torch::kFloat64);  // max of t and of -t: the last and first
  for (int i = 0; i < n; ++i) both[i] = t.at[i], both[i + n] = -t.at[i];
  both = reduced(pg, both, dpx::ReduceOp::kMax);
  nlohmann::ordered_json record = {{"type", "setup"}, {"ranks", pg.size()}};
  const char* names[n] = {"started", "main", "group", "data", "first_collective"};
  for (int i = 0; i < n; ++i) {
    record[std::string("first_") + names[i]] = -both[i + n].item<double>();
    record[std::string("last_") + names[i]] = both[i].item<double>();
  }
  return record;
}

// Once training ends, under DDP: every replica's weights must be the same to the bit (DDP
// averages the same gradients everywhere and Adam steps alike). A 64-bit hash of each rank's
// parameters is gathered; returns it as hex, or throws on every rank naming the ranks that
// differ from rank 0.
std::string checked_replica_digest(Net& net, dpx::ProcessGroup& pg) {
  const uint64_t hash = example::parameter_hash(*net);
  // Gathered by a sum of one slot per rank: an all-reduce, which every backend runs on the
  // path DDP uses (the hierarchical backend makes its flat group only for all-gathers).
  auto all = torch::zeros({pg.size()}, torch::kInt64);
  all[pg.rank()] = static_cast<int64_t>(hash);
  all = reduced(pg, all, dpx::ReduceOp::kSum);
  std::string differ;
  for (int r = 1; r < pg.size(); ++r)
    if (all[r].item<int64_t>() != all[0].item<int64_t>()) differ += " " + std::to_string(r);
  if (!differ.empty())
    throw std::runtime_error("the replicas' weights differ after training: rank(s)" + differ +
                             " hold other weights than rank 0");
  return example::hex_digest(hash);
}

// Loads the newest checkpoint into the model and the optimizer, if there is one, and returns
// where training resumes.
dpx::TrainingProgress resume(Model& model, torch::optim::Optimizer& optimizer,
                             const Flags& flags, bool lead) {
  auto resumed = model.load_latest(optimizer);
  if (!resumed) return {};
  if (lead) std::fprintf(stderr, "resumed from checkpoint at epoch %lld step %lld\n",
                         (long long)resumed->epoch + 1, (long long)resumed->step);
  if (lead && resumed->epoch >= flags.epochs)
    std::fprintf(stderr, "already trained for %lld epochs; remove %s to start over\n",
                 (long long)flags.epochs, flags.checkpoint_dir.c_str());
  return *resumed;
}

// Rank 0's account of the training: a progress bar on stderr and JSON lines in the metrics file
// (scripts/plot_metrics.sh). The other ranks say nothing.
class Report {
 public:
  Report(const Flags& flags, const dpx::ProcessGroup& pg, const dpx::DistributedSampler& sampler)
      : flags_(flags), lead_(pg.rank() == 0), world_(pg.size()), sampler_(sampler) {
    if (lead_) metrics_.open(flags.metrics_file, std::ios::app);
    start_ = std::chrono::steady_clock::now();
  }

  void start_epoch() {
    loss_sum_ = 0, steps_ = 0, epoch_start_ = seconds();
  }

  // After each step: `seen` samples of this epoch so far on this rank; `last`, the step limit.
  void step(int64_t epoch, int64_t step, int64_t seen, double loss, bool last,
            const dpx::DistributedDataParallel<NetImpl>& ddp) {
    loss_sum_ += loss;
    ++steps_;
    const double rate = steps_ * flags_.batch_size * world_ / (seconds() - epoch_start_);
    if (lead_ && (steps_ % 20 == 0 || seen == (int64_t)sampler_.num_samples() || last)) {
      progress_bar(epoch, flags_.epochs, seen * world_, sampler_.total_size(), rate,
                   loss_sum_ / steps_);
      append_metrics(metrics_, {{"type", "train"}, {"epoch", epoch + 1}, {"step", step},
                                {"loss", loss_sum_ / steps_}, {"samples_per_s", rate},
                                {"elapsed_s", seconds()}});
    }
    if (lead_ && ddp && step % flags_.report_every == 0) {
      const auto stats = nlohmann::ordered_json::parse(dpx::to_json(ddp->stats()));
      append_metrics(metrics_, {{"type", "ddp"}, {"step", step}, {"stats", stats}});
    }
  }

  // The set-up's record (setup_record): a line on stderr and the metrics.
  void setup(const nlohmann::ordered_json& r) {
    if (!lead_) return;
    const double first = r["first_started"];
    auto last = [&](const char* point) { return r[std::string("last_") + point].get<double>() - first; };
    std::fprintf(stderr, "set-up of %d ranks, s after the first process started: all started %.2f, "
                 "LibTorch loaded %.2f, group made %.2f, data read %.2f, first collective %.2f\n",
                 world_, last("started"), last("main"), last("group"), last("data"),
                 last("first_collective"));
    append_metrics(metrics_, r);
  }

  void replicas_identical(const std::string& digest) {
    if (!lead_) return;
    std::fprintf(stderr, "weights identical on all %d ranks (digest %s)\n", world_,
                 digest.c_str());
    append_metrics(metrics_, {{"type", "replicas"}, {"ranks", world_}, {"identical", true},
                              {"digest", digest}});
  }

  void evaluated(int64_t epoch, int64_t step, double test_loss, double accuracy) {
    if (!lead_) return;
    std::fprintf(stderr, "epoch %lld: test accuracy %.2f%%, test loss %.4f, %.1f s\n",
                 (long long)epoch + 1, 100 * accuracy, test_loss, seconds());
    append_metrics(metrics_, {{"type", "eval"}, {"epoch", epoch + 1}, {"step", step},
                              {"test_loss", test_loss}, {"test_accuracy", accuracy},
                              {"elapsed_s", seconds()}});
  }

 private:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  const Flags& flags_;
  const bool lead_;
  const int world_;
  const dpx::DistributedSampler& sampler_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point start_;
  double loss_sum_ = 0, epoch_start_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

// The training loop: what a rank does, step by step; its set-up is in the helpers above.
int run(const Flags& flags) {
  SetupTimes setup;
  torch::set_num_threads(1);  // one core per rank; the ranks are the parallelism
  // "cuda": this worker's GPU, cuda:LOCAL_RANK; the group's backend follows (docs/backends.md).
  const auto device = dpx::cuda::local_device(torch::Device(flags.device));
  auto pg = dpx::init_process_group({.backend = flags.backend, .device = device});
  setup.at[2] = SetupTimes::now();
  torch::manual_seed(flags.seed);  // the same initial model on every rank (DDP broadcasts rank 0's anyway)
  Data data(flags, *pg);
  setup.at[3] = SetupTimes::now();
  auto loader = torch::data::make_data_loader(prepared(data.train), data.sampler,
                                              torch::data::DataLoaderOptions(flags.batch_size));
  Net net;
  net->to(device);
  Model model(net, pg, flags, device);  // after sharding, parameters() are this rank's shards
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  dpx::TrainingProgress progress = resume(model, optimizer, flags, pg->rank() == 0);
  Report report(flags, *pg, data.sampler);
  report.setup(setup_record(setup, *pg));

  auto step_limit_reached = [&] { return flags.max_steps >= 0 && progress.step >= flags.max_steps; };
  for (int64_t epoch = progress.epoch; epoch < flags.epochs && !step_limit_reached(); ++epoch) {
    int64_t seen = epoch == progress.epoch ? progress.sampler_position : 0;
    data.sampler.resume(epoch, seen);
    report.start_epoch();
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model.forward(batch.data.to(device)),
                                                       batch.target.to(device));
      loss.backward();
      {
        dpx::timeline::Scope scope("optimizer.step");  // on the timeline (docs/timeline.md)
        optimizer.step();
      }
      seen += batch.data.size(0);
      ++progress.step;
      report.step(epoch, progress.step, seen, loss.item<double>(), step_limit_reached(),
                  model.ddp());
      if (progress.step % flags.checkpoint_every == 0) {
        model.save(optimizer, {epoch, progress.step, seen});
      }
      if (step_limit_reached()) break;
    }
    const auto [test_loss, accuracy] = evaluate(model, net, data.test, *pg, data.test_size);
    const bool epoch_done = seen >= static_cast<int64_t>(data.sampler.num_samples());
    model.save(optimizer, epoch_done ? dpx::TrainingProgress{epoch + 1, progress.step, 0}
                                     : dpx::TrainingProgress{epoch, progress.step, seen});
    report.evaluated(epoch, progress.step, test_loss, accuracy);
  }
  model.wait_for_checkpoints();
  if (model.ddp()) report.replicas_identical(checked_replica_digest(net, *pg));
  // The trained model for Python: torch.load("<checkpoint-dir>/model.pt", weights_only=True).
  model.save_for_python(flags.checkpoint_dir + "/model.pt", pg->rank() == 0);
  return 0;
}

int main(int argc, char** argv) {
  dpx::install_error_handler();  // a crash leaves an error file the launcher's summary quotes
  CLI::App app("Trains a CNN on Fashion-MNIST with DistributedDataParallel; run it under dpxrun.",
               "fashion_mnist");
  Flags flags;
  add_flags(app, flags);
  return examples::run_main(app, argc, argv, [&] {
    return flags.fault_tolerant ? example::run_fault_tolerant(flags) : run(flags);
  });
}
