// DistributedSampler against the reference values of Python's sampler and PyTorch-generated goldens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "dpx/data/distributed_sampler.h"

namespace {

using Indices = std::vector<size_t>;

Indices rank_indices(size_t n, int r, int rank, std::int64_t epoch,
                     dpx::DistributedSamplerOptions opts) {
  dpx::DistributedSampler s(n, r, rank, opts);
  s.set_epoch(epoch);
  return s.indices();
}

TEST(DistributedSampler, SpecReferenceValues) {
  const dpx::DistributedSamplerOptions no_shuffle{.shuffle = false};
  EXPECT_EQ(rank_indices(10, 3, 0, 5, no_shuffle), (Indices{0, 3, 6, 9}));
  EXPECT_EQ(rank_indices(10, 3, 1, 5, no_shuffle), (Indices{1, 4, 7, 0}));
  EXPECT_EQ(rank_indices(10, 3, 2, 5, no_shuffle), (Indices{2, 5, 8, 1}));
  const dpx::DistributedSamplerOptions shuffle{};
  EXPECT_EQ(rank_indices(10, 3, 0, 0, shuffle), (Indices{4, 5, 0, 2}));
  EXPECT_EQ(rank_indices(10, 3, 1, 0, shuffle), (Indices{1, 3, 8, 4}));
  EXPECT_EQ(rank_indices(10, 3, 2, 0, shuffle), (Indices{7, 9, 6, 1}));
  EXPECT_EQ(rank_indices(10, 3, 0, 1, shuffle), (Indices{5, 2, 9, 4}));
  EXPECT_EQ(rank_indices(10, 3, 1, 1, shuffle), (Indices{6, 0, 3, 5}));
  EXPECT_EQ(rank_indices(10, 3, 2, 1, shuffle), (Indices{1, 8, 7, 6}));
  const dpx::DistributedSamplerOptions drop{.drop_last = true};
  EXPECT_EQ(rank_indices(10, 3, 0, 0, drop), (Indices{4, 5, 0}));
  EXPECT_EQ(rank_indices(10, 3, 1, 0, drop), (Indices{1, 3, 8}));
  EXPECT_EQ(rank_indices(10, 3, 2, 0, drop), (Indices{7, 9, 6}));
  const Indices expected_small[] = {{0}, {1}, {0}, {1}, {0}};
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_EQ(rank_indices(2, 5, rank, 0, no_shuffle), expected_small[rank]);
  }
}

TEST(DistributedSampler, MatchesPythonGoldenFile) {
  std::ifstream in(DPX_SOURCE_DIR "/tests/data/sampler_golden.txt");
  ASSERT_TRUE(in) << "missing tests/data/sampler_golden.txt";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    std::istringstream is(line);
    size_t n = 0, count = 0;
    int r = 0, rank = 0, shuffle = 0, drop_last = 0;
    std::uint64_t seed = 0;
    std::int64_t epoch = 0, checksum = 0;
    std::string colon;
    is >> n >> r >> rank >> seed >> epoch >> shuffle >> drop_last >> count >> checksum >> colon;
    Indices head;
    for (size_t i; is >> i;) {
      head.push_back(i);
    }
    const auto got = rank_indices(n, r, rank, epoch,
                                  {.shuffle = shuffle != 0, .seed = seed,
                                   .drop_last = drop_last != 0});
    std::int64_t sum = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      sum += static_cast<std::int64_t>(k + 1) * static_cast<std::int64_t>(got[k]);
    }
    SCOPED_TRACE(line.substr(0, 40));
    ASSERT_EQ(got.size(), count);
    EXPECT_EQ(sum, checksum);
    EXPECT_EQ(Indices(got.begin(), got.begin() + head.size()), head);
    ++cases;
  }
  EXPECT_GT(cases, 300);
}

TEST(DistributedSampler, InvalidRankMessageMatchesPython) {
  try {
    dpx::DistributedSampler s(10, 3, 3);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Invalid rank 3, rank should be in the interval [0, 2]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dpx::DistributedSampler(10, 3, -1), c10::Error);
}

TEST(DistributedSampler, NextYieldsBatchesOfTheEpoch) {
  dpx::DistributedSampler s(10, 3, 1, {.shuffle = false});
  s.reset();
  EXPECT_EQ(*s.next(3), (Indices{1, 4, 7}));
  EXPECT_EQ(*s.next(3), (Indices{0}));
  EXPECT_FALSE(s.next(3).has_value());
  EXPECT_EQ(s.num_samples(), 4u);
  EXPECT_EQ(s.total_size(), 12u);
}

// The loader's copy must see set_epoch on the caller's copy (Note [Shared sampler state]).
TEST(DistributedSampler, SetEpochReachesTheDataLoadersCopy) {
  auto dataset = torch::data::datasets::TensorDataset(torch::arange(10)).map(
      torch::data::transforms::Stack<torch::data::TensorExample>());
  dpx::DistributedSampler sampler(10, 3, 0);
  auto loader = torch::data::make_data_loader(std::move(dataset), sampler,
                                              torch::data::DataLoaderOptions().batch_size(4));
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    sampler.set_epoch(epoch);
    std::vector<int64_t> seen;
    for (auto& batch : *loader) {
      for (int64_t i = 0; i < batch.data.numel(); ++i) {
        seen.push_back(batch.data[i].item<int64_t>());
      }
    }
    const auto expected = rank_indices(10, 3, 0, epoch, {});
    EXPECT_EQ(std::vector<int64_t>(expected.begin(), expected.end()), seen) << "epoch " << epoch;
  }
}

TEST(DistributedSampler, SaveLoadResumesMidEpoch) {
  dpx::DistributedSampler a(100, 2, 1, {.seed = 3});
  a.set_epoch(4);
  a.reset();
  a.next(10);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  dpx::DistributedSampler b(100, 2, 1, {.seed = 3});
  torch::serialize::InputArchive in;
  std::istringstream is(bytes.str());
  in.load_from(is);
  b.load(in);
  b.reset();
  EXPECT_EQ(b.epoch(), 4);
  EXPECT_EQ(b.position(), 10u);
  EXPECT_EQ(*b.next(5), *a.next(5));

  dpx::DistributedSampler other_seed(100, 2, 1, {.seed = 4});
  std::istringstream is2(bytes.str());
  torch::serialize::InputArchive in2;
  in2.load_from(is2);
  EXPECT_THROW(other_seed.load(in2), c10::Error);
}

TEST(DistributedSampler, ResetWithNewSize) {
  dpx::DistributedSampler s(10, 2, 0, {.shuffle = false});
  s.reset(4);
  EXPECT_EQ(*s.next(10), (Indices{0, 2}));
}

}  // namespace
