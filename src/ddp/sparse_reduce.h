// The reduction of one sparse gradient across a group (Note [Sparse buckets]).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/future.h"

namespace dpx::detail {

// Note [Sparse buckets]
// A parameter of an Embedding or EmbeddingBag built with sparse(true) has a bucket of its own
// (as in PyTorch): its gradient is a sparse COO tensor whose rows differ from rank to rank, so it
// cannot share a flat buffer. Its reduction, in the bucket's turn:
//  1. every rank all-gathers [nnz, sparse_dim] of its coalesced, pre-divided gradient (nothing
//     defined counts as nnz 0): issued at once, like a dense bucket's all-reduce;
//  2. when the bucket is waited for, every rank pads its indices and values to the largest nnz
//     and all-gathers both (skipped when every nnz is 0);
//  3. each rank keeps the first nnz_r entries of rank r's slice, concatenates them and
//     coalesces: duplicate rows are summed, so the result is the average, sparse and coalesced.
// Step 2 runs on the thread that waits, in bucket order on every rank, so all ranks issue the
// same collectives in the same order (the end of backward waits for buckets in index order).

// Starts the reduction of `local` (sparse, coalesced and already divided; undefined when this
// rank has no gradient to give) for a parameter shaped like `param`. The future holds the
// summed sparse tensor, coalesced. `label` names the payload collectives for the stall
// inspector.
std::shared_ptr<Future> reduce_sparse(const std::shared_ptr<ProcessGroup>& pg,
                                      const at::Tensor& local, const at::Tensor& param,
                                      std::shared_ptr<const std::string> label);

}  // namespace dpx::detail
