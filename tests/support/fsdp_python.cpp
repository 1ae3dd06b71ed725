#include "support/fsdp_python.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "support/fsdp_models.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::test {
namespace {

// A Python whose PyTorch has fully_shard: the build's oracle, else the project's .venv (PyTorch
// 2.15, which scripts/setup.sh installs for every build): LibTorch 1.13's Python has no FSDP2,
// and the files exchanged are torch.save's, the same for both.
// Asked once per process (each ask starts a Python that imports torch: seconds).
const std::string& fsdp_python() {
  static const std::string found = [] {
    for (const std::string python : {std::string(DPX_PYTHON),
                                     std::string(DPX_SOURCE_DIR "/.venv/bin/python")}) {
      if (python_runs(python, "from torch.distributed.fsdp import fully_shard")) return python;
    }
    return std::string();
  }();
  return found;
}

std::string dtype_name(std::optional<at::ScalarType> dtype) {
  if (!dtype) return "none";
  switch (*dtype) {
    case at::kDouble: return "float64";
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: throw std::invalid_argument("no Python name for this dtype in the test");
  }
}

// fsdp_reference.py's Sequential, as a LibTorch user writes it: Linear/Tanh/Linear/LayerNorm/
// Linear, LayerNorm's weight frozen, units 0 and 2 (fully_shard(m[0]), as in Python).
// Threads as ranks share torch's generator: each model is drawn under this lock.
std::mutex seeding;

torch::nn::Sequential sequential(torch::Dtype dtype) {
  std::lock_guard<std::mutex> lock(seeding);
  torch::manual_seed(11);
  torch::nn::Sequential m(torch::nn::Linear(6, 13), torch::nn::Tanh(), torch::nn::Linear(13, 7),
                          torch::nn::LayerNorm(torch::nn::LayerNormOptions({7})),
                          torch::nn::Linear(7, 4));
  m->to(dtype);
  m[3]->named_parameters()["weight"].requires_grad_(false);
  return m;
}

// fsdp_reference.py's ListNet: a ModuleList iterated by the model's own forward, which calls
// each layer through its handle (the one line docs/fsdp.md asks for).
struct ListNetImpl : torch::nn::Module {
  explicit ListNetImpl(torch::Dtype dtype) {
    std::lock_guard<std::mutex> lock(seeding);
    torch::manual_seed(13);
    layers = register_module("layers", torch::nn::ModuleList(torch::nn::Linear(6, 13),
                                                               torch::nn::Linear(13, 7)));
    head = register_module("head", torch::nn::Linear(7, 4));
    to(dtype);
  }
  torch::Tensor forward(torch::Tensor x) {
    for (std::size_t i = 0; i < layers->size(); ++i) {
      x = torch::tanh(FSDPModule<torch::nn::LinearImpl>(layers->ptr<torch::nn::LinearImpl>(i))(x));
    }
    return head(x);
  }
  torch::nn::ModuleList layers;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ListNet);

std::shared_ptr<torch::nn::Module> make_model(const FsdpPythonCase& c) {
  if (c.model == "seq") return sequential(c.dtype).ptr();
  if (c.model == "list") return ListNet(c.dtype).ptr();
  return make_shard_net(c.tied, c.dtype).ptr();
}

// The case's model, sharded as fsdp_reference.py shards it: units first, then the root. The
// forward goes through the root's handle.
std::pair<std::shared_ptr<torch::nn::Module>, std::function<torch::Tensor(torch::Tensor)>>
shard_model(const FsdpPythonCase& c, const std::shared_ptr<ProcessGroup>& pg) {
  FullyShardOptions options;  // output_dtype for the root only, as fsdp_reference.py
  options.mp_policy = c.policy;
  options.mp_policy.output_dtype.reset();
  FullyShardOptions root = options;
  root.mp_policy.output_dtype = c.policy.output_dtype;
  if (c.model == "seq") {
    auto m = sequential(c.dtype);
    fully_shard(m[0], pg, options);
    fully_shard(m[2], pg, options);
    auto model = fully_shard(m, pg, root);
    return {m.ptr(), [model](torch::Tensor x) mutable { return model(x); }};
  }
  if (c.model == "list") {
    ListNet net(c.dtype);
    for (const auto& layer : *net->layers) fully_shard(layer, pg, options);
    auto model = fully_shard(net, pg, root);
    return {net.ptr(), [model](torch::Tensor x) mutable { return model(x); }};
  }
  auto net = make_shard_net(c.tied, c.dtype);
  for (auto& b : net->blocks) fully_shard(b, pg, options);
  auto model = fully_shard(net, pg, root);
  return {net.ptr(), [model](torch::Tensor x) mutable { return model(x); }};
}

}  // namespace

FsdpPythonCase fsdp_python_case() {
  MixedPrecisionPolicy mixed;  // bfloat16 compute on float32 shards, inputs cast at each unit,
  mixed.param_dtype = at::kBFloat16;  // the root's output cast back
  mixed.reduce_dtype = at::kFloat;
  mixed.output_dtype = at::kFloat;
  MixedPrecisionPolicy bf16_reduce;  // gradients reduce-scattered in bfloat16, stepped in float32
  bf16_reduce.param_dtype = at::kBFloat16;
  bf16_reduce.reduce_dtype = at::kBFloat16;
  // float32: the gradients' average differs from PyTorch's in the last bits on 3 ranks (dpx
  // averages float32 in the collective; FSDP2 on gloo divides before and after the sum). Under
  // bfloat16 compute the LibTorch and the Python runs drift apart by up to ~1.5e-3 in 20 steps,
  // though each matches its own unsharded bfloat16 model step for step at 1 rank exactly
  // (checked by hand; the source of the drift between the two was not traced): the tolerance is
  // 1e-2, about bfloat16's epsilon (7.8e-3).
  static const std::map<std::string, FsdpPythonCase> cases = {
      // Uneven shards on 3 ranks (13, 3 and 8 rows), a frozen bias, the root's own parameters
      // and a buffer; SGD with momentum.
      {"SgdMatchesPyTorchsFullyShardOnThreeRanks", {3, "sgd", false}},
      // A parameter under two names in the root unit, stepped once per step; AdamW's state.
      {"AdamWWithATiedParameterMatchesPyTorchsFullyShard", {2, "adamw", true}},
      {"Float32MatchesPyTorchsFullyShardWithinRounding",
       {3, "sgd", false, torch::kFloat, {}, 1e-5}},
      {"MixedPrecisionPolicyMatchesPyTorchs", {2, "adamw", false, torch::kFloat, mixed, 1e-2}},
      {"BFloat16ReductionMatchesPyTorchs", {2, "sgd", false, torch::kFloat, bf16_reduce, 1e-2}},
      // A Python FSDP2 script's Sequential, sharded with the same calls (fully_shard(m[0]),
      // fully_shard(m[2]), fully_shard(m)) and called through the root's handle: float64, AdamW,
      // uneven shards (13 and 7 rows on 2 and 3 ranks), a frozen LayerNorm weight.
      {"ASequentialShardedAsInPythonMatchesPyTorchOnTwoRanks",
       {2, "adamw", false, torch::kDouble, {}, 1e-12, "seq"}},
      {"ASequentialShardedAsInPythonMatchesPyTorchOnThreeRanks",
       {3, "adamw", false, torch::kDouble, {}, 1e-12, "seq"}},
      // A ModuleList iterated by the model's forward, each item called through its handle.
      {"AModuleListOfUnitsMatchesPyTorchOnThreeRanks",
       {3, "adamw", false, torch::kDouble, {}, 1e-12, "list"}},
  };
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const auto it = cases.find(name);
  if (it == cases.end()) throw std::invalid_argument("no fully_shard case named " + name);
  return it->second;
}

FsdpPythonData fsdp_python_data(const FsdpPythonCase& c) {
  torch::manual_seed(3);
  FsdpPythonData d;
  d.x = torch::randn({kFsdpPythonSteps, c.world * kFsdpPythonPerRank, 6}, c.dtype);
  d.y = torch::randn({kFsdpPythonSteps, c.world * kFsdpPythonPerRank, c.tied ? 6 : 4}, c.dtype);
  return d;
}

std::string fsdp_python_skip(const FsdpPythonCase& c, std::string* python) {
  *python = fsdp_python();
  if (python->empty()) return "no Python with PyTorch's fully_shard";
  // bfloat16 kernels change between releases (LibTorch 1.13's CPU ones drift 2e-2 from 2.15's
  // in 20 steps): mixed precision is compared with PyTorch of the build's own version only.
  if (c.policy.param_dtype && *python != DPX_PYTHON) {
    return "LibTorch " DPX_TORCH_VERSION "'s Python has no fully_shard, and bfloat16 results "
           "differ between PyTorch versions";
  }
  return "";
}

PyTorchFsdpResult load_pytorch_fully_shard(const std::string& dir) {
  PyTorchFsdpResult out;
  for (const auto& e : torch_load(dir + "/final.pt").toGenericDict()) {
    out.model[e.key().toStringRef()] = e.value().toTensor();
  }
  out.optimizer = torch_load(dir + "/final_optim.pt");
  return out;
}

PyTorchFsdpResult run_pytorch_fully_shard(const std::string& python, const FsdpPythonCase& c,
                                          const std::string& dir, const FsdpPythonData& d) {
  save_state_dict(*make_model(c), dir + "/init.pt");
  torch_save(c10::ivalue::Tuple::create({d.x, d.y}), dir + "/data.pt");
  PythonScript s;
  s.script = "fsdp_reference.py";
  s.python = python;
  s.args = {dir, std::to_string(c.world), c.optimizer,
            !c.model.empty() ? c.model : c.tied ? "1" : "0", dtype_name(c.dtype),
            dtype_name(c.policy.param_dtype), dtype_name(c.policy.reduce_dtype),
            dtype_name(c.policy.output_dtype)};
  s.timeout = std::chrono::seconds(240);
  s.log = dir + "/python.log";
  if (!run_python(s).ok()) {
    ADD_FAILURE() << "PyTorch's fully_shard run failed:\n" << read_file(dir + "/python.log");
    return {};
  }
  return load_pytorch_fully_shard(dir);
}

namespace {

// dpx's full_optimizer_state_dict against FSDP2's: the same parameter names with the same state
// (tensors within tol, relative and absolute), and the same names in each param group.
void expect_same_optimizer_state(const c10::IValue& ours, const c10::IValue& theirs, double tol) {
  const auto our_state = ours.toGenericDict().at("state").toGenericDict();
  const auto their_state = theirs.toGenericDict().at("state").toGenericDict();
  EXPECT_EQ(our_state.size(), their_state.size());
  for (const auto& kv : their_state) {
    const auto& name = kv.key().toStringRef();
    ASSERT_TRUE(our_state.contains(name)) << "no optimizer state for " << name;
    const auto mine = our_state.at(name).toGenericDict();
    for (const auto& e : kv.value().toGenericDict()) {
      const auto& key = e.key().toStringRef();
      ASSERT_TRUE(mine.contains(key)) << name << " has no " << key;
      const auto a = mine.at(key).toTensor(), b = e.value().toTensor();
      EXPECT_EQ(a.scalar_type(), b.scalar_type()) << name << "." << key;  // step: the default
      EXPECT_TRUE(close_to_pytorch(a.to(torch::kDouble), b.to(torch::kDouble), tol, tol))
          << name << "." << key;
    }
  }
  const auto our_groups = ours.toGenericDict().at("param_groups").toListRef();
  const auto their_groups = theirs.toGenericDict().at("param_groups").toListRef();
  ASSERT_EQ(our_groups.size(), their_groups.size());
  for (size_t i = 0; i < our_groups.size(); ++i) {
    const auto names = [](const c10::IValue& group) {
      std::vector<std::string> out;
      for (const auto& n : group.toGenericDict().at("params").toListRef()) out.push_back(n.toStringRef());
      return out;
    };
    EXPECT_EQ(names(our_groups[i]), names(their_groups[i])) << "param group " << i;
    const auto keys = [](const c10::IValue& group) {
      std::set<std::string> out;
      for (const auto& e : group.toGenericDict()) out.insert(e.key().toStringRef());
      return out;
    };
    EXPECT_EQ(keys(our_groups[i]), keys(their_groups[i])) << "param group " << i << "'s keys";
  }
}

}  // namespace

void train_and_compare_with_pytorch(const FsdpPythonCase& c,
                                    const std::shared_ptr<ProcessGroup>& pg,
                                    const FsdpPythonData& d, const PyTorchFsdpResult& want) {
  const int rank = pg->rank();
  auto [net, model] = shard_model(c, pg);
  auto params = unique_parameters(*net);
  auto opt = c.optimizer == "sgd" ? sgd(params) : adamw(params);
  for (int s = 0; s < kFsdpPythonSteps; ++s) {
    opt->zero_grad();
    auto mine = [&](const torch::Tensor& t) {
      return t[s].narrow(0, rank * kFsdpPythonPerRank, kFsdpPythonPerRank);
    };
    torch::mse_loss(model(mine(d.x)).to(c.dtype), mine(d.y)).backward();
    opt->step();
  }
  // The collectives first, the checks after (a failed check ends only rank 0's part).
  const auto got = full_state_dict(*net);
  const auto optimizer = full_optimizer_state_dict(*net, *opt);
  // PyTorch's optimizer state loaded into this rank's shards and gathered again.
  load_full_optimizer_state_dict(*net, *opt, want.optimizer);
  const auto reloaded = full_optimizer_state_dict(*net, *opt);
  if (rank != 0) return;
  // Momentum buffers sum about ten steps' gradients (momentum 0.9): ten times the room.
  expect_same_optimizer_state(optimizer, want.optimizer, 10 * c.atol);
  expect_same_optimizer_state(reloaded, want.optimizer, 0);
  ASSERT_EQ(got.size(), want.model.size());
  for (const auto& [name, tensor] : got) {
    ASSERT_TRUE(want.model.count(name)) << name << " is not in PyTorch's state dict";
    EXPECT_TRUE(close_to_pytorch(tensor, want.model.at(name), 0, c.atol)) << name;
  }
}

}  // namespace dpx::test
