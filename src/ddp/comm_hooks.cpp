#include "dpx/ddp/comm_hooks.h"

#include <c10/util/Exception.h>

namespace dpx::hooks {
namespace {

std::shared_ptr<Future> compressed_allreduce(std::any& state, GradBucket& bucket,
                                             at::ScalarType wire) {
  auto pg = group_of(state, bucket);
  auto compressed = bucket.buffer.to(wire).div_(pg->size());
  auto work = pg->allreduce(compressed);
  at::Tensor buffer = bucket.buffer;
  return Future::from_work(std::move(work), compressed)->then([buffer](const at::Tensor& t) {
    buffer.copy_(t);
    return buffer;
  });
}

}  // namespace

std::shared_ptr<ProcessGroup> group_of(const std::any& state, const GradBucket& bucket) {
  if (state.has_value()) {
    const auto* pg = std::any_cast<std::shared_ptr<ProcessGroup>>(&state);
    TORCH_CHECK(pg != nullptr && *pg, "the state of a built-in comm hook must be empty or a "
                "std::shared_ptr<dpx::ProcessGroup>");
    return *pg;
  }
  TORCH_CHECK(bucket.process_group, "GradBucket has no process group");
  return bucket.process_group;
}

std::shared_ptr<Future> allreduce_hook(std::any& state, GradBucket& bucket) {
  auto pg = group_of(state, bucket);
  if (pg->size() > 1) bucket.buffer.div_(pg->size());  // by 1: a pass over the bucket for nothing
  auto work = pg->allreduce(bucket.buffer);
  return Future::from_work(std::move(work), bucket.buffer);
}

std::shared_ptr<Future> fp16_compress_hook(std::any& state, GradBucket& bucket) {
  return compressed_allreduce(state, bucket, at::kHalf);
}

std::shared_ptr<Future> bf16_compress_hook(std::any& state, GradBucket& bucket) {
  return compressed_allreduce(state, bucket, at::kBFloat16);
}

}  // namespace dpx::hooks
