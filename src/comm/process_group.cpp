#include "dpx/comm/process_group.h"

#include <c10/util/Exception.h>

#include <utility>

#include "observe/stall_inspector.h"
#include "dpx/errors.h"

namespace dpx {
namespace {

thread_local std::shared_ptr<const std::string> t_label;

bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, Options options)
    : rank_(rank), size_(size), options_(options), where_(dpx::where(rank, size)) {
  TORCH_CHECK(size >= 1, "world_size must be at least 1, got ", size);
  TORCH_CHECK(rank >= 0 && rank < size, "rank ", rank, " is out of range for world_size ", size,
              "; ranks go from 0 to world_size - 1");
}

ProcessGroup::~ProcessGroup() = default;

CollectiveLabel::CollectiveLabel(std::shared_ptr<const std::string> label)
    : previous_(std::exchange(t_label, std::move(label))) {}

CollectiveLabel::~CollectiveLabel() { t_label = std::move(previous_); }

void ProcessGroup::start_stall_inspector(std::shared_ptr<Store> store) {
  const auto threshold = detail::stall_threshold(options_.stall_threshold);
  if (size_ == 1 || threshold.count() == 0 || inspector_) return;
  inspector_ = std::make_unique<detail::StallInspector>(
      std::move(store), rank_, size_, where_, threshold, options_.timeout,
      [](void* work) { return static_cast<Work*>(work)->is_completed(); }, options_.device);
}

void ProcessGroup::stop_stall_inspector() { inspector_.reset(); }

// Note [Stall inspector] step 1, for every backend.
std::shared_ptr<Work> ProcessGroup::track(const char* op, const at::Tensor& t,
                                          std::shared_ptr<Work> work) {
  const auto seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (inspector_) inspector_->issued(seq, op, t, t_label, work);
  return work;
}

void ProcessGroup::check_tensor(const at::Tensor& t, const char* op, const char* name) const {
  TORCH_CHECK(t.defined(), where(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK(t.is_contiguous(), where(), op, ": ", name,
              " must be contiguous; call .contiguous() first (sizes ", t.sizes(), ", strides ",
              t.strides(), ")");
  TORCH_CHECK(t.device() == options_.device, where(), op, ": ", name, " is on ", t.device(),
              " but this ", backend(), " group works on ", options_.device,
              "; move it with .to(", options_.device, ")");
  TORCH_CHECK(supported_dtype(t.scalar_type()), where(), op, ": dtype ", t.scalar_type(),
              " is not supported; use float32, float64, bfloat16, float16, int32 or int64");
  TORCH_CHECK(!t.is_sparse(), where(), op, ": sparse tensors are not supported");
}

std::shared_ptr<Work> ProcessGroup::allreduce(at::Tensor& tensor, AllreduceOptions opts) {
  check_tensor(tensor, "allreduce", "tensor");
  TORCH_CHECK(opts.op != ReduceOp::kAvg || at::isFloatingType(tensor.scalar_type()), where(),
              "allreduce: ReduceOp avg needs a floating-point tensor, got ",
              tensor.scalar_type(), "; use sum and divide yourself");
  return track("allreduce", tensor, do_allreduce(tensor, opts));
}

std::shared_ptr<Work> ProcessGroup::broadcast(at::Tensor& tensor, BroadcastOptions opts) {
  check_tensor(tensor, "broadcast", "tensor");
  TORCH_CHECK(opts.root >= 0 && opts.root < size_, where(), "broadcast: root ", opts.root,
              " is out of range for world_size ", size_);
  return track("broadcast", tensor, do_broadcast(tensor, opts));
}

std::shared_ptr<Work> ProcessGroup::allgather(at::Tensor& output, const at::Tensor& input) {
  check_tensor(input, "allgather", "input");
  check_tensor(output, "allgather", "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), where(),
              "allgather: output dtype ", output.scalar_type(), " differs from input dtype ",
              input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, where(), "allgather: output has ",
              output.numel(), " elements but needs world_size (", size_, ") x input (",
              input.numel(), ") = ", input.numel() * size_);
  return track("allgather", input, do_allgather(output, input));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                   ReduceScatterOptions opts) {
  check_tensor(input, "reduce_scatter", "input");
  check_tensor(output, "reduce_scatter", "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), where(),
              "reduce_scatter: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, where(), "reduce_scatter: input has ",
              input.numel(), " elements but needs world_size (", size_, ") x output (",
              output.numel(), ") = ", output.numel() * size_);
  TORCH_CHECK(opts.op != ReduceOp::kAvg || at::isFloatingType(input.scalar_type()), where(),
              "reduce_scatter: ReduceOp avg needs a floating-point tensor, got ",
              input.scalar_type());
  return track("reduce_scatter", input, do_reduce_scatter(output, input, opts));
}

std::shared_ptr<Work> ProcessGroup::barrier() { return track("barrier", {}, do_barrier()); }

}  // namespace dpx
