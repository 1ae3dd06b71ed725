// The example under dpxrun --fault-tolerant (docs/fault_tolerance.md): every node is a replica
// group; a lost node is dropped and the others go on; a restarted node heals from a peer.
//
// The data: every committed step takes the next window of the epoch's shuffled order, as many
// samples as the step's ranks take (batch size each), so a step with a group missing takes a
// smaller window and no sample is skipped or seen twice; a step that does not commit is run
// again on the same window. Where the epoch stands is part of the state a new group heals from.
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>

#include "examples/fashion_mnist/example.h"

namespace example {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Test accuracy over the first n images, the group's ranks each a share.
double evaluate(Net& net, const dpx::FashionMNIST& test, dpx::ProcessGroup& group, int64_t n) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto index = torch::arange(group.rank(), n, group.size(), torch::kInt64);
  auto sums = torch::zeros({2}, torch::kFloat64);  // correct, count
  for (const auto& chunk : index.split(1000)) {
    auto out = net->forward((test.images(chunk) - kMean) / kStd);
    sums[0] += out.argmax(1).eq(test.targets().index_select(0, chunk)).sum().item<double>();
    sums[1] += static_cast<double>(chunk.numel());
  }
  group.allreduce(sums)->wait();
  net->train();
  return sums[0].item<double>() / sums[1].item<double>();
}

}  // namespace

int run_fault_tolerant(const Flags& flags) {
  const auto start = std::chrono::steady_clock::now();
  torch::set_num_threads(1);
  dpx::ft::Manager manager;
  torch::manual_seed(flags.seed);
  dpx::FashionMNIST train(flags.data_dir, dpx::FashionMNIST::Mode::kTrain);
  dpx::FashionMNIST test(flags.data_dir, dpx::FashionMNIST::Mode::kTest);
  const int64_t n = flags.train_limit > 0 ? flags.train_limit : static_cast<int64_t>(*train.size());
  const int64_t test_n = flags.train_limit > 0 ? std::max<int64_t>(1, flags.train_limit / 6)
                                               : static_cast<int64_t>(*test.size());
  Net net;
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  auto progress = torch::zeros({2}, torch::kInt64);  // epoch, samples of it committed
  manager.register_state(*net, optimizer, {progress});
  std::ofstream metrics;
  auto lead = [&] { return manager.participant() == 0 && manager.local_rank() == 0; };

  torch::Tensor order;
  int64_t order_epoch = -1;
  double loss_sum = 0;
  int64_t loss_steps = 0;
  while (manager.start_step()) {
    const int64_t epoch = progress[0].item<int64_t>(), done = progress[1].item<int64_t>();
    if (epoch >= flags.epochs || (flags.max_steps >= 0 && manager.step() >= flags.max_steps)) break;
    if (epoch != order_epoch) {  // the epoch's order, the same on every rank
      order = torch::randperm(n, torch::Generator(at::detail::createCPUGenerator(flags.seed * 1000003 + epoch)),
                              torch::kInt64);
      order_epoch = epoch;
    }
    const int64_t ranks = manager.participants() * manager.local_size();
    const int64_t me = manager.participant() * manager.local_size() + manager.local_rank();
    const int64_t window = std::min(ranks * flags.batch_size, n - done);
    const int64_t first = std::min(me * flags.batch_size, window);
    const int64_t count = std::min(flags.batch_size, window - first);
    auto index = order.narrow(0, done + first, count);
    auto out = net->forward((train.images(index) - kMean) / kStd);
    // The window's mean loss once summed over its ranks: this rank's sum, scaled back up from
    // the average over ranks that allreduce_gradients takes.
    auto loss = torch::nn::functional::cross_entropy(
                    out, train.targets().index_select(0, index),
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) *
                (static_cast<double>(ranks) / window);
    loss.backward();
    manager.allreduce_gradients(net->parameters());
    if (manager.should_commit()) {
      optimizer.step();
      progress[1] += window;
      loss_sum += loss.item<double>() * window / ranks / std::max<int64_t>(count, 1);
      ++loss_steps;
      if (lead() && !metrics.is_open()) metrics.open(flags.metrics_file, std::ios::app);
      if (lead() && (manager.step() % 20 == 0 || done + window == n)) {
        progress_bar(epoch, flags.epochs, done + window, n, 0, loss_sum / loss_steps);
        metrics << nlohmann::ordered_json{{"type", "train"}, {"epoch", epoch + 1},
                                          {"step", manager.step()},
                                          {"loss", loss_sum / loss_steps},
                                          {"groups", manager.participants()},
                                          {"elapsed_s", seconds_since(start)}}.dump()
                << std::endl;
      }
      if (done + window >= n) {
        const double accuracy = evaluate(net, test, manager.local_group(), test_n);
        if (lead()) {
          std::fprintf(stderr, "epoch %lld: test accuracy %.2f%%, %.1f s\n",
                       (long long)epoch + 1, 100 * accuracy, seconds_since(start));
          metrics << nlohmann::ordered_json{{"type", "eval"}, {"epoch", epoch + 1},
                                            {"step", manager.step()},
                                            {"test_accuracy", accuracy},
                                            {"elapsed_s", seconds_since(start)}}.dump()
                  << std::endl;
        }
        progress[0] += 1;
        progress[1] = 0;
        loss_sum = 0, loss_steps = 0;
      }
    }
    optimizer.zero_grad();
  }
  const auto& s = manager.stats();
  // One line a rank: the test compares every rank's digest (all replicas the same bytes).
  std::fprintf(stderr, "ft: group %d rank %d: step %lld, %lld commits, %lld not committed, "
               "%lld heal(s) received, digest %s\n", manager.group(), manager.local_rank(),
               (long long)manager.step(), (long long)s.commits, (long long)s.aborts,
               (long long)s.heals_received, hex_digest(parameter_hash(*net)).c_str());
  return 0;
}

}  // namespace example
