#include "dpx/data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

namespace dpx {

struct DistributedSampler::State {
  size_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  DistributedSamplerOptions options;
  std::int64_t epoch = 0;
  std::vector<size_t> indices;  // this rank's indices of the epoch started by the last reset()
  size_t position = 0;
  std::optional<size_t> resume_position;  // consumed by the next reset()
  bool started = false;                   // reset() ran at least once
  bool epoch_chosen = false;              // set_epoch()/resume() since the last reset()
};

namespace {

size_t num_samples_for(size_t n, int replicas, bool drop_last) {
  const auto r = static_cast<size_t>(replicas);
  if (drop_last && n % r != 0) {
    return n / r;  // Python: ceil((N - R) / R), which is floor(N / R) here
  }
  return (n + r - 1) / r;
}

}  // namespace

std::vector<size_t> distributed_sampler_global_indices(size_t dataset_size, int num_replicas,
                                                       std::int64_t epoch,
                                                       const DistributedSamplerOptions& options) {
  const size_t total =
      num_samples_for(dataset_size, num_replicas, options.drop_last) * num_replicas;
  std::vector<size_t> order(dataset_size);
  if (options.shuffle) {
    // The same generator type and seeding as Python's torch.Generator().manual_seed(seed + epoch),
    // so randperm yields the identical permutation.
    auto gen = at::detail::createCPUGenerator(options.seed + static_cast<std::uint64_t>(epoch));
    const auto perm = torch::randperm(static_cast<int64_t>(dataset_size), gen, torch::kLong);
    const auto* p = perm.data_ptr<int64_t>();
    std::copy(p, p + dataset_size, order.begin());
  } else {
    for (size_t i = 0; i < dataset_size; ++i) {
      order[i] = i;
    }
  }
  if (total <= dataset_size) {
    order.resize(total);  // drop_last truncation (or no-op)
  } else {
    order.reserve(total);
    for (size_t i = dataset_size; i < total; ++i) {
      order.push_back(order[i - dataset_size]);  // pad with the head, cyclically
    }
  }
  return order;
}

DistributedSampler::DistributedSampler(size_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : state_(std::make_shared<State>()) {
  TORCH_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
              num_replicas);
  TORCH_CHECK(rank >= 0 && rank < num_replicas, "Invalid rank ", rank,
              ", rank should be in the interval [0, ", num_replicas - 1, "]");
  state_->dataset_size = dataset_size;
  state_->num_replicas = num_replicas;
  state_->rank = rank;
  state_->options = options;
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  state_->epoch = epoch;
  state_->epoch_chosen = true;
}

std::int64_t DistributedSampler::epoch() const { return state_->epoch; }

void DistributedSampler::resume(std::int64_t epoch, size_t position) {
  set_epoch(epoch);
  state_->resume_position = position;
}

size_t DistributedSampler::num_samples() const {
  return num_samples_for(state_->dataset_size, state_->num_replicas, state_->options.drop_last);
}

size_t DistributedSampler::total_size() const { return num_samples() * state_->num_replicas; }

size_t DistributedSampler::position() const { return state_->position; }

std::vector<size_t> DistributedSampler::indices() const {
  const auto all = distributed_sampler_global_indices(state_->dataset_size, state_->num_replicas,
                                                      state_->epoch, state_->options);
  std::vector<size_t> mine;
  mine.reserve(num_samples());
  for (size_t i = state_->rank; i < all.size(); i += state_->num_replicas) {
    mine.push_back(all[i]);
  }
  return mine;
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  auto& s = *state_;
  if (new_size) {
    s.dataset_size = *new_size;
  }
  if (s.started && !s.epoch_chosen && s.options.shuffle) {
    TORCH_WARN_ONCE("dpx::DistributedSampler: a new pass started without set_epoch(), so it ",
                    "repeats epoch ", s.epoch, "'s order; call sampler.set_epoch(epoch) before ",
                    "each epoch (as in Python)");
  }
  s.indices = indices();
  s.position = std::min(s.resume_position.value_or(0), s.indices.size());
  s.resume_position.reset();
  s.started = true;
  s.epoch_chosen = false;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  auto& s = *state_;
  if (!s.started) {
    reset();
  }
  if (s.position >= s.indices.size()) {
    return torch::nullopt;
  }
  const size_t end = std::min(s.indices.size(), s.position + batch_size);
  std::vector<size_t> batch(s.indices.begin() + s.position, s.indices.begin() + end);
  s.position = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const auto& s = *state_;
  archive.write("dataset_size", torch::tensor(static_cast<int64_t>(s.dataset_size)));
  archive.write("seed", torch::tensor(static_cast<int64_t>(s.options.seed)));
  archive.write("epoch", torch::tensor(s.epoch));
  archive.write("position", torch::tensor(static_cast<int64_t>(s.position)));
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor size, seed, epoch, position;
  archive.read("dataset_size", size);
  archive.read("seed", seed);
  archive.read("epoch", epoch);
  archive.read("position", position);
  TORCH_CHECK(size.item<int64_t>() == static_cast<int64_t>(state_->dataset_size),
              "DistributedSampler::load: saved for a dataset of ", size.item<int64_t>(),
              " samples, but this sampler has ", state_->dataset_size);
  TORCH_CHECK(seed.item<int64_t>() == static_cast<int64_t>(state_->options.seed),
              "DistributedSampler::load: saved with seed ", seed.item<int64_t>(),
              ", but this sampler has seed ", state_->options.seed);
  resume(epoch.item<int64_t>(), static_cast<size_t>(position.item<int64_t>()));
}

}  // namespace dpx
