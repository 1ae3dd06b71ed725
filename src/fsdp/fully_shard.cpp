// fully_shard itself: which parameters a new unit takes, the checks made before any is
// sharded, and the calls of the public header.
#include "dpx/fsdp/fully_shard.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "fsdp/fsdp_context.h"
#include "fsdp/fsdp_unit.h"
#include "fsdp/registry.h"

namespace dpx {
namespace detail {
namespace {

// The parameters of `module` and of the modules below it down to (not into) other units, by
// their names under `module`, each once (tied parameters have several names).
std::vector<std::pair<std::string, at::Tensor>> managed_parameters(torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  std::vector<std::pair<std::string, torch::nn::Module*>> stack{{"", &module}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    for (const auto& item : m->named_parameters(/*recurse=*/false)) {
      if (seen.insert(item.value().unsafeGetTensorImpl()).second) {
        out.emplace_back(prefix + item.key(), item.value());
      }
    }
    auto children = m->named_children();
    for (auto it = children.end(); it != children.begin();) {  // reversed: popped in order
      --it;
      if (UnitRegistry::instance().unit_of(*it->value())) continue;
      stack.emplace_back(prefix + it->key() + ".", it->value().get());
    }
  }
  return out;
}

void check_parameters(const std::vector<std::pair<std::string, at::Tensor>>& params,
                      const ProcessGroup& pg) {
  for (const auto& [name, p] : params) {
    auto holder = UnitRegistry::instance().holder_of(p);
    TORCH_CHECK(!holder, pg.where(), "fully_shard: parameter '", name, "' is sharded already, "
                "by the unit made of another module: either fully_shard was applied to a module "
                "before the units inside it (apply it bottom-up: the units first, the root "
                "last), or the parameter is shared with a module of another unit (tied "
                "parameters must all be inside one unit, e.g. the root)");
    TORCH_CHECK(p.device() == pg.options().device, pg.where(), "fully_shard: parameter '",
                name, "' is on ", p.device(), " but the ", pg.backend(), " group works on ",
                pg.options().device, "; move the module there first (module->to(device))");
  }
}

void check_policy(const MixedPrecisionPolicy& mp) {
  for (const auto& dtype : {mp.param_dtype, mp.reduce_dtype, mp.output_dtype}) {
    TORCH_CHECK(!dtype || at::isFloatingType(*dtype), "fully_shard: MixedPrecisionPolicy "
                "dtypes must be floating-point types, got ", *dtype);
  }
}

// Runs one collective of the probe; a backend's refusal becomes fully_shard's error.
template <typename F>
void probe(const ProcessGroup& pg, const char* op, F&& collective) {
  try {
    collective();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, pg.where(), "fully_shard needs all-gather and reduce-scatter from its "
                "process group, and the ", pg.backend(), " group's ", op, " failed: ",
                e.what_without_backtrace(), " (backends with both: shm, gloo, hierarchical, "
                "nccl)");
  }
}

// A little all-gather and reduce-scatter in the dtypes the unit will use, before anything is
// sharded: a backend without them fails here, at wrap time, not in the first forward; and the
// all-gather compares what each rank shards, so ranks that wrap different modules are told so.
void probe_group(ProcessGroup& pg, const std::vector<std::pair<std::string, at::Tensor>>& params,
                 const MixedPrecisionPolicy& mp) {
  int64_t numel = 0, shape_hash = 1469598103934665603LL;  // FNV-1a over shapes and flags
  for (const auto& [name, p] : params) {
    numel += p.numel();
    for (auto s : p.sizes()) shape_hash = (shape_hash ^ s) * 1099511628211LL;
    shape_hash = (shape_hash ^ (p.requires_grad() ? 3 : 5)) * 1099511628211LL;
  }
  const auto options = at::TensorOptions(at::kLong).device(pg.options().device);
  auto mine = at::tensor({static_cast<int64_t>(params.size()), numel, shape_hash}, options);
  auto all = at::empty({pg.size(), 3}, options);
  probe(pg, "all-gather", [&] { pg.allgather(all, mine)->synchronize(); });
  auto cpu = all.cpu();
  for (int r = 0; r < pg.size(); ++r) {
    TORCH_CHECK(cpu[r].equal(cpu[pg.rank()]), pg.where(), "fully_shard: rank ", r, " shards ",
                cpu[r][0].item<int64_t>(), " parameters of ", cpu[r][1].item<int64_t>(),
                " elements, this rank ", params.size(), " of ", numel, " (or their shapes or "
                "requires_grad differ): every rank must apply fully_shard to the same modules in "
                "the same order");
  }
  auto trained = std::find_if(params.begin(), params.end(),
                              [](const auto& item) { return item.second.requires_grad(); });
  if (trained == params.end()) return;
  const auto& p = trained->second;
  auto in = at::zeros({pg.size()}, p.options().dtype(mp.reduce_dtype.value_or(p.scalar_type())));
  auto out = at::empty({1}, in.options());
  probe(pg, "reduce-scatter", [&] { pg.reduce_scatter(out, in)->synchronize(); });
}

}  // namespace

std::shared_ptr<FsdpUnit> fsdp_unit_of(const torch::nn::Module& module) {
  return UnitRegistry::instance().unit_of(module);
}

std::shared_ptr<FsdpUnit> fully_shard_module(const std::shared_ptr<torch::nn::Module>& module,
                                             std::shared_ptr<ProcessGroup> pg,
                                             const FullyShardOptions& options) {
  TORCH_CHECK(module, "fully_shard: the module is null");
  TORCH_CHECK(pg, "fully_shard: the process group is null");
  TORCH_CHECK(!fsdp_unit_of(*module), pg->where(), "fully_shard was applied to this ",
              module->name(), " already");
  check_policy(options.mp_policy);
  auto named = managed_parameters(*module);
  check_parameters(named, *pg);
  probe_group(*pg, named, options.mp_policy);
  std::vector<FsdpParam> params;
  params.reserve(named.size());
  for (auto& [name, p] : named) params.emplace_back(p, name, pg->rank(), pg->size());
  auto unit = std::make_shared<FsdpUnit>(module, std::move(params), std::move(pg), options);
  UnitRegistry::instance().add(module, unit);
  guard_sequentials(*module);
  return unit;
}

std::vector<at::Tensor> fsdp_pre_forward(FsdpUnit& unit, std::vector<at::Tensor> inputs) {
  return unit.pre_forward(std::move(inputs));
}

std::vector<at::Tensor> fsdp_post_forward(FsdpUnit& unit, std::vector<at::Tensor> outputs) {
  return unit.post_forward(std::move(outputs));
}

void fsdp_forward_failed(FsdpUnit& unit, const c10::Error* error) {
  std::string skipped;
  if (error && unit.is_root() && unit.context() && unit.context()->in_forward()) {
    skipped = unit.context()->sharded_units_not_called();
  }
  unit.forward_failed();
  TORCH_CHECK(skipped.empty(), unit.process_group()->where(), "fully_shard: the forward failed "
              "before ", skipped, " ran through fully_shard's steps. A unit whose module the model "
              "calls directly (a custom forward calling a member or a ModuleList item, not its "
              "FSDPModule handle) runs on its parameter shards, the likely cause here: call each "
              "unit through its handle, e.g. x = dpx::FSDPModule<BlockImpl>(layers->ptr<BlockImpl>"
              "(i))(x), or hold units as dpx::FSDPModule<...> members (docs/fsdp.md). The error: ",
              error->what_without_backtrace());
}

}  // namespace detail
}  // namespace dpx
