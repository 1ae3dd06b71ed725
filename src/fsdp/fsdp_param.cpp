#include "fsdp/fsdp_param.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <utility>

namespace dpx::detail {
namespace {

// A flat [world, chunk_numel] view of a whole tensor's rows, as the collectives lay them out:
// the first `full` chunks are whole, then `rest` elements of one more, then padding.
struct ChunkSplit {
  int64_t full = 0;  // chunks with chunk_rows rows
  int64_t rest = 0;  // elements of the chunk after them (0 when none)
};

ChunkSplit split(int64_t rows, int64_t chunk_rows, int64_t row_numel) {
  if (chunk_rows == 0) return {};
  return {rows / chunk_rows, (rows % chunk_rows) * row_numel};
}

}  // namespace

int64_t chunk_rows(int64_t rows, int world) { return (rows + world - 1) / world; }

at::Tensor gather_rows(ProcessGroup& pg, const at::Tensor& mine, int64_t rows) {
  const int64_t chunk = chunk_rows(rows, pg.size());
  auto sizes = mine.sizes().vec();
  at::Tensor padded = mine;
  if (mine.size(0) != chunk) {
    sizes[0] = chunk;
    padded = at::zeros(sizes, mine.options());
    padded.narrow(0, 0, mine.size(0)).copy_(mine);
  }
  sizes[0] = chunk * pg.size();
  auto whole = at::empty(sizes, mine.options());
  pg.allgather(whole, padded.contiguous())->synchronize();
  return whole.narrow(0, 0, rows);
}

FsdpParam::FsdpParam(at::Tensor param, std::string name, int rank, int world)
    : param_(std::move(param)), name_(std::move(name)), world_(world) {
  TORCH_CHECK(param_.dim() >= 1, "fully_shard: parameter ", name_, " is a scalar (0-dim); "
              "parameters are sharded on dim 0, so give it a dimension (e.g. shape [1]), as FSDP2 "
              "requires too");
  TORCH_CHECK(!param_.is_sparse() && param_.is_contiguous(), "fully_shard: parameter ", name_,
              " must be a contiguous dense tensor (sizes ", param_.sizes(), ", strides ",
              param_.strides(), ")");
  full_sizes_ = param_.sizes().vec();
  const int64_t rows = full_sizes_[0];
  for (std::size_t d = 1; d < full_sizes_.size(); ++d) row_numel_ *= full_sizes_[d];
  chunk_rows_ = detail::chunk_rows(rows, world);
  row_offset_ = std::min<int64_t>(rows, rank * chunk_rows_);
  local_rows_ = std::min<int64_t>(chunk_rows_, rows - row_offset_);

  at::NoGradGuard no_grad;
  auto shard_sizes = full_sizes_;
  shard_sizes[0] = chunk_rows_;
  padded_shard_ = at::zeros(shard_sizes, param_.options());
  sharded_ = padded_shard_.narrow(0, 0, local_rows_);
  sharded_.copy_(param_.narrow(0, row_offset_, local_rows_));
  param_.mutable_grad() = at::Tensor();
  param_.set_data(sharded_);  // the whole parameter is freed once nothing else holds it
}

void FsdpParam::init_unsharded(at::ScalarType dtype) {
  if (unsharded_.defined() && unsharded_.scalar_type() == dtype) return;
  TORCH_INTERNAL_ASSERT(!unsharded_state_, "init_unsharded on an unsharded parameter");
  unsharded_ = at::empty(full_sizes_, padded_shard_.options().dtype(dtype));
  free_unsharded();
}

void FsdpParam::alloc_unsharded() {
  auto* storage = unsharded_.storage().unsafeGetStorageImpl();
  const std::size_t bytes = unsharded_.numel() * unsharded_.element_size();
  if (storage->nbytes() == bytes) return;
  // A CUDA allocator allocates on the current device, which need not be the parameter's (a
  // thread DDP or the caller started, a rank on its second GPU): that one is made current here.
  const c10::OptionalDeviceGuard on_its_device(unsharded_.device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void FsdpParam::free_unsharded() {
  if (unsharded_.defined()) unsharded_.storage().unsafeGetStorageImpl()->reset();
}

void FsdpParam::copy_out(const at::Tensor& gathered, int64_t column) {
  alloc_unsharded();
  auto src = gathered.narrow(1, column, chunk_numel());  // [world, chunk_numel]
  auto dst = unsharded_.view({-1});
  const auto s = split(full_sizes_[0], chunk_rows_, row_numel_);
  const int64_t whole = s.full * chunk_numel();
  if (s.full > 0) dst.narrow(0, 0, whole).view({s.full, chunk_numel()}).copy_(src.narrow(0, 0, s.full));
  if (s.rest > 0) dst.narrow(0, whole, s.rest).copy_(src[s.full].narrow(0, 0, s.rest));
}

void FsdpParam::copy_in(const at::Tensor& grad, const at::Tensor& input, int64_t column) const {
  auto dst = input.narrow(1, column, chunk_numel());  // [world, chunk_numel]
  auto src = grad.reshape({-1});
  const auto s = split(full_sizes_[0], chunk_rows_, row_numel_);
  const int64_t whole = s.full * chunk_numel();
  if (s.full > 0) dst.narrow(0, 0, s.full).copy_(src.narrow(0, 0, whole).view({s.full, chunk_numel()}));
  if (s.full == world_) return;
  auto partial = dst[s.full];
  partial.narrow(0, 0, s.rest).copy_(src.narrow(0, whole, s.rest));
  partial.narrow(0, s.rest, chunk_numel() - s.rest).zero_();
  if (s.full + 1 < world_) dst.narrow(0, s.full + 1, world_ - s.full - 1).zero_();
}

void FsdpParam::to_unsharded() {
  if (unsharded_state_) return;
  at::NoGradGuard no_grad;
  sharded_grad_ = std::exchange(param_.mutable_grad(), at::Tensor());
  param_.set_data(unsharded_);  // shares unsharded_'s storage
  unsharded_state_ = true;
}

void FsdpParam::to_sharded() {
  if (!unsharded_state_) return;
  TORCH_CHECK(!param_.grad().defined(), "fully_shard: parameter ", name_, " was resharded "
              "holding a whole gradient that no unit took: was backward run on a graph whose "
              "forward did not go through the units' FSDPModule handles?");
  at::NoGradGuard no_grad;
  param_.set_data(sharded_);
  param_.mutable_grad() = std::move(sharded_grad_);
  sharded_grad_ = at::Tensor();
  free_unsharded();
  unsharded_state_ = false;
}

at::Tensor FsdpParam::take_unsharded_grad(at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  at::Tensor grad;  // a sharded parameter's .grad is its sharded gradient: not autograd's
  if (unsharded_state_) grad = std::exchange(param_.mutable_grad(), at::Tensor());
  at::Tensor acc = std::exchange(accumulated_grad_, at::Tensor());
  if (!acc.defined()) return grad.defined() ? grad.to(dtype) : grad;
  if (grad.defined()) acc.add_(grad);
  return acc;
}

void FsdpParam::accumulate_unsharded_grad(at::ScalarType dtype) {
  if (!unsharded_state_) return;
  at::NoGradGuard no_grad;
  at::Tensor grad = std::exchange(param_.mutable_grad(), at::Tensor());
  if (!grad.defined()) return;
  if (accumulated_grad_.defined()) {
    accumulated_grad_.add_(grad);
  } else {
    accumulated_grad_ = grad.to(dtype);  // autograd's own tensor: no copy needed
  }
}

at::Tensor& FsdpParam::sharded_grad_slot() {
  return unsharded_state_ ? sharded_grad_ : param_.mutable_grad();
}

void FsdpParam::accumulate_sharded_grad(const at::Tensor& shard) {
  at::NoGradGuard no_grad;
  auto& slot = sharded_grad_slot();
  // On the reduce-scatter's output, but not an autograd view of it: LibTorch's zero_grad()
  // detaches gradients in place, which views refuse.
  auto grad = at::empty({0}, shard.options())
                  .set_(shard.storage(), shard.storage_offset(), sharded_.sizes(),
                        sharded_.strides());
  if (slot.defined()) {
    slot.add_(grad);
  } else {
    slot = grad.scalar_type() == dtype() ? grad : grad.to(dtype());
  }
}

}  // namespace dpx::detail
