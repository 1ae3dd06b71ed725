// pytorch/examples' cpp/distributed/dist-mnist.cpp, ported to dpx as its users would port it:
// the same model, data pipeline, optimizer and prints, with DistributedDataParallel in place of
// the hand-written all-reduce of every gradient after backward() (docs/migrating.md, line for
// line). The original trains on MNIST, which no Debian package carries; this one reads
// Fashion-MNIST (the same IDX format, shapes and classes), which dataset-fashion-mnist installs.
//   mpirun -np 2 -x OMP_NUM_THREADS=1 build/examples/dist_mnist/dist_mnist
//   dpxrun --nproc-per-node 2 build/examples/dist_mnist/dist_mnist
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <iostream>

#include "dpx/data/fashion_mnist.h"
#include "dpx/dpx.h"
#include "examples/common/run_main.h"

// Define a Convolutional Module
struct Model : torch::nn::Module {
  Model()
      : conv1(torch::nn::Conv2dOptions(1, 10, 5)),
        conv2(torch::nn::Conv2dOptions(10, 20, 5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, 0.5, is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, 1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

// The original's constants, as flags (the defaults are the original's).
struct Flags {
  size_t num_epochs = 10;
  int64_t max_steps = -1;  // batches per epoch; -1: all (the original's only mode)
  std::string data_root = dpx::FashionMNIST::kDefaultRoot;
};

// An integer of at least `min` (CLI11's own number checks print their range up to 1.8e308).
CLI::Validator at_least(int64_t min, const std::string& note = "") {
  return CLI::Validator(
      [min, note](std::string& v) {
        int64_t n = 0;
        return CLI::detail::lexical_cast(v, n) && n >= min
                   ? std::string()
                   : "expects an integer >= " + std::to_string(min) + note + ", got '" + v + "'";
      },
      ">=" + std::to_string(min));
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--epochs", f.num_epochs, "epochs to train (default 10)")->check(at_least(1));
  app.add_option("--max-steps", f.max_steps, "batches per epoch (default: the whole epoch)")
      ->check(at_least(-1, " (-1: the whole epoch)"));
  app.add_option("--data", f.data_root, "the Fashion-MNIST folder (dataset-fashion-mnist)")
      ->check(CLI::ExistingDirectory);
}

// The original's main(), ported.
int train(const Flags& flags) {
  const auto [num_epochs, max_steps, data_root] = flags;

  // Creating the process group: env:// (dpxrun, torchrun) or mpirun's own variables
  auto pg = dpx::init_process_group();  // mpirun: OMPI_COMM_WORLD_RANK, _SIZE (docs/launcher.md)
  auto numranks = pg->size();
  auto rank = pg->rank();

  // TRAINING
  // Read train dataset (Fashion-MNIST's mean and standard deviation)
  auto train_dataset = dpx::FashionMNIST(data_root)
                           .map(torch::data::transforms::Normalize<>(0.2860, 0.3530))
                           .map(torch::data::transforms::Stack<>());

  // Distributed Sampler: PyTorch's order, a new shuffle each epoch
  dpx::DistributedSampler data_sampler(train_dataset.size().value(), numranks, rank);

  auto num_train_samples_per_proc = data_sampler.num_samples();

  // Generate dataloader
  auto total_batch_size = 64;
  auto batch_size_per_proc = total_batch_size / numranks;  // effective batch size in each processor
  TORCH_CHECK(batch_size_per_proc > 0, "dist_mnist splits a batch of ", total_batch_size,
              " samples over the ranks: it runs on at most ", total_batch_size, " ranks, not ",
              numranks);
  auto data_loader =
      torch::data::make_data_loader(std::move(train_dataset), data_sampler, batch_size_per_proc);

  // setting manual seed
  torch::manual_seed(0);

  auto model = std::make_shared<Model>();
  // Broadcasts rank 0's weights; averages gradients bucket by bucket during backward()
  dpx::DistributedDataParallel ddp(model, pg);

  auto learning_rate = 1e-2;

  torch::optim::SGD optimizer(ddp->parameters(), learning_rate);

  for (size_t epoch = 1; epoch <= num_epochs; ++epoch) {
    data_sampler.set_epoch(epoch);
    size_t num_correct = 0, num_seen = 0;
    int64_t step = 0;

    for (auto& batch : *data_loader) {
      if (step++ == max_steps) break;
      auto ip = batch.data;
      auto op = batch.target.squeeze();

      // convert to required formats
      ip = ip.to(torch::kF32);
      op = op.to(torch::kLong);

      // Reset gradients
      optimizer.zero_grad();

      // Execute forward pass
      auto prediction = ddp->forward(ip);

      // As the original: forward() returns log-probabilities already, which log_softmax keeps.
      auto loss = torch::nll_loss(torch::log_softmax(prediction, 1), op);

      // Backpropagation: the gradients arrive averaged over every rank
      loss.backward();

      // Update parameters
      optimizer.step();

      auto guess = prediction.argmax(1);
      num_correct += torch::sum(guess.eq_(op)).item<int64_t>();
      num_seen += op.size(0);
    }  // end batch loader

    auto accuracy = 100.0 * num_correct / (max_steps < 0 ? num_train_samples_per_proc : num_seen);

    std::cout << "Accuracy in rank " << rank << " in epoch " << epoch << " - " << accuracy
              << std::endl;
  }  // end epoch

  // Every rank holds the same model: DDP gave every rank the same averaged gradients. The sum of
  // the weights, printed by each rank, shows it.
  double weights = 0;
  for (const auto& p : model->parameters()) weights += p.sum().item<double>();
  std::printf("Weights sum in rank %d - %.17g\n", rank, weights);
  std::fflush(stdout);

  // TESTING ONLY IN RANK 0
  if (rank == 0) {
    auto test_dataset = dpx::FashionMNIST(data_root, dpx::FashionMNIST::Mode::kTest)
                            .map(torch::data::transforms::Normalize<>(0.2860, 0.3530))
                            .map(torch::data::transforms::Stack<>());

    auto num_test_samples = test_dataset.size().value();
    auto test_loader = torch::data::make_data_loader(std::move(test_dataset), num_test_samples);

    model->eval();  // enable eval mode to prevent backprop

    size_t num_correct = 0;

    for (auto& batch : *test_loader) {
      auto ip = batch.data;
      auto op = batch.target.squeeze();

      // convert to required format
      ip = ip.to(torch::kF32);
      op = op.to(torch::kLong);

      auto prediction = model->forward(ip);

      auto loss = torch::nll_loss(torch::log_softmax(prediction, 1), op);

      std::cout << "Test loss - " << loss.item<float>() << std::endl;

      auto guess = prediction.argmax(1);

      num_correct += torch::sum(guess.eq_(op)).item<int64_t>();
    }  // end test loader

    std::cout << "Num correct - " << num_correct << std::endl;
    std::cout << "Test Accuracy - " << 100.0 * num_correct / num_test_samples << std::endl;
  }  // end rank 0
  return 0;
}

int main(int argc, char* argv[]) {
  dpx::install_error_handler();  // a crash leaves an error file dpxrun's summary quotes
  CLI::App app("dist-mnist on dpx: DistributedDataParallel on every rank of mpirun or dpxrun",
               "dist_mnist");
  Flags flags;
  add_flags(app, flags);
  return examples::run_main(app, argc, argv, [&] { return train(flags); });
}
