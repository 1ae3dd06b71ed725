// Python's key order and Python's loading rules for old files, against the Python oracle
// (tests/python/state_dict_oracle.py): state_dict() goes module by module; a 1-element 1-D
// tensor loads into a 0-dim buffer; a norm layer's missing num_batches_tracked is filled in
// unless the file's _metadata says the layer had one (Note [Python's loading rules]).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/checkpoint_files.h"
#include "dpx/checkpoint/python_format.h"

namespace {

using dpx::test::kModelKeys;
using dpx::test::make_model;
using dpx::test::TempDir;

std::vector<std::string> names(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<std::string> out;
  for (const auto& kv : tensors) out.push_back(kv.first);
  return out;
}

std::vector<std::string> strings(const c10::IValue& list) {
  std::vector<std::string> out;
  for (const auto& x : list.toListRef()) out.push_back(x.toStringRef());
  return out;
}

// The oracle's old_model().
torch::nn::Sequential make_old_model(int64_t count) {
  torch::nn::Sequential m(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                          torch::nn::Linear(4, 2), torch::nn::BatchNorm1d(2));
  torch::NoGradGuard no_grad;
  for (const auto& b : m->named_buffers()) {
    if (b.key().find("num_batches_tracked") != std::string::npos) b.value().fill_(count);
  }
  return m;
}

// Loads <name>.pt as Python did (expected_<name>.pt): strict, then non-strict into a model whose
// norm layers held num_batches_tracked = count.
void expect_as_python(const TempDir& dir, const std::string& name, int64_t count) {
  SCOPED_TRACE(name);
  const std::string path = dir / (name + ".pt");
  const auto want = dpx::torch_load(dir / ("expected_" + name + ".pt")).toGenericDict();
  const std::string python_error = want.at("strict_error").toStringRef();
  auto strict = make_old_model(count);
  if (python_error.empty()) {
    EXPECT_NO_THROW(dpx::load_state_dict(*strict, path));
  } else {
    // Python's text after "Error(s) in loading state_dict for Sequential:\n\t", as dpx says it.
    auto what = python_error.substr(python_error.find("\n\t") + 2);
    what = what.substr(0, what.find_last_not_of(' ') + 1);
    EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*strict, path), what);
  }
  auto model = make_old_model(count);
  const auto r = dpx::load_state_dict(*model, path, {/*strict=*/false});
  EXPECT_EQ(r.missing_keys, strings(want.at("missing")));
  EXPECT_EQ(r.unexpected_keys, strings(want.at("unexpected")));
  const auto state = want.at("state").toGenericDict();
  const auto sd = dpx::state_dict(*model);
  ASSERT_EQ(sd.size(), state.size());
  for (const auto& [key, t] : sd) {
    const auto py = state.at(key).toTensor();
    EXPECT_TRUE(t.sizes() == py.sizes() && torch::equal(t, py)) << key << ": " << t << " vs " << py;
  }
}

}  // namespace

TEST(PythonRulesTest, StateDictGoesModuleByModule) {
  EXPECT_EQ(names(dpx::state_dict(*make_model())), kModelKeys);
  // A module's own parameters and buffers come before its children's, whatever the order of
  // registration (Python's _save_to_state_dict, then the children).
  struct Block : torch::nn::Module {
    Block() {
      register_module("0", torch::nn::Linear(2, 2));
      register_module("1", torch::nn::BatchNorm1d(2));
      register_buffer("step", torch::zeros({}));
      register_parameter("scale", torch::ones({1}));
    }
  };
  torch::nn::Module outer;
  outer.register_module("0", std::make_shared<Block>());
  outer.register_module("1", torch::nn::Linear(2, 1));
  const std::vector<std::string> want = {
      "0.scale", "0.step", "0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias",
      "0.1.running_mean", "0.1.running_var", "0.1.num_batches_tracked", "1.weight", "1.bias"};
  EXPECT_EQ(names(dpx::state_dict(outer)), want);
}

TEST(PythonRulesTest, FilesListKeysInPythonsOrder) {
  TempDir dir;
  auto model = make_model();
  dpx::save_state_dict(*model, dir / "m.pt");
  std::vector<std::string> loaded;
  for (const auto& kv : dpx::torch_load(dir / "m.pt").toGenericDict()) {
    loaded.push_back(kv.key().toStringRef());
  }
  EXPECT_EQ(loaded, kModelKeys);
  dpx::save_state_dict(*model, dir / "m.safetensors");
  EXPECT_EQ(names(dpx::safetensors_load(dir / "m.safetensors")), kModelKeys);
  // The safetensors header too lists them so (Python's load_file follows the data's order).
  const std::string bytes = dpx::test::read_file(dir / "m.safetensors");
  EXPECT_LT(bytes.find("\"0.weight\""), bytes.find("\"1.running_mean\""));
  EXPECT_LT(bytes.find("\"1.num_batches_tracked\""), bytes.find("\"2.weight\""));
  // A header out of its data's order loads by data (begin, then end; ties in header order), as
  // safetensors.torch.load_file (0.8) returns it: y, x, w, a.
  const std::string header =
      R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("y":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
      R"("w":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  const uint64_t n = header.size();
  dpx::test::spit(dir / "other.safetensors",
                  std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(4, '\0'));
  EXPECT_EQ(names(dpx::safetensors_load(dir / "other.safetensors")),
            (std::vector<std::string>{"y", "x", "w", "a"}));
}

TEST(PythonRulesTest, OldFilesLoadAsPythonLoadsThem) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  ASSERT_TRUE(dpx::test::oracle("write_old " + dir.path() + " 0"));
  for (const char* name : {"old", "meta_missing", "meta_v1"}) expect_as_python(dir, name, 0);
}

// PyTorch 2.x keeps the layer's own num_batches_tracked (1.13 reset it to 0): the oracle is the
// .venv's PyTorch 2.x in both builds, as dpx follows 2.x in both.
TEST(PythonRulesTest, MissingNumBatchesTrackedKeepsTheLayersValueAsPyTorch2) {
  SKIP_WITHOUT(dpx::test::kVenvPython, "torch");
  TempDir dir;
  ASSERT_TRUE(dpx::test::run_oracle(dpx::test::kVenvPython, "write_old " + dir.path() + " 7"));
  for (const char* name : {"old", "meta_missing", "meta_v1"}) expect_as_python(dir, name, 7);
}

TEST(PythonRulesTest, RulesHoldForSafetensorsAndTensorsInMemory) {
  TempDir dir;
  auto source = make_model();
  auto tensors = dpx::state_dict(*source);
  tensors.erase(tensors.begin() + 6);  // 1.num_batches_tracked: no _metadata, so filled in
  tensors[1].second = tensors[1].second.reshape({1, 4});  // 0.bias: still a size mismatch
  dpx::safetensors_save(tensors, dir / "m.safetensors");
  auto model = make_model();
  EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*model, dir / "m.safetensors"),
                          "size mismatch for 0.bias: copying a param with shape [1, 4]");
  tensors[1].second = tensors[1].second.reshape({4});
  auto target = make_model();
  {
    torch::NoGradGuard no_grad;
    target[1]->named_buffers()["num_batches_tracked"].fill_(7);
  }
  dpx::safetensors_save(tensors, dir / "m.safetensors");
  const auto r = dpx::load_state_dict(*target, dir / "m.safetensors");
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_EQ(target[1]->named_buffers()["num_batches_tracked"].item<int64_t>(), 7);
  // A 1-element 1-D tensor into the 0-dim buffer; a 2-element one is a size mismatch.
  tensors.emplace_back("1.num_batches_tracked", torch::tensor({int64_t{5}}));
  dpx::load_state_dict(*target, tensors);
  EXPECT_EQ(target[1]->named_buffers()["num_batches_tracked"].item<int64_t>(), 5);
  EXPECT_EQ(target[1]->named_buffers()["num_batches_tracked"].dim(), 0);
  tensors.back().second = torch::tensor({int64_t{5}, int64_t{6}});
  EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*target, tensors),
                          "size mismatch for 1.num_batches_tracked: copying a param with shape [2]");
}
