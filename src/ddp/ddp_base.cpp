#include "dpx/ddp/ddp_base.h"

#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/modules/embedding.h>

#include <unordered_set>

#include "dpx/errors.h"
#include "dpx/runtime/env.h"
#include "dpx/ddp/bucket_assignment.h"
#include "comm/coordination/control.h"
#include "dpx/observe/timeline.h"
#include "comm/broadcast_coalesced.h"
#include "ddp/model_sync.h"
#include "ddp/reducer.h"

namespace dpx {
namespace {

// The parameters whose gradients are sparse, found as PyTorch's DDP finds them: those of an
// Embedding or EmbeddingBag built with sparse(true) (Note [Sparse buckets]).
std::unordered_set<const void*> sparse_gradient_parameters(torch::nn::Module& module) {
  std::unordered_set<const void*> out;
  for (const auto& m : module.modules()) {
    bool sparse = false;
    if (const auto* e = m->as<torch::nn::Embedding>()) {
      sparse = e->options.sparse();
    } else if (const auto* b = m->as<torch::nn::EmbeddingBag>()) {
      sparse = b->options.sparse();
    }
    if (!sparse) continue;
    for (const auto& p : m->parameters(/*recurse=*/false)) out.insert(p.unsafeGetTensorImpl());
  }
  return out;
}

// The parameters DDP reduces: those that require grad, each once even if shared by modules;
// `sparse` flags those whose gradients are sparse.
void reduced_parameters(torch::nn::Module& module, std::vector<at::Tensor>& params,
                        std::vector<std::string>& names, std::vector<bool>& sparse) {
  const auto sparse_params = sparse_gradient_parameters(module);
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters()) {
    const auto& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    params.push_back(p);
    names.push_back(item.key());
    sparse.push_back(sparse_params.count(p.unsafeGetTensorImpl()) > 0);
  }
}

}  // namespace

DdpBase::DdpBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                 DistributedDataParallelOptions options)
    : base_module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  TORCH_CHECK(base_module_, "DistributedDataParallel: the module is null");
  TORCH_CHECK(pg_, "DistributedDataParallel: the process group is null");
  TORCH_CHECK(options_.bucket_cap_mb > 0, pg_->where(), "bucket_cap_mb must be positive, got ",
              options_.bucket_cap_mb);
  TORCH_CHECK(options_.first_bucket_cap_mb > 0, pg_->where(),
              "first_bucket_cap_mb must be positive, got ", options_.first_bucket_cap_mb);
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<bool> sparse;
  reduced_parameters(*base_module_, params, names, sparse);
  TORCH_CHECK(!params.empty(), pg_->where(), "DistributedDataParallel is not needed when a "
              "module doesn't have any parameter that requires a gradient.");
  // One device per process (docs/ddp.md): buckets live where the parameters are, and the group
  // reduces them there.
  for (std::size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].device() == pg_->options().device, pg_->where(), "DistributedData"
                "Parallel: parameter ", names[i], " is on ", params[i].device(), " but the process "
                "group works on ", pg_->options().device, "; move the module there first "
                "(module->to(device)) or make the group on the module's device");
  }
  for (const auto& b : base_module_->buffers()) buffers_.push_back(b);

  detail::verify_params_across_ranks(*pg_, params);
  std::vector<at::Tensor> state;
  for (const auto& item : base_module_->named_parameters()) state.push_back(item.value());
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  if (pg_->size() > 1) detail::broadcast_coalesced(*pg_, state, 0);

  detail::ReducerOptions ro;
  ro.bucket_bytes = static_cast<std::size_t>(options_.bucket_cap_mb * 1024 * 1024);
  ro.first_bucket_bytes = static_cast<std::size_t>(options_.first_bucket_cap_mb * 1024 * 1024);
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  ro.static_graph = options_.static_graph;
  ro.debug = debug_level();
  ro.expect_sparse_gradient = std::move(sparse);
  reducer_ = std::make_unique<detail::Reducer>(std::move(params), std::move(names), pg_, ro);
}

DdpBase::~DdpBase() = default;

bool DdpBase::training_forward() const { return at::GradMode::is_enabled(); }

// Note [Buffers under join]
// Buffers come from rank 0 at every synchronised forward, except under join(): rank 0 may have
// run out of data, and its statistics be stale. There the ranks agree on the highest rank that
// still has data (an all-reduce of the maximum; a joined rank offers -1) and take its buffers,
// as PyTorch's _sync_buffers does. When join ends, buffers go with the parameters only when
// broadcast_buffers is set (PyTorch 2.x's final model sync; 1.13 sent them always).
void DdpBase::sync_buffers(bool has_data) {
  if (!options_.broadcast_buffers || pg_->size() == 1 || buffers_.empty()) return;
  int root = 0;
  if (join_active_) {
    auto candidate = at::full({1}, has_data ? pg_->rank() : -1, at::kLong);
    detail::control_allreduce(*pg_, candidate, ReduceOp::kMax)->wait();
    root = static_cast<int>(candidate.item<std::int64_t>());
  }
  detail::broadcast_coalesced(*pg_, buffers_, root);
}

void DdpBase::pre_forward() {
  forward_synced_ = false;
  if (!training_forward()) {
    return;  // evaluation: no communication, the reducer is left as it is
  }
  forward_synced_ = require_backward_grad_sync_;
  if (forward_synced_) forward_start_ = reducer_->mark_forward_start();
  if (join_active_ && forward_synced_) {
    // Join protocol step 1: count the ranks that still have data (joined ranks add 0). With
    // the initial world size as the divisor (the default) nobody here reads the count: as in
    // PyTorch the all-reduce is only issued, ordered on the group's stream, with no host wait.
    if (join_options_.divide_by_initial_world_size) {
      auto active = at::ones({1}, at::TensorOptions(at::kLong).device(pg_->options().device));
      pg_->allreduce(active)->synchronize();
      reducer_->set_divide_factor(pg_->size());
    } else {
      auto active = at::ones({1}, at::kLong);
      detail::control_allreduce(*pg_, active)->wait();  // Note [Control tensors]
      reducer_->set_divide_factor(static_cast<double>(active.item<std::int64_t>()));
    }
    if (join_options_.throw_on_early_termination) {
      // Step 2 with throw_on_early_termination: ranks out of data answer with 1.
      auto exhausted = at::zeros({1}, at::kLong);
      detail::control_allreduce(*pg_, exhausted)->wait();
      if (exhausted.item<std::int64_t>() > 0) {
        throw DistributedError(pg_->where() + "Detected at least one rank that exhausted "
                               "inputs. Throwing across all ranks.");
      }
    }
  }
  // Only synchronised forwards rebuild buckets and broadcast buffers: no_sync iterations stay
  // free of collectives, which keeps them compatible with join() (a joined rank shadows
  // synchronised iterations only).
  reducer_->prepare_for_forward(/*allow_rebuild=*/forward_synced_);
  if (forward_synced_) sync_buffers(/*has_data=*/true);
}

void DdpBase::post_forward(const std::vector<at::Tensor>& outputs) {
  if (!forward_synced_) return;
  reducer_->prepare_for_backward(outputs);
  timeline::record("forward", "ddp", forward_start_, std::chrono::steady_clock::now());
}

void DdpBase::register_comm_hook(std::any state, CommHook hook) {
  reducer_->register_comm_hook(std::move(state), std::move(hook));
}

DdpStats DdpBase::stats() const { return reducer_->stats(); }

// Note [Join protocol]
// Every synchronised forward of a rank with data starts with an all-reduce of 1 (pre_forward). A
// rank out of data loops: all-reduce 0; if the sum is 0 every rank is done; otherwise repeat the
// others' iteration (bucket rebuild if due, buffer broadcast, every bucket with zeros). At the end
// the ranks that finished last agree on one of them (all-reduce max of rank) and broadcast its
// parameters and buffers. With throw_on_early_termination, a forward with data adds a second
// all-reduce of 0, which a rank out of data answers with 1 instead of shadowing, and every rank
// throws (PyTorch's protocol, so the two all-reduces pair up whoever ran out).
void DdpBase::join(const std::function<void()>& loop, JoinOptions options) {
  TORCH_CHECK(!join_active_, pg_->where(), "join() does not nest");
  join_active_ = true;
  join_options_ = options;
  struct Reset {
    DdpBase* ddp;
    ~Reset() {
      ddp->join_active_ = false;
      ddp->reducer_->set_divide_factor(ddp->pg_->size());
    }
  } reset{this};
  loop();
  shadow_until_all_joined();
}

void DdpBase::shadow_until_all_joined() {
  at::NoGradGuard no_grad;
  bool last_joiner = true;
  for (;;) {
    auto active = at::zeros({1}, at::kLong);
    detail::control_allreduce(*pg_, active)->wait();
    if (active.item<std::int64_t>() == 0) break;
    if (join_options_.throw_on_early_termination) {
      auto exhausted = at::ones({1}, at::kLong);
      detail::control_allreduce(*pg_, exhausted)->wait();
      throw DistributedError(pg_->where() + "Rank " + std::to_string(pg_->rank()) +
                             " exhausted all inputs.");
    }
    last_joiner = false;
    reducer_->prepare_for_forward(/*allow_rebuild=*/true);
    sync_buffers(/*has_data=*/false);
    reducer_->shadow_backward();
  }
  auto authority = at::full({1}, last_joiner ? pg_->rank() : -1, at::kLong);
  detail::control_allreduce(*pg_, authority, ReduceOp::kMax)->wait();
  std::vector<at::Tensor> state;
  for (const auto& item : base_module_->named_parameters()) state.push_back(item.value());
  if (options_.broadcast_buffers) {  // Note [Buffers under join]
    state.insert(state.end(), buffers_.begin(), buffers_.end());
  }
  if (pg_->size() > 1) {
    detail::broadcast_coalesced(*pg_, state, static_cast<int>(authority.item<std::int64_t>()));
  }
}

}  // namespace dpx
