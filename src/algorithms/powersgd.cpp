#include "dpx/algorithms/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

namespace dpx::hooks {
namespace {

// Gram-Schmidt on the columns of each matrix of a batch (b x n x r), in place, as PyTorch
// orthogonalises for r <= 2 (and, for larger r, with a QR factorisation).
void orthogonalize(at::Tensor& matrices, double epsilon) {
  const int64_t rank = matrices.size(2);
  if (rank > 2 && matrices.scalar_type() != at::kHalf && matrices.scalar_type() != at::kBFloat16) {
    auto qr = at::linalg_qr(matrices);
    matrices.copy_(std::get<0>(qr));
    return;
  }
  for (int64_t i = 0; i < rank; ++i) {
    auto col = matrices.narrow(2, i, 1);
    auto norm = at::norm(col, 2, {1}, /*keepdim=*/true);
    col.div_(epsilon == 0 ? norm : norm + epsilon);
    if (i + 1 < rank) {
      auto rest = matrices.narrow(2, i + 1, rank - i - 1);
      rest.sub_(at::sum(col * rest, {1}, /*keepdim=*/true) * col);
    }
  }
}

// Which of a bucket's tensors are compressed: the matrices (each gradient viewed as n x m) that
// shrink by at least min_compression_rate; the others are all-reduced as they are.
struct Plan {
  std::vector<at::Tensor> compressed;    // (1 x n x m) views of the bucket
  std::vector<at::Tensor> uncompressed;  // views of the bucket, as shaped
  int64_t p_size = 0, q_size = 0;
  int64_t numel_before = 0, numel_after = 0;  // elements without and with compression
};

Plan plan_compression(const std::vector<at::Tensor>& gradients, const PowerSGDOptions& o) {
  Plan plan;
  for (const auto& t : gradients) {
    auto matrix = t.view({t.size(0), -1});
    const int64_t n = matrix.size(0), m = matrix.size(1);
    const int64_t r = std::min({n, m, o.matrix_approximation_rank});
    const int64_t compressed = (n + m) * r, whole = n * m;
    plan.numel_before += whole;
    if (static_cast<double>(compressed) * o.min_compression_rate < static_cast<double>(whole)) {
      plan.compressed.push_back(matrix.unsqueeze(0));
      plan.p_size += n * r;
      plan.q_size += m * r;
      plan.numel_after += compressed;
    } else {
      plan.uncompressed.push_back(t);
      plan.numel_after += whole;
    }
  }
  return plan;
}

// The factors of each compressed matrix: P (1 x n x r) and Q (1 x m x r), views of the bucket's
// flat `p` and `q`, which are all-reduced whole.
struct Factors {
  std::vector<at::Tensor> ps, qs;
};

Factors factor_views(const Plan& plan, const at::Tensor& p, const at::Tensor& q, int64_t rank) {
  Factors f;
  int64_t p_at = 0, q_at = 0;
  for (const auto& t : plan.compressed) {
    const int64_t n = t.size(1), m = t.size(2);
    const int64_t r = std::min({n, m, rank});
    f.ps.push_back(p.narrow(0, p_at, n * r).view({1, n, r}));
    f.qs.push_back(q.narrow(0, q_at, m * r).view({1, m, r}));
    p_at += n * r;
    q_at += m * r;
  }
  return f;
}

// Compression, before any collective: Q random (drawn from `seed`) or last step's, orthogonalised;
// then P = M Q.
void compress(const Plan& plan, Factors& f, std::optional<uint32_t> seed, double epsilon) {
  if (seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(*seed);
    for (auto& q : f.qs) {
      q.copy_(at::randn(q.sizes(), gen, q.options().device(at::kCPU)));
      orthogonalize(q, epsilon);
    }
  } else {
    for (auto& q : f.qs) orthogonalize(q, epsilon);
  }
  for (size_t i = 0; i < plan.compressed.size(); ++i) {
    at::bmm_out(f.ps[i], plan.compressed[i], f.qs[i]);
  }
}

// Decompression, once the uncompressed tensors' all-reduce (`reduced`) is in: their average goes
// back into the bucket; then all-reduce P, orthogonalise, Q = M^T P, all-reduce Q, divide by the
// world size, and M = P Q^T written into the bucket.
void decompress(ProcessGroup& pg, const Plan& plan, Factors& f, at::Tensor& p, at::Tensor& q,
                const at::Tensor& reduced, double epsilon) {
  const double world = pg.size();
  reduced.div_(world);
  int64_t at = 0;
  for (auto t : plan.uncompressed) {
    t.copy_(reduced.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
  pg.allreduce(p)->synchronize();
  for (auto& pi : f.ps) orthogonalize(pi, epsilon);
  for (size_t i = 0; i < plan.compressed.size(); ++i) {
    at::bmm_out(f.qs[i], plan.compressed[i].transpose(1, 2), f.ps[i]);
  }
  pg.allreduce(q)->synchronize();
  q.div_(world);
  for (size_t i = 0; i < plan.compressed.size(); ++i) {
    auto m = plan.compressed[i];
    at::bmm_out(m, f.ps[i], f.qs[i].transpose(1, 2));
  }
}

}  // namespace

PowerSGDState::PowerSGDState(PowerSGDOptions options)
    : options_(std::move(options)), rng_(options_.random_seed) {
  TORCH_CHECK(options_.matrix_approximation_rank >= 1,
              "PowerSGD: matrix_approximation_rank must be at least 1, got ",
              options_.matrix_approximation_rank);
  TORCH_CHECK(!(options_.use_error_feedback || options_.warm_start) ||
                  options_.start_powersgd_iter > 1,
              "Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or `warm_start` is "
              "enabled, because PowerSGD can only be applied after the first two iterations in "
              "DDP.");
}

void PowerSGDState::maybe_increase_iter(const GradBucket& bucket) {
  if (bucket.is_last) ++iter_;
}

uint32_t PowerSGDState::next_seed() {
  // numpy's legacy bounded draw: mask 32-bit outputs to the next power of two, reject above.
  constexpr uint32_t kMax = 1000000000 - 1;
  constexpr uint32_t kMask = (1u << 30) - 1;  // the smallest 2^k - 1 >= kMax
  uint32_t value;
  do {
    value = static_cast<uint32_t>(rng_()) & kMask;
  } while (value > kMax);
  return value;
}

// Note [PowerSGD step]
// PyTorch's steps, in three parts. In the hook: error feedback in; plan which tensors are
// compressed (plan_compression); compress, P = M Q (Q random and orthogonalised the first time,
// else last step's Q orthogonalised); start the uncompressed tensors' all-reduce. When that
// all-reduce is waited for, decompress: all-reduce P, orthogonalise, Q = M^T P, all-reduce Q,
// divide by the world size, M = P Q^T written into the bucket; then the error (what compression
// lost) is kept for the next step. The collectives after the first run on the thread that waits for
// the bucket, in bucket order, so every rank issues them alike.
std::shared_ptr<Future> powersgd_hook(std::any& any_state, GradBucket& bucket) {
  auto* held = std::any_cast<std::shared_ptr<PowerSGDState>>(&any_state);
  TORCH_CHECK(held != nullptr && *held, "powersgd_hook: the state must be a "
              "std::shared_ptr<dpx::hooks::PowerSGDState>");
  auto state = *held;
  const auto& o = state->options_;
  auto pg = o.process_group ? o.process_group : bucket.process_group;
  at::Tensor input = bucket.buffer;
  if (state->iter_ < o.start_powersgd_iter) {
    state->maybe_increase_iter(bucket);
    std::any group = pg;
    return allreduce_hook(group, bucket);
  }
  auto& memory = state->memory_[bucket.index];
  at::Tensor input_copy;
  if (o.use_error_feedback) {
    if (memory.error.defined()) {
      input.add_(memory.error);
    } else {
      memory.error = at::zeros_like(input);
    }
    input_copy = input.clone();
  }
  Plan plan = plan_compression(bucket.gradients, o);
  state->numel_before_ += plan.numel_before;
  state->numel_after_ += plan.numel_after;
  std::vector<at::Tensor> flat;
  for (const auto& t : plan.uncompressed) flat.push_back(t.reshape({-1}));
  auto uncompressed = flat.empty() ? at::empty({0}, input.options()) : at::cat(flat);
  const bool randomize = !o.warm_start || !memory.p.defined();
  if (randomize) {
    memory.p = at::empty({plan.p_size}, input.options());
    memory.q = at::empty({plan.q_size}, input.options());
  }
  Factors factors = factor_views(plan, memory.p, memory.q, o.matrix_approximation_rank);
  compress(plan, factors, randomize ? std::optional<uint32_t>(state->next_seed()) : std::nullopt,
           o.orthogonalization_epsilon);
  auto work = pg->allreduce(uncompressed);
  return Future::from_work(std::move(work), uncompressed)
      ->then([state, pg, plan, factors, input, input_copy, index = bucket.index,
              is_last = bucket.is_last](const at::Tensor& reduced) mutable {
        auto& memory = state->memory_[index];
        decompress(*pg, plan, factors, memory.p, memory.q, reduced,
                   state->options_.orthogonalization_epsilon);
        if (state->options_.use_error_feedback) memory.error = input_copy - input;
        if (!state->options_.warm_start) {
          memory.p = at::Tensor();
          memory.q = at::Tensor();
        }
        GradBucket last;
        last.is_last = is_last;
        state->maybe_increase_iter(last);
        return input;
      });
}

}  // namespace dpx::hooks
