// Weights files Python reads and writes (dpx/checkpoint/state_dict.h): torch.save's format
// against the oracle PyTorch of this build in both directions (torch.load(weights_only=True)),
// safetensors against the safetensors package, and bad files refused with CheckpointError.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/state_dict.h"
#include "expect_throws.h"
#include "harness.h"
#include "launcher_harness.h"

namespace dpx {
namespace {

using test::expect_throws;

// The same tensors as recipe() in tests/python/weights_reference.py.
NamedTensors recipe() {
  return {{"f32", torch::arange(12, torch::kFloat).reshape({3, 4}) / 7},
          {"f64", torch::arange(5, torch::kDouble) * 1.5 - 2},
          {"bf16", (torch::arange(6, torch::kFloat) / 3).to(torch::kBFloat16).reshape({2, 3})},
          {"i64", torch::arange(4, torch::kLong) * 1000000007},
          {"nc", torch::arange(12, torch::kFloat).reshape({3, 4}).t()},
          {"scalar", torch::tensor(2.5)},
          {"block.sub.weight", torch::ones({2, 2})}};
}

// The same layers and values as Net in weights_reference.py.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

std::string python_script() { return DPX_SOURCE_DIR "/tests/python/weights_reference.py"; }

// Runs the reference with `python`; false (and the log in `log`) when it failed.
bool run_python(const std::string& python, const std::string& args, const std::string& log) {
  return std::system(("timeout 120 " + python + " " + python_script() + " " + args + " > " +
                      log + " 2>&1").c_str()) == 0;
}

bool imports(const std::string& python, const std::string& module) {
  return std::system((python + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0;
}

// The safetensors oracle: the project's .venv (scripts/setup.sh installs it), for both builds.
const std::string kVenvPython = DPX_SOURCE_DIR "/.venv/bin/python";

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

// What Python read (weights_reference.py read) equals `expected`, name by name, bit for bit.
void expect_python_read(const std::string& json_path, const NamedTensors& expected) {
  std::ifstream in(json_path);
  const auto got = nlohmann::json::parse(in);
  ASSERT_EQ(got.size(), expected.size()) << got.dump();
  for (const auto& [name, t] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.contains(name));
    EXPECT_EQ(got[name]["dtype"], dtype_name(t.scalar_type()));
    EXPECT_EQ(got[name]["shape"].get<std::vector<int64_t>>(), t.sizes().vec());
    const auto values = got[name]["values"].get<std::vector<double>>();
    const auto mine = t.to(torch::kDouble).contiguous();
    EXPECT_TRUE(torch::tensor(values, torch::kDouble).equal(mine.reshape({-1})));
  }
}

void expect_same(const NamedTensors& got, const NamedTensors& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(expected[i].first);
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_EQ(got[i].second.scalar_type(), expected[i].second.scalar_type());
    EXPECT_TRUE(got[i].second.equal(expected[i].second));
  }
}

#define DPX_SKIP_WITHOUT_ORACLE()                                                            \
  if (!imports(DPX_PYTHON, "torch"))                                                         \
  GTEST_SKIP() << "SKIPPED: " DPX_PYTHON " (the oracle of LibTorch " DPX_TORCH_VERSION       \
                  ") cannot import torch; scripts/setup.sh installs it"

TEST(WeightsAgainstPython, WhatDpxWritesTorchLoadReadsWithWeightsOnly) {
  DPX_SKIP_WITHOUT_ORACLE();
  test::TempDir dir;
  save_weights(recipe(), dir.path() + "/dpx.pt");
  ASSERT_TRUE(run_python(DPX_PYTHON, "read " + dir.path() + "/dpx.pt " + dir.path() + "/out.json",
                         dir.path() + "/log"))
      << test::read_file(dir.path() + "/log");
  expect_python_read(dir.path() + "/out.json", recipe());
}

TEST(WeightsAgainstPython, WhatTorchSaveWritesDpxReadsAndLoadsIntoAModule) {
  DPX_SKIP_WITHOUT_ORACLE();
  test::TempDir dir;
  ASSERT_TRUE(run_python(DPX_PYTHON, "write " + dir.path(), dir.path() + "/log"))
      << test::read_file(dir.path() + "/log");
  expect_same(load_weights(dir.path() + "/tensors.pt"), recipe());
  Net net;
  const auto result = load_state_dict(*net, dir.path() + "/model.pt");  // strict
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  EXPECT_TRUE(net->fc->weight.equal(torch::arange(6, torch::kFloat).reshape({2, 3}) / 10));
  EXPECT_TRUE(net->fc->bias.equal(torch::tensor({0.5f, -0.5f})));
  EXPECT_TRUE(net->bn->running_mean.equal(torch::full({2}, 0.25f)));
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 7);
  EXPECT_TRUE(net->bn->weight.equal(torch::ones({2})));
}

TEST(WeightsAgainstPython, SafetensorsBothWays) {
  if (!imports(kVenvPython, "safetensors")) {
    GTEST_SKIP() << "SKIPPED: " << kVenvPython << " has no safetensors package (scripts/setup.sh "
                    "installs it)";
  }
  test::TempDir dir;
  save_weights(recipe(), dir.path() + "/dpx.safetensors");
  ASSERT_TRUE(run_python(kVenvPython, "read " + dir.path() + "/dpx.safetensors " + dir.path() +
                         "/out.json", dir.path() + "/log"))
      << test::read_file(dir.path() + "/log");
  expect_python_read(dir.path() + "/out.json", recipe());
  ASSERT_TRUE(run_python(kVenvPython, "write " + dir.path(), dir.path() + "/log"))
      << test::read_file(dir.path() + "/log");
  auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
  auto theirs = load_weights(dir.path() + "/tensors.safetensors");
  std::sort(theirs.begin(), theirs.end(), by_name);  // the package orders tensors its own way
  auto expected = recipe();
  std::sort(expected.begin(), expected.end(), by_name);
  expect_same(theirs, expected);
}

TEST(WeightsFile, RoundTripsEveryDtypeInBothFormats) {
  test::TempDir dir;
  for (const std::string name : {"w.pt", "w.pth", "w.safetensors"}) {
    SCOPED_TRACE(name);
    save_weights(recipe(), dir.path() + "/" + name);
    expect_same(load_weights(dir.path() + "/" + name), recipe());
  }
  Net a, b;
  save_state_dict(*a, dir.path() + "/net.pt");
  load_state_dict(*b, dir.path() + "/net.pt");
  EXPECT_TRUE(a->fc->weight.equal(b->fc->weight));
}

TEST(WeightsFile, BadFilesAreCheckpointErrorsNamingThem) {
  DPX_SKIP_WITHOUT_ORACLE();
  test::TempDir dir;
  const std::string good = dir.path() + "/good.pt";
  save_weights(recipe(), good);
  const std::string bytes = test::read_file(good);
  std::ofstream(dir.path() + "/half.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(dir.path() + "/text.pt") << "not a checkpoint\n";
  std::string st = test::read_file((save_weights(recipe(), dir.path() + "/s.safetensors"),
                                    dir.path() + "/s.safetensors"));
  std::ofstream(dir.path() + "/cut.safetensors", std::ios::binary) << st.substr(0, st.size() - 9);
  auto says = [&](const std::string& file, const std::string& what) {
    const auto msg = expect_throws<CheckpointError>([&] { load_weights(dir.path() + "/" + file); });
    EXPECT_NE(msg.find(dir.path() + "/" + file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  says("half.pt", "is not a readable torch.save file");
  says("text.pt", "is not a torch.save file");
  says("missing.pt", "cannot be opened");
  says("cut.safetensors", "data_offsets do not fit");
  ASSERT_TRUE(run_python(DPX_PYTHON, "evil " + dir.path(), dir.path() + "/log"))
      << test::read_file(dir.path() + "/log");
  says("evil.pt", "refers to posix.system");
  says("object.pt", "refers to __main__.Payload");
}

TEST(WeightsFile, LoadStateDictNamesEveryBadKeyOrLoadsWhatBothHave) {
  test::TempDir dir;
  NamedTensors file = state_dict(*Net());
  file.erase(file.begin());                                // fc.weight: missing
  file.emplace_back("extra.bias", torch::zeros({1}));     // unexpected
  for (auto& [name, t] : file) {
    if (name == "bn.running_var") t = torch::ones({3});  // mis-shaped
  }
  save_weights(file, dir.path() + "/w.pt");
  Net net;
  auto msg = expect_throws<CheckpointError>([&] { load_state_dict(*net, dir.path() + "/w.pt"); });
  EXPECT_NE(msg.find("Missing key(s) in state_dict: \"fc.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"extra.bias\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("size mismatch for bn.running_var: copying a param with shape "
                     "torch.Size([3]) from checkpoint, the shape in current model is "
                     "torch.Size([2])"), std::string::npos) << msg;
  for (auto& [name, t] : file) {
    if (name == "bn.running_var") t = torch::full({2}, 3.0f);
  }
  save_weights(file, dir.path() + "/w.pt");
  const auto result = load_state_dict(*net, dir.path() + "/w.pt", {.strict = false});
  EXPECT_EQ(result.missing_keys, std::vector<std::string>{"fc.weight"});
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"extra.bias"});
  EXPECT_TRUE(net->bn->running_var.equal(torch::full({2}, 3.0f)));
}

}  // namespace
}  // namespace dpx
