// dpx-bench sparse: DDP training steps of an embedding model whose Embedding has sparse
// gradients (all-gathered rows, Note [Sparse buckets] in src/ddp/sparse_reduce.h) against
// the same model with a dense Embedding gradient (all-reduced whole): bytes a rank sends per
// step and step time. Runs as one worker of an env:// job; rank 0 prints. The two alternate
// within each round (this machine is noisy); a step lasts as long as its slowest rank, and
// medians are reported.
#include <torch/torch.h>

#include <cstdio>

#include "bench/compare.h"
#include "dpx/dpx.h"

namespace dpx::bench::sparse_bench {
namespace {

struct SparseArgs : CompareOptions {
  std::int64_t vocab = 200000;
  std::int64_t dim = 64;
  int batch = 64;
  int tokens = 20;  // ids per sample
};

// Bags of token ids -> 10 class scores.
struct BagNetImpl : torch::nn::Module {
  BagNetImpl(std::int64_t vocab, std::int64_t dim, bool sparse) {
    emb = register_module(
        "emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, dim).sparse(sparse)));
    fc = register_module("fc", torch::nn::Linear(dim, 10));
  }
  torch::Tensor forward(const torch::Tensor& ids) { return fc(emb(ids).sum(1)); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(BagNet);

// Bytes one rank sends per step under ring algorithms (the convention of nccl-tests' busbw):
// an all-reduce of n bytes sends 2 (W-1)/W n; an all-gather of n bytes per rank sends (W-1) n.
double allreduce_bytes(double n, int world) { return 2.0 * (world - 1) / world * n; }
double allgather_bytes(double n, int world) { return (world - 1) * n; }

int run(const SparseArgs& a) {
  auto pg = join_job(a);
  const int world = pg->size();
  std::int64_t max_rows = 0;
  torch::manual_seed(0);
  BagNet sparse_net(a.vocab, a.dim, true), dense_net(a.vocab, a.dim, false);
  DistributedDataParallel sparse(sparse_net, pg), dense(dense_net, pg);
  torch::optim::SGD sparse_opt(sparse->parameters(), 0.01), dense_opt(dense->parameters(), 0.01);
  torch::manual_seed(1 + pg->rank());
  auto ids = torch::randint(a.vocab, {a.batch, a.tokens});
  auto y = torch::randint(10, {a.batch});
  auto step = [&](auto& ddp, torch::optim::SGD& opt) {
    return slowest_rank_seconds(*pg, [&] {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(ids), y).backward();
      opt.step();
    });
  };
  for (int s = 0; s < 2; ++s) {  // warm-up, and the bucket rebuild after the first step
    step(sparse, sparse_opt);
    step(dense, dense_opt);
  }
  const auto t = alternate(a, [&] { return step(dense, dense_opt); },
                           [&] { return step(sparse, sparse_opt); });
  // The rows each rank touches; every rank pads its share of the all-gather to the largest.
  const auto touched = (at::bincount(ids.flatten()) > 0).sum().item<std::int64_t>();
  auto rows = at::full({1}, touched, at::kLong);
  pg->allreduce(rows, {ReduceOp::kMax})->wait();
  max_rows = rows.item<std::int64_t>();
  if (pg->rank() == 0) {
    const double fc_bytes = (a.dim * 10 + 10) * 4.0;
    const double dense_bytes = allreduce_bytes(a.vocab * a.dim * 4.0 + fc_bytes, world);
    const double row_bytes = 8.0 + a.dim * 4.0;  // an index and a row of values
    const double sparse_bytes = allreduce_bytes(fc_bytes, world) +
                                allgather_bytes(16.0 + max_rows * row_bytes, world);
    std::printf("# dpx-bench sparse: Embedding(%lld, %lld) + Linear, batch %d x %d ids, backend "
                "%s, %d ranks, %d threads each; at most %lld rows per rank\n",
                static_cast<long long>(a.vocab), static_cast<long long>(a.dim), a.batch, a.tokens,
                pg->backend().c_str(), world, a.threads,
                static_cast<long long>(max_rows));
    std::printf("bytes sent per rank per step: dense %.0f, sparse %.0f, ratio %.5f\n", dense_bytes,
                sparse_bytes, sparse_bytes / dense_bytes);
    print_step_times(t, "dense", "sparse");
  }
  pg->barrier()->wait();
  return 0;
}

RegisterCommand reg("sparse", "DDP with a sparse Embedding gradient against a dense one: bytes "
                    "sent, step time", [](CLI::App& app) -> Run {
  auto a = std::make_shared<SparseArgs>();
  add_compare_options(app, *a);
  app.add_option("--vocab", a->vocab, "embedding rows (default 200000)")->check(at_least(1));
  app.add_option("--dim", a->dim, "embedding width (default 64)")->check(at_least(1));
  app.add_option("--batch", a->batch, "samples per rank (default 64)")->check(at_least(1));
  app.add_option("--tokens", a->tokens, "ids per sample (default 20)")->check(at_least(1));
  return [a](const std::vector<std::string>&) { return run(*a); };
});

}  // namespace
}  // namespace dpx::bench::sparse_bench
