#include "support/sharded_resume.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/fsdp/fsdp_state_dict.h"

namespace dpx::test {

torch::Tensor sharded_batch_x(int step) {
  return torch::sin(torch::arange(kShardedBatch * 6, torch::kDouble).reshape({kShardedBatch, 6}) *
                    (step + 1));
}
torch::Tensor sharded_batch_y(int step) {
  return torch::cos(torch::arange(kShardedBatch * 4, torch::kDouble).reshape({kShardedBatch, 4}) *
                    (step + 2));
}

void train_sharded_steps(FSDPModule<ShardNetImpl>& model, torch::optim::Optimizer& opt, int from,
                         int to, int rank, int world) {
  const int64_t rows = kShardedBatch / world;
  for (int s = from; s < to; ++s) {
    opt.zero_grad();
    torch::mse_loss(model(sharded_batch_x(s).narrow(0, rank * rows, rows)),
                    sharded_batch_y(s).narrow(0, rank * rows, rows)).backward();
    opt.step();
  }
}

void write_params(const std::string& path,
                  const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : state) parts.push_back(t.reshape({-1}));
  auto flat = torch::cat(parts).contiguous();
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(flat.data_ptr()), flat.numel() * sizeof(double));
}

torch::Tensor read_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size() / 8)}, torch::kDouble)
      .clone();
}

void sharded_checkpoint_run(const std::shared_ptr<ProcessGroup>& pg, const std::string& dir,
                            bool resume, int save_at, int steps, const std::string& out) {
  const int rank = pg->rank(), world = pg->size();
  auto net = make_shard_net();
  auto model = shard(net, pg);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  ShardedCheckpointer ckpt({.directory = dir}, pg);
  int start = 0;
  if (resume) {
    auto progress = ckpt.load_latest(*net, opt);
    ASSERT_TRUE(progress.has_value());
    start = static_cast<int>(progress->step);
    EXPECT_EQ(start, save_at);
  } else {
    train_sharded_steps(model, opt, 0, save_at, rank, world);
    ckpt.save(*net, opt, {.step = save_at});
    start = save_at;
  }
  train_sharded_steps(model, opt, start, steps, rank, world);
  auto state = full_state_dict(*net);
  if (rank == 0) write_params(out, state);
}

void sharded_resume_without_optimizer_state(const std::shared_ptr<ProcessGroup>& pg,
                                            const std::string& dir, int steps,
                                            const std::string& out) {
  auto net = make_shard_net();
  auto model = shard(net, pg);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam scratch(net->parameters(), torch::optim::AdamOptions(1e-2));
  const auto progress = ShardedCheckpointer({.directory = dir}, pg).load_latest(*net, scratch);
  ASSERT_TRUE(progress.has_value());
  train_sharded_steps(model, opt, static_cast<int>(progress->step), steps, pg->rank(),
                      pg->size());
  auto state = full_state_dict(*net);
  if (pg->rank() == 0) write_params(out, state);
}

}  // namespace dpx::test
