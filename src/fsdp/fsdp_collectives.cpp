// A unit's collectives: the all-gather that makes its parameters whole and the reduce-scatter
// of its gradients (Note [Gradient reduction] in fsdp_context.h). Each moves one flat buffer
// per dtype: rank r's part is the concatenation of its padded shards, as FSDP2 lays it out.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <map>

#include "fsdp/fsdp_context.h"
#include "fsdp/fsdp_unit.h"

namespace dpx::detail {
namespace {

struct Average {
  ReduceOp op = ReduceOp::kAvg;
  double predivide = 1.0, postdivide = 1.0;
};

// FSDP2's choice: float32 and bfloat16 have the range to be averaged by the collective; other
// dtypes (float16 for range, float64 by the same rule) are summed between two divisions whose
// product is the world size, the first the largest power of two below about its square root.
Average average_for(at::ScalarType dtype, int world) {
  if (world == 1) return {ReduceOp::kSum, 1.0, 1.0};
  if (dtype == at::kFloat || dtype == at::kBFloat16) return {};
  const double factor = world;
  double pre = 1.0;
  while (std::fmod(factor, pre) == 0.0 && factor / pre > pre) pre *= 2.0;
  return {ReduceOp::kSum, pre, factor / pre};
}

}  // namespace

void FsdpUnit::plan_gathers() {
  std::map<at::ScalarType, std::size_t> by_dtype;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto dtype = param_dtype(params_[i]);
    auto [it, added] = by_dtype.emplace(dtype, gathers_.size());
    if (added) {
      gathers_.emplace_back();
      gathers_.back().dtype = dtype;
    }
    auto& g = gathers_[it->second];
    g.params.push_back(i);
    g.columns.push_back(g.total);
    g.total += params_[i].chunk_numel();
  }
}

void FsdpUnit::unshard() {
  if (unsharded_ || gather_in_flight_) return;
  const int world = pg_->size();
  for (auto& g : gathers_) {
    const auto options = params_[g.params.front()].padded_shard().options().dtype(g.dtype);
    g.input = at::empty({g.total}, options);
    for (std::size_t k = 0; k < g.params.size(); ++k) {
      const auto& p = params_[g.params[k]];
      g.input.narrow(0, g.columns[k], p.chunk_numel()).copy_(p.padded_shard().view({-1}));
    }
    g.output = at::empty({world * g.total}, options);
    g.work = pg_->allgather(g.output, g.input);
  }
  gather_in_flight_ = true;
}

void FsdpUnit::wait_for_unshard() {
  if (unsharded_) return;
  unshard();
  const int world = pg_->size();
  for (auto& g : gathers_) {
    g.work->synchronize();
    auto gathered = g.output.view({world, g.total});
    for (std::size_t k = 0; k < g.params.size(); ++k) {
      auto& p = params_[g.params[k]];
      p.init_unsharded(g.dtype);
      p.copy_out(gathered, g.columns[k]);
    }
    g.input = g.output = at::Tensor();
    g.work.reset();
  }
  for (auto& p : params_) p.to_unsharded();
  gather_in_flight_ = false;
  unsharded_ = true;
}

void FsdpUnit::reshard() {
  if (gather_in_flight_) {  // prefetched and not used: the collective still has to finish
    for (auto& g : gathers_) {
      g.work->synchronize();
      g.input = g.output = at::Tensor();
      g.work.reset();
    }
    gather_in_flight_ = false;
  }
  if (!unsharded_) return;
  for (auto& p : params_) p.to_sharded();
  unsharded_ = false;
}

void FsdpUnit::reduce_gradients() {
  std::map<at::ScalarType, std::vector<std::pair<std::size_t, at::Tensor>>> by_dtype;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.requires_grad()) continue;
    const auto dtype = reduce_dtype(p);
    auto grad = p.take_unsharded_grad(dtype);
    if (grad.defined()) by_dtype[dtype].emplace_back(i, std::move(grad));
  }
  reshard();
  if (by_dtype.empty()) return;
  context_->finish_reductions();  // at most one reduce-scatter in flight besides this one
  const int world = pg_->size();
  for (auto& [dtype, grads] : by_dtype) {
    FsdpContext::Reduction r;
    r.unit = shared_from_this();
    int64_t total = 0;
    for (const auto& [i, grad] : grads) {
      r.params.push_back(i);
      r.columns.push_back(total);
      total += params_[i].chunk_numel();
    }
    const auto average = average_for(dtype, world);
    auto input = at::empty({world, total}, grads.front().second.options().dtype(dtype));
    for (std::size_t k = 0; k < grads.size(); ++k) {
      params_[r.params[k]].copy_in(grads[k].second, input, r.columns[k]);
    }
    grads.clear();  // the whole gradients are freed here
    if (average.predivide != 1.0) input.div_(average.predivide);
    r.input = input.view({-1});
    r.output = at::empty({total}, input.options());
    r.postdivide = average.postdivide;
    r.work = pg_->reduce_scatter(r.output, r.input, {average.op});
    context_->add_reduction(std::move(r));
  }
}

void FsdpContext::finish_reductions() {
  while (!reductions_.empty()) {
    auto r = std::move(reductions_.front());
    reductions_.pop_front();
    r.work->synchronize();
    if (r.postdivide != 1.0) r.output.div_(r.postdivide);
    auto& params = r.unit->params();
    for (std::size_t k = 0; k < r.params.size(); ++k) {
      auto& p = params[r.params[k]];
      p.accumulate_sharded_grad(r.output.narrow(0, r.columns[k], p.sharded().numel()));
    }
  }
}

void FsdpContext::add_reduction(Reduction reduction) {
  reductions_.push_back(std::move(reduction));
}

}  // namespace dpx::detail
