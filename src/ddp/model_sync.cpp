#include "ddp/model_sync.h"

#include <c10/util/Exception.h>

#include "comm/coordination/control.h"

namespace dpx::detail {
namespace {

// Rank-0-comparable description of the parameters: sizes then strides, per parameter.
at::Tensor shape_metadata(const std::vector<at::Tensor>& params) {
  std::vector<std::int64_t> meta;
  for (const auto& p : params) {
    meta.insert(meta.end(), p.sizes().begin(), p.sizes().end());
    meta.insert(meta.end(), p.strides().begin(), p.strides().end());
  }
  return at::tensor(meta, at::kLong);
}

std::string first_mismatch(ProcessGroup& pg, const std::vector<at::Tensor>& params,
                           const at::Tensor& control) {
  auto c = control.data_ptr<std::int64_t>();
  std::int64_t i = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& t = params[p];
    for (auto size : t.sizes()) {
      if (size != c[i++]) {
        return c10::str("[", pg.rank(), "]: params[", p, "] in this process with sizes ",
                        t.sizes(), " appears not to match sizes of the same param in process 0.");
      }
    }
    for (auto stride : t.strides()) {
      if (stride != c[i++]) {
        return c10::str("[", pg.rank(), "]: params[", p, "] in this process with sizes ",
                        t.sizes(), " appears not to match strides of the same param in process 0.");
      }
    }
  }
  return "";
}

}  // namespace

void verify_params_across_ranks(ProcessGroup& pg, const std::vector<at::Tensor>& params) {
  const int world = pg.size();
  auto meta = shape_metadata(params);
  // Counts first: unequal inputs to the metadata broadcast would crash it (pytorch#73547).
  // Whether every rank has the same counts comes first: the largest and smallest of each, by an
  // all-reduce (the collective DDP runs anyway; the hierarchical backend makes its flat group, a
  // full mesh over gloo, only for all-gathers: Note [The flat group on first use]). Only when
  // they differ, which every rank sees alike, are the counts all-gathered to name the rank.
  const std::int64_t n = static_cast<std::int64_t>(params.size()), m = meta.numel();
  auto bounds = at::tensor({n, -n, m, -m}, at::kLong);
  control_allreduce(pg, bounds, ReduceOp::kMax)->wait();  // Note [Control tensors]
  const auto* b = bounds.data_ptr<std::int64_t>();
  const bool agree = b[0] == n && -b[1] == n && b[2] == m && -b[3] == m;
  auto mine = at::tensor({n, m}, at::kLong);
  auto all = mine.repeat({world});
  if (!agree) control_allgather(pg, all, mine);
  auto counts = all.data_ptr<std::int64_t>();
  for (int r = 0; r < world; ++r) {
    TORCH_CHECK(counts[2 * r] == static_cast<std::int64_t>(params.size()), pg.where(),
                "DDP expects same model across all ranks, but Rank ", pg.rank(), " has ",
                params.size(), " params, while rank ", r, " has inconsistent ", counts[2 * r],
                " params.");
  }
  for (int r = 0; r < world; ++r) {
    TORCH_CHECK(counts[2 * r + 1] == meta.numel(), pg.where(), "[", pg.rank(), "]: the "
                "parameters in this process have ", meta.numel(), " dimensions in total, so "
                "their sizes appear not to match sizes of the same params in rank ", r, ".");
  }
  auto control = meta.clone();
  control_broadcast(pg, control, 0);
  const std::string mismatch = first_mismatch(pg, params, control);
  // Rank 0 always agrees with itself: share the verdict so that every rank fails alike.
  auto verdict = at::full({1}, mismatch.empty() ? -1 : pg.rank(), at::kLong);
  control_allreduce(pg, verdict, ReduceOp::kMax)->wait();
  const auto bad_rank = verdict.item<std::int64_t>();
  TORCH_CHECK(mismatch.empty(), pg.where(), mismatch);
  TORCH_CHECK(bad_rank < 0, pg.where(), "[", pg.rank(), "]: the parameters of rank ", bad_rank,
              " appear not to match those of process 0 (the model of rank ", bad_rank,
              " appears not to match; its error names the parameter).");
}

}  // namespace dpx::detail
