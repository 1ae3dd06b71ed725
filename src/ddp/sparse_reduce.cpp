#include "ddp/sparse_reduce.h"

#include <c10/util/Exception.h>

#include <vector>

namespace dpx::detail {
namespace {

struct Layout {
  std::int64_t sparse_dim = 1;
  std::int64_t max_nnz = 0;
  std::vector<std::int64_t> nnz;  // per rank
};

// Reads the gathered [nnz, sparse_dim] pairs. Ranks without entries may report any sparse_dim
// (0 when nothing was defined); those with entries must agree.
Layout read_layout(const ProcessGroup& pg, const at::Tensor& gathered, const at::Tensor& param) {
  auto meta = gathered.cpu();
  const auto* m = meta.data_ptr<std::int64_t>();
  Layout layout;
  std::int64_t agreed = 0;
  for (int r = 0; r < pg.size(); ++r) {
    const auto nnz = m[2 * r], sparse_dim = m[2 * r + 1];
    layout.nnz.push_back(nnz);
    layout.max_nnz = std::max(layout.max_nnz, nnz);
    if (nnz == 0) continue;
    TORCH_CHECK(agreed == 0 || agreed == sparse_dim, pg.where(), "the sparse gradient of a "
                "parameter of sizes ", param.sizes(), " has ", sparse_dim, " sparse dimensions "
                "on rank ", r, " but ", agreed, " on another rank; every rank must compute it "
                "the same way");
    agreed = sparse_dim;
  }
  if (agreed > 0) layout.sparse_dim = agreed;
  TORCH_CHECK(layout.sparse_dim <= param.dim(), pg.where(), "a sparse gradient with ",
              layout.sparse_dim, " sparse dimensions for a parameter of sizes ", param.sizes());
  return layout;
}

at::Tensor empty_sparse(const Layout& layout, const at::Tensor& param) {
  auto values_shape = param.sizes().slice(layout.sparse_dim).vec();
  values_shape.insert(values_shape.begin(), 0);
  return at::sparse_coo_tensor(at::empty({layout.sparse_dim, 0}, param.options().dtype(at::kLong)),
                               at::empty(values_shape, param.options()), param.sizes())
      .coalesce();
}

// Steps 2 and 3 of Note [Sparse buckets].
at::Tensor gather_entries(ProcessGroup& pg, const at::Tensor& local, const at::Tensor& param,
                          const Layout& layout) {
  if (layout.max_nnz == 0) return empty_sparse(layout, param);
  const auto sd = layout.sparse_dim, max = layout.max_nnz;
  auto values_shape = param.sizes().slice(sd).vec();
  values_shape.insert(values_shape.begin(), max);
  auto indices = at::zeros({sd, max}, param.options().dtype(at::kLong));
  auto values = at::zeros(values_shape, param.options());
  const auto nnz = local.defined() ? local._nnz() : 0;
  if (nnz > 0) {
    indices.narrow(1, 0, nnz).copy_(local._indices());
    values.narrow(0, 0, nnz).copy_(local._values());
  }
  const auto world = pg.size();
  auto all_indices = at::empty({world * indices.numel()}, indices.options());
  auto all_values = at::empty({world * values.numel()}, values.options());
  auto indices_work = pg.allgather(all_indices, indices.reshape({-1}));
  auto values_work = pg.allgather(all_values, values.reshape({-1}));
  indices_work->synchronize();  // stream-ordered: the cat and coalesce below queue after them
  values_work->synchronize();
  std::vector<at::Tensor> rank_indices, rank_values;
  for (int r = 0; r < world; ++r) {
    const auto n = layout.nnz[r];
    if (n == 0) continue;
    rank_indices.push_back(all_indices.narrow(0, r * indices.numel(), indices.numel())
                               .view({sd, max})
                               .narrow(1, 0, n));
    rank_values.push_back(all_values.narrow(0, r * values.numel(), values.numel())
                              .view(values_shape)
                              .narrow(0, 0, n));
  }
  return at::sparse_coo_tensor(at::cat(rank_indices, 1), at::cat(rank_values, 0), param.sizes())
      .coalesce();
}

}  // namespace

std::shared_ptr<Future> reduce_sparse(const std::shared_ptr<ProcessGroup>& pg,
                                      const at::Tensor& local, const at::Tensor& param,
                                      std::shared_ptr<const std::string> label) {
  TORCH_INTERNAL_ASSERT(!local.defined() || (local.is_sparse() && local.is_coalesced()),
                        "reduce_sparse expects a coalesced sparse tensor");
  auto meta = at::zeros({2}, at::kLong);
  if (local.defined()) {
    meta[0] = local._nnz();
    meta[1] = local.sparse_dim();
  }
  meta = meta.to(param.device());
  auto gathered = at::empty({2 * pg->size()}, meta.options());
  auto work = pg->allgather(gathered, meta);
  at::Tensor param_meta = param.detach();
  return Future::from_work(std::move(work), gathered)
      ->then([pg, local, param_meta, label](const at::Tensor& all) {
        const CollectiveLabel named(label);  // Note [Stall inspector]
        return gather_entries(*pg, local, param_meta, read_layout(*pg, all, param_meta));
      });
}

}  // namespace dpx::detail
