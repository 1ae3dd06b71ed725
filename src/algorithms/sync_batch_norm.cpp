#include "dpx/algorithms/sync_batch_norm.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/nn/init.h>

#include <sstream>

#include "runtime/compat/autograd.h"
#include "comm/coordination/control.h"
#include "algorithms/sync_batch_norm_detail.h"

namespace dpx {
namespace {

using torch::autograd::variable_list;

// Every dimension but the channels (1).
std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// Shapes a per-channel vector to broadcast against (N, C, ...).
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = v.numel();
  return v.view(shape);
}

}  // namespace

namespace detail {

// Every rank fails alike when their channel counts differ: the statistics all-gather that
// follows needs one size on every rank. Host tensors through the group's device, if it has one
// (Note [Control tensors]).
void check_channels_agree(ProcessGroup& pg, int64_t channels) {
  auto all = at::empty({pg.size()}, at::kLong);
  control_allgather(pg, all, at::full({1}, channels, at::kLong));
  if (all.eq(channels).all().item<bool>()) return;
  std::ostringstream counts;
  for (int64_t r = 0; r < pg.size(); ++r) {
    counts << (r ? ", " : "") << "rank " << r << ": " << all[r].item<int64_t>();
  }
  TORCH_CHECK(false, pg.where(), "SyncBatchNorm: the ranks' inputs have different numbers of ",
              "channels (", counts.str(), "); every rank must run the same model on inputs of ",
              "the same channel count");
}

}  // namespace detail

namespace {

// Note [SyncBatchNorm backward]
// With xmu = x - mean over the whole group's batch of N samples, dL/dx = w * invstd * (dy -
// sum(dy)/N - xmu * invstd^2 * sum(dy * xmu)/N), where both sums run over every rank's samples: one
// all-reduce of 2C values. The weight and bias gradients stay local (DDP averages them like any
// other gradient), as in PyTorch.
class SyncBatchNormBackward : public torch::autograd::Node {
 public:
  SyncBatchNormBackward(std::shared_ptr<ProcessGroup> group, at::Tensor input, at::Tensor weight,
                        detail::BatchStats stats)
      : group_(std::move(group)),
        input_(std::move(input)),
        weight_(std::move(weight)),
        stats_(std::move(stats)) {}

  std::string name() const override { return "dpx::SyncBatchNormBackward"; }

  void release_variables() override {
    input_.reset();
    released_ = true;
  }

  variable_list apply(variable_list&& grads) override {
    TORCH_CHECK(!released_, "SyncBatchNorm: trying to backward through the graph a second time; ",
                "specify retain_graph=true the first time you call backward");
    const auto& x = input_;
    const int64_t channels = x.size(1);
    variable_list out(3);
    if (x.numel() == 0) {
      // No samples here, but the peers wait for this rank's share of the sums.
      if (should_compute_output(0)) {
        auto zeros = at::zeros({2 * channels}, stats_.mean.options());
        group_->allreduce(zeros)->synchronize();
        out[0] = at::zeros_like(x);
      }
      return out;
    }
    auto dy = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(x);
    const auto dims = reduce_dims(x);
    auto xmu = x.to(stats_.mean.scalar_type()) - per_channel(stats_.mean, x);
    auto dyf = dy.to(stats_.mean.scalar_type());
    auto sum_dy = dyf.sum(dims);
    auto sum_dy_xmu = (dyf * xmu).sum(dims);
    if (should_compute_output(1) && weight_.defined()) {
      out[1] = (sum_dy_xmu * stats_.invstd).to(weight_.scalar_type());
    }
    if (should_compute_output(2) && weight_.defined()) out[2] = sum_dy.to(weight_.scalar_type());
    if (should_compute_output(0)) {
      auto sums = at::cat({sum_dy, sum_dy_xmu});
      group_->allreduce(sums)->synchronize();
      const auto& n = stats_.total_count;
      auto mean_dy = per_channel(sums.narrow(0, 0, channels), x) / n;
      auto mean_dy_xmu = per_channel(sums.narrow(0, channels, channels), x) / n;
      auto invstd = per_channel(stats_.invstd, x);
      auto scale = weight_.defined() ? invstd * per_channel(weight_.to(invstd.scalar_type()), x)
                                     : invstd;
      out[0] = ((dyf - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * scale).to(x.scalar_type());
    }
    return out;
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  at::Tensor input_;
  at::Tensor weight_;
  detail::BatchStats stats_;
  bool released_ = false;
};

}  // namespace

namespace detail {

// Note [SyncBatchNorm statistics]
// Each rank sends its count, mean and biased variance per channel (an all-gather, since counts
// differ between ranks); the group's statistics combine them as pooled moments, weighted by the
// counts, so a rank without samples (count, mean and variance 0) adds nothing. This is the
// arithmetic of PyTorch's batch_norm_gather_stats_with_counts, without its round trip through
// invstd. It all stays on the input's device: no host sync per layer (only a rank without samples
// reads the total, to fail clearly when no rank has any).
BatchStats gather_batch_stats(ProcessGroup& pg, const at::Tensor& x, double eps) {
  const int64_t channels = x.size(1);
  const bool reduced = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  const auto dtype = reduced ? at::kFloat : x.scalar_type();
  const int64_t count = x.numel() / channels;
  at::Tensor local;
  if (count > 0) {
    auto var_mean = at::var_mean(x.to(dtype), reduce_dims(x), /*unbiased=*/false);
    std::vector<at::Tensor> parts{std::get<1>(var_mean), std::get<0>(var_mean),
                                  at::full({1}, static_cast<double>(count), x.options().dtype(dtype))};
    local = at::cat(parts);
  } else {
    local = at::zeros({2 * channels + 1}, x.options().dtype(dtype));
  }
  auto all = at::empty({pg.size() * local.numel()}, local.options());
  pg.allgather(all, local)->synchronize();
  all = all.view({pg.size(), local.numel()});
  auto counts = all.narrow(1, 2 * channels, 1);  // [world, 1]
  auto means = all.narrow(1, 0, channels);
  auto vars = all.narrow(1, channels, channels);
  BatchStats stats;
  stats.total_count = counts.sum();
  TORCH_CHECK(count > 0 || stats.total_count.item<double>() > 0, pg.where(),
              "SyncBatchNorm: every rank's input is empty; there are no statistics to normalise "
              "with");
  stats.mean = (counts * means).sum(0) / stats.total_count;
  stats.var = (counts * (vars + (means - stats.mean).pow(2))).sum(0) / stats.total_count;
  stats.invstd = (stats.var + eps).rsqrt();
  return stats;
}

at::Tensor sync_batch_norm(const std::shared_ptr<ProcessGroup>& group, const at::Tensor& input,
                           const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var,
                           double momentum, double eps) {
  auto x = input.contiguous();
  BatchStats stats;
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    stats = gather_batch_stats(*group, x, eps);
    if (running_mean.defined()) {
      const auto& n = stats.total_count;
      running_mean.mul_(1 - momentum).add_(stats.mean.to(running_mean.scalar_type()), momentum);
      auto unbiased = stats.var * (n / (n - 1).clamp_min(1));
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.scalar_type()), momentum);
    }
    auto scale = weight.defined() ? stats.invstd * weight.to(stats.invstd.scalar_type())
                                  : stats.invstd;
    auto shift = -stats.mean * scale;
    if (bias.defined()) shift = shift + bias.to(shift.scalar_type());
    output = (x.to(scale.scalar_type()) * per_channel(scale, x) + per_channel(shift, x))
                 .to(x.scalar_type());
  }
  if (at::GradMode::is_enabled() && torch::autograd::compute_requires_grad(x, weight, bias)) {
    auto node = compat::make_node<SyncBatchNormBackward>(group, x, weight, stats);
    node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
    torch::autograd::create_gradient_edge(output, node);
  }
  return output;
}

}  // namespace detail

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_,
                                     std::shared_ptr<ProcessGroup> group)
    : options(std::move(options_)), group_(std::move(group)) {
  reset();
}

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_,
                                     std::shared_ptr<ProcessGroup> group, BatchNormTensors tensors)
    : options(std::move(options_)), group_(std::move(group)), adopted_(std::move(tensors)) {
  reset();
}

void SyncBatchNormImpl::reset() {
  TORCH_CHECK(options.num_features > 0, "SyncBatchNorm: num_features must be positive, got ",
              options.num_features);
  const auto n = options.num_features;
  const bool adopt = adopted_.has_value();
  if (options.affine) {
    weight = register_parameter("weight", adopt ? adopted_->weight : torch::empty({n}));
    bias = register_parameter("bias", adopt ? adopted_->bias : torch::empty({n}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", adopt ? adopted_->running_mean : torch::zeros({n}));
    running_var = register_buffer("running_var", adopt ? adopted_->running_var : torch::ones({n}));
    num_batches_tracked = register_buffer(
        "num_batches_tracked", adopt ? adopted_->num_batches_tracked : torch::tensor(0, torch::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  // Adopted tensors belong to this module only; a clone() must get fresh ones.
  if (adopt) {
    adopted_.reset();
  } else {
    reset_parameters();
  }
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats) return;
  at::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    torch::nn::init::ones_(weight);
    torch::nn::init::zeros_(bias);
  }
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "dpx::SyncBatchNorm(" << options.num_features << ", eps=" << options.eps
         << ", momentum=";
  if (options.momentum) {
    stream << *options.momentum;
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options.affine
         << ", track_running_stats=" << options.track_running_stats << ")";
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm: expected at least 2D input (got ", input.dim(),
              "D input)");
  TORCH_CHECK(input.size(1) == options.num_features, "SyncBatchNorm: the input has ",
              input.size(1), " channels (dimension 1) but the module was built for ",
              options.num_features);
  double factor = options.momentum.value_or(0.0);
  if (is_training() && options.track_running_stats) {
    at::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum) factor = 1.0 / num_batches_tracked.item<double>();
  }
  const bool batch_stats = is_training() || !options.track_running_stats;
  const bool sync = batch_stats && is_training() && group_ && group_->size() > 1;
  if (!sync) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, batch_stats, factor,
                             options.eps, at::globalContext().userEnabledCuDNN());
  }
  // Once per group, not per step: the module's channel count is fixed, and each rank has
  // checked its input's above.
  if (!channels_checked_) {
    detail::check_channels_agree(*group_, options.num_features);
    channels_checked_ = true;
  }
  return detail::sync_batch_norm(group_, input, weight, bias, running_mean, running_var, factor,
                                 options.eps);
}

}  // namespace dpx
