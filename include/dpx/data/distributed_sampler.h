// DistributedSampler with exactly the semantics of PyTorch's torch.utils.data.DistributedSampler
// (docs/data.md), usable as the sampler of LibTorch's data loader.
//
// Note [Shared sampler state]
// torch::data::make_data_loader takes its sampler by value, so a plain sampler object would leave
// the caller holding a copy that the loader never sees: set_epoch() on it would silently do
// nothing and every epoch would repeat the same order. Here the sampler is a handle: all copies
// share one state, so set_epoch() on the caller's copy reaches the loader's. Forgetting set_epoch
// altogether is reported: starting a second pass over the same shuffled epoch warns once.
#pragma once

#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace dpx {

struct DistributedSamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;  // the permutation of epoch e is randperm(N) seeded with seed + e
  bool drop_last = false;
};

class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  // Throws "Invalid rank r, rank should be in the interval [0, R-1]" for a bad rank.
  DistributedSampler(size_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});

  // Chooses the order of the next epoch (the next reset()). Reaches every copy of this sampler.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const;

  // Resumes in the middle of an epoch: the next reset() starts `epoch` at local index
  // `position` (the number of this rank's samples already consumed).
  void resume(std::int64_t epoch, size_t position);

  // This rank's indices of the current epoch, in order: the epoch's permutation (or 0..n-1),
  // padded by repetition (or truncated with drop_last) to a multiple of the replicas, then every
  // num_replicas-th index from `rank`.
  std::vector<size_t> indices() const;
  // How many indices this rank yields per epoch (Python's len(sampler)).
  size_t num_samples() const;
  size_t total_size() const;
  // How many of this epoch's indices next() has handed out so far.
  size_t position() const;

  // torch::data::samplers::Sampler: reset() starts the current epoch (new_size replaces N).
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The whole epoch's index list before the strided slice (after shuffling and padding or
// truncating to total_size); exposed for tests.
std::vector<size_t> distributed_sampler_global_indices(size_t dataset_size, int num_replicas,
                                                       std::int64_t epoch,
                                                       const DistributedSamplerOptions& options);

}  // namespace dpx
