// One parameter of a unit: its shard (rows of dim 0) and the storage it is unsharded into.
//
// Note [One tensor, two shapes]
// A LibTorch module holds its parameters as tensor members (LinearImpl::weight) besides its
// parameter list, so fully_shard cannot swap in other tensors as FSDP2 swaps module attributes.
// It keeps each parameter's TensorImpl and changes what it holds with set_data (as Module::to
// does): between iterations the local shard, during a unit's forward and backward the whole
// parameter. So the optimizer, its state (keyed by the TensorImpl) and zero_grad() see the
// shard, and the module's forward the whole.
// The whole parameter lives on a storage of its own that is allocated when the unit is
// all-gathered and freed (its bytes, not the storage object) when it is resharded, as FSDP2
// frees the unsharded storage: autograd saved views of the parameter during forward
// (weight.t() for a matrix product) that refer to that storage, and they see the data again
// once backward's all-gather refilled it.
// .grad follows the shape: while unsharded, autograd accumulates the whole gradient into .grad
// (the sharded gradient waits in `sharded_grad_`); the unit takes it, reduce-scatters it and
// gives the parameter its sharded gradient back when it is resharded.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// Rows of dim 0 per rank when `rows` are split over `world` ranks as torch.chunk splits them:
// ceil(rows / world), the last ranks' chunks shorter or empty.
int64_t chunk_rows(int64_t rows, int world);

// The whole tensor of `rows` rows of which each rank of `pg` holds its chunk (`mine`, at most
// chunk_rows(rows, pg.size()) rows, padded here): one all-gather, then the padding cut off.
// What a parameter's shard gathers into (full state dict) and its optimizer state too.
at::Tensor gather_rows(ProcessGroup& pg, const at::Tensor& mine, int64_t rows);

class FsdpParam {
 public:
  // Shards `param` in place: its rows [offset, offset + local_rows) of dim 0 over `world`
  // ranks, in chunks of ceil(rows / world) as torch.chunk cuts them (the last ranks' chunks
  // shorter or empty, padded with zeros for the collectives).
  FsdpParam(at::Tensor param, std::string name, int rank, int world);

  const at::Tensor& param() const { return param_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  at::IntArrayRef full_sizes() const { return full_sizes_; }
  at::ScalarType dtype() const { return padded_shard_.scalar_type(); }
  bool requires_grad() const { return param_.requires_grad(); }
  int64_t chunk_rows() const { return chunk_rows_; }
  int64_t local_rows() const { return local_rows_; }
  int64_t row_offset() const { return row_offset_; }
  // Elements of one padded shard: what each rank contributes to the collectives.
  int64_t chunk_numel() const { return chunk_rows_ * row_numel_; }
  // The local shard, padded to chunk_rows() (rows past local_rows() are zeros).
  const at::Tensor& padded_shard() const { return padded_shard_; }
  // The local shard as the parameter holds it between iterations.
  const at::Tensor& sharded() const { return sharded_; }

  // The whole parameter in `dtype`, its storage freed until alloc_unsharded().
  void init_unsharded(at::ScalarType dtype);
  // Fills the unsharded parameter from an all-gather's output, viewed [world, total]: this
  // parameter's padded shards sit in columns [column, column + chunk_numel()).
  void copy_out(const at::Tensor& gathered, int64_t column);
  // Copies the whole gradient `grad` into the reduce-scatter input viewed [world, total]
  // (columns as for copy_out), zeros in the padding.
  void copy_in(const at::Tensor& grad, const at::Tensor& input, int64_t column) const;

  bool is_unsharded() const { return unsharded_state_; }
  void to_unsharded();
  void to_sharded();

  // The whole gradient autograd accumulated while unsharded, plus what was accumulated with
  // gradient sync off (in `dtype`); undefined when there is neither. Leaves .grad empty.
  at::Tensor take_unsharded_grad(at::ScalarType dtype);
  // Gradient sync off: adds autograd's whole gradient to the accumulated one.
  void accumulate_unsharded_grad(at::ScalarType dtype);
  // Adds a reduced shard (local_rows() rows, any dtype) to the sharded gradient.
  void accumulate_sharded_grad(const at::Tensor& shard);

 private:
  void alloc_unsharded();
  void free_unsharded();
  at::Tensor& sharded_grad_slot();

  at::Tensor param_;  // the module's tensor (Note [One tensor, two shapes])
  std::string name_;
  std::vector<int64_t> full_sizes_;
  int64_t row_numel_ = 1;
  int64_t chunk_rows_ = 0, local_rows_ = 0, row_offset_ = 0;
  int world_ = 1;
  at::Tensor padded_shard_;      // [chunk_rows, ...] in the parameter's dtype
  at::Tensor sharded_;           // padded_shard_'s first local_rows_ rows
  at::Tensor unsharded_;         // the whole parameter, on a storage freed when resharded
  bool unsharded_state_ = false;
  at::Tensor sharded_grad_;      // the sharded gradient while .grad holds the whole one
  at::Tensor accumulated_grad_;  // whole, gradient sync off
};

}  // namespace dpx::detail
