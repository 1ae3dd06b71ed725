// torch.save and safetensors files against Python: C++ writes -> Python torch.load(weights_only=
// True) checks, Python writes -> C++ loads and checks; state_dict loading by name; bad files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/checkpoint_files.h"
#include "dpx/checkpoint/checkpointer.h"
#include "dpx/checkpoint/python_format.h"

namespace {

using dpx::test::kModelKeys;
using dpx::test::kVenvPython;
using dpx::test::make_model;
using dpx::test::oracle;
using dpx::test::read_file;
using dpx::test::spit;
using dpx::test::TempDir;
using dpx::test::write_zip_with_pickle;

bool run(const std::string& python, const std::string& mode, const std::string& path) {
  return dpx::test::run_oracle(python, mode + " " + path);
}

c10::IValue expected() {
  auto d = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  d.insert("f32", torch::arange(12, torch::kFloat32).reshape({3, 4}) / 7);
  d.insert("f64", torch::arange(6, torch::kFloat64) * 1.5 - 2);
  d.insert("bf16", (torch::arange(8, torch::kFloat32) / 3).to(torch::kBFloat16));
  d.insert("i64", torch::tensor(
                      {-(int64_t{1} << 40), int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{1} << 40},
                      torch::kInt64));
  d.insert("noncontig", torch::arange(12, torch::kFloat32).reshape({3, 4}).t());
  d.insert("step", int64_t{7});
  d.insert("big", int64_t{1} << 40);
  d.insert("lr", 0.125);
  d.insert("name", std::string("dpx"));
  d.insert("list", c10::impl::GenericList(c10::AnyType::get()));
  auto list = d.at("list").toList();
  list.push_back(int64_t{1});
  list.push_back(2.5);
  list.push_back(std::string("a"));
  auto nested = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  nested.insert("t", torch::ones({2}, torch::kFloat64));
  nested.insert("n", int64_t{-3});
  d.insert("nested", nested);
  return d;
}

void expect_same(const c10::IValue& a, const c10::IValue& b, const std::string& where) {
  if (a.isTensor()) {
    ASSERT_TRUE(b.isTensor()) << where;
    EXPECT_EQ(a.toTensor().scalar_type(), b.toTensor().scalar_type()) << where;
    EXPECT_TRUE(torch::equal(a.toTensor(), b.toTensor())) << where;
  } else if (a.isGenericDict()) {
    ASSERT_TRUE(b.isGenericDict()) << where;
    for (const auto& kv : a.toGenericDict()) {
      ASSERT_TRUE(b.toGenericDict().contains(kv.key())) << where << "." << kv.key();
      expect_same(kv.value(), b.toGenericDict().at(kv.key()), where + "." + kv.key().toStringRef());
    }
  } else if (a.isList()) {
    ASSERT_TRUE(b.isList()) << where;
    ASSERT_EQ(a.toListRef().size(), b.toListRef().size()) << where;
    for (size_t i = 0; i < a.toListRef().size(); ++i) {
      expect_same(a.toListRef()[i], b.toListRef()[i], where + "[" + std::to_string(i) + "]");
    }
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

torch::Tensor filled(const torch::Tensor& like, size_t k) {
  return (torch::arange(like.numel(), torch::kFloat64).reshape(like.sizes()) * 0.25 +
          static_cast<double>(k))
      .to(like.scalar_type());
}

void fill_model(torch::nn::Module& m) {
  torch::NoGradGuard g;
  const auto sd = dpx::state_dict(m);
  for (size_t k = 0; k < kModelKeys.size(); ++k) {
    for (const auto& [name, t] : sd) {
      if (name == kModelKeys[k]) t.copy_(filled(t, k));
    }
  }
}

void expect_filled(const torch::nn::Module& m) {
  const auto sd = dpx::state_dict(m);
  ASSERT_EQ(sd.size(), kModelKeys.size());
  for (size_t k = 0; k < kModelKeys.size(); ++k) {
    for (const auto& [name, t] : sd) {
      if (name == kModelKeys[k]) EXPECT_TRUE(torch::equal(t, filled(t, k))) << name;
    }
  }
}

}  // namespace

TEST(PythonFormatTest, CppWritesPythonTorchLoadReads) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  dpx::torch_save(expected(), dir / "cpp.pt");
  EXPECT_TRUE(oracle("check " + dir / "cpp.pt"));
  // Without floats, which PyTorch 1.13's weights_only unpickler cannot read (no BINFLOAT).
  auto tensors = expected().toGenericDict();
  tensors.erase("lr");
  tensors.erase("list");
  dpx::torch_save(tensors, dir / "tensors.pt");
  EXPECT_TRUE(oracle("check_tensors " + dir / "tensors.pt"));
}

TEST(PythonFormatTest, PythonTorchSaveCppReads) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  ASSERT_TRUE(oracle("write " + dir / "py.pt"));
  const auto loaded = dpx::torch_load(dir / "py.pt");
  expect_same(expected(), loaded, "root");
  // Python saved the transposed view over its storage; it loads as the same view.
  EXPECT_FALSE(loaded.toGenericDict().at("noncontig").toTensor().is_contiguous());
  const auto ordered = loaded.toGenericDict().at("ordered").toGenericDict();
  EXPECT_EQ(ordered.size(), 2u);
  EXPECT_EQ(ordered.at("a").toInt(), 1);
}

TEST(PythonFormatTest, ModuleStateDictBothWaysTorchSave) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  auto model = make_model();
  fill_model(*model);
  dpx::save_state_dict(*model, dir / "cpp.pt");
  EXPECT_TRUE(oracle("check_model " + dir / "cpp.pt"));
  ASSERT_TRUE(oracle("write_model " + dir / "py.pth"));
  auto fresh = make_model();
  const auto r = dpx::load_state_dict(*fresh, dir / "py.pth");
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  expect_filled(*fresh);
}

TEST(PythonFormatTest, ModuleStateDictBothWaysSafetensors) {
  SKIP_WITHOUT(kVenvPython, "safetensors.torch");
  TempDir dir;
  auto model = make_model();
  fill_model(*model);
  dpx::save_state_dict(*model, dir / "cpp.safetensors");
  EXPECT_TRUE(run(kVenvPython, "check_model", dir / "cpp.safetensors"));
  ASSERT_TRUE(run(kVenvPython, "write_model", dir / "py.safetensors"));
  auto fresh = make_model();
  dpx::load_state_dict(*fresh, dir / "py.safetensors");
  expect_filled(*fresh);
}

TEST(PythonFormatTest, SafetensorsDtypesRoundTrip) {
  TempDir dir;
  const auto d = expected().toGenericDict();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const char* k : {"f32", "f64", "bf16", "i64", "noncontig"}) {
    tensors.emplace_back(k, d.at(k).toTensor());
  }
  dpx::safetensors_save(tensors, dir / "t.safetensors", {{"format", "pt"}});
  const auto back = dpx::safetensors_load(dir / "t.safetensors");
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : back) {
    EXPECT_TRUE(torch::equal(t, d.at(name).toTensor())) << name;
    EXPECT_EQ(t.scalar_type(), d.at(name).toTensor().scalar_type()) << name;
  }
}

TEST(PythonFormatTest, StrictLoadNamesEveryBadKey) {
  TempDir dir;
  auto small = torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::Linear(4, 2),
                                     torch::nn::Linear(4, 2), torch::nn::Linear(1, 1));
  dpx::save_state_dict(*small, dir / "s.pt");
  auto model = make_model();
  const auto before = dpx::state_dict(*model)[0].second.clone();
  EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*model, dir / "s.pt"), "Missing key(s)");
  try {
    dpx::load_state_dict(*model, dir / "s.pt");
  } catch (const dpx::CheckpointError& e) {
    const std::string msg = e.what();
    // 1.num_batches_tracked is not missing: a file without _metadata lets the BatchNorm keep
    // its own (Note [Python's loading rules]).
    for (const char* key : {"Missing key(s) in state_dict: \"1.running_mean\", \"1.running_var\".",
                            // Python's order: module by module, then the file's
                            "Unexpected key(s) in state_dict: \"3.weight\", \"3.bias\".",
                            "size mismatch for 0.weight: copying a param with shape [5, 3] from "
                            "checkpoint, the shape in current model is [4, 3].",
                            "size mismatch for 1.weight"}) {
      EXPECT_NE(msg.find(key), std::string::npos) << key << " not in: " << msg;
    }
  }
  EXPECT_TRUE(torch::equal(dpx::state_dict(*model)[0].second, before)) << "module changed";
  // Non-strict: missing and unexpected keys are returned, shape mismatches still refused.
  auto fits = torch::nn::Sequential(torch::nn::Linear(3, 4));
  dpx::save_state_dict(*fits, dir / "fits.pt");
  const auto r = dpx::load_state_dict(*model, dir / "fits.pt", {/*strict=*/false});
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"1.weight", "1.bias", "1.running_mean",
                                                       "1.running_var", "2.weight", "2.bias"}));
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(torch::equal(dpx::state_dict(*model)[0].second, dpx::state_dict(*fits)[0].second));
  EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*model, dir / "s.pt", {false}), "size mismatch");
}

TEST(PythonFormatTest, BadFilesGiveCheckpointError) {
  TempDir dir;
  dpx::torch_save(expected(), dir / "good.pt");
  const std::string good = read_file(dir / "good.pt");
  spit(dir / "truncated.pt", good.substr(0, good.size() / 2));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "truncated.pt"), "not a readable torch.save");
  spit(dir / "magic.pt", "DPXCKPT1 this is not a zip at all");
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "magic.pt"), "not a readable torch.save");
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "absent.pt"), "cannot open");
  // A flipped byte inside a tensor record fails the zip's CRC-32.
  // (torch.load itself does not check them: it would load the wrong weight.)
  std::string flipped = good;
  const float seventh = 1.0f / 7;  // f32[0][1]
  const auto at = flipped.find(std::string(reinterpret_cast<const char*>(&seventh), 4));
  ASSERT_NE(at, std::string::npos);
  flipped[at] ^= 0x10;
  spit(dir / "flipped.pt", flipped);
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "flipped.pt"), "has CRC-32");
  // Globals outside the allow-list are refused before anything runs.
  write_zip_with_pickle(dir / "os.pt", std::string("\x80\x02"
                                                   "cos\nsystem\nX\x04\x00\x00\x00"
                                                   "true\x85R.",
                                                   25));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "os.pt"), "refusing to load global 'os.system'");
  write_zip_with_pickle(dir / "cut.pt", std::string("\x80\x02}(X\x05\x00\x00\x00", 9));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "cut.pt"), "ends early");
  auto model = make_model();
  EXPECT_CHECKPOINT_ERROR(dpx::load_state_dict(*model, dir / "good.pt"), "not a state_dict");
  // safetensors: wrong magic and truncation.
  spit(dir / "bad.safetensors", good);
  EXPECT_CHECKPOINT_ERROR(dpx::safetensors_load(dir / "bad.safetensors"), "not a safetensors");
  dpx::save_state_dict(*model, dir / "m.safetensors");
  const std::string st = read_file(dir / "m.safetensors");
  spit(dir / "cut.safetensors", st.substr(0, st.size() - 4));
  EXPECT_CHECKPOINT_ERROR(dpx::safetensors_load(dir / "cut.safetensors"), "reach past the end");
}

TEST(PythonFormatTest, PythonMainObjectIsRefused) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  ASSERT_TRUE(oracle("write_evil " + dir / "evil.pt"));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "evil.pt"),
                          "refusing to load global '__main__.Evil'");
}

TEST(PythonFormatTest, CheckpointerTorchSaveFormatRoundTripsAndPythonLoadsIt) {
  TempDir dir;
  torch::manual_seed(0);
  auto model = make_model();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  for (int i = 0; i < 2; ++i) {
    adam.zero_grad();
    model->forward(torch::randn({4, 3})).pow(2).sum().backward();
    adam.step();
  }
  dpx::CheckpointerOptions options;
  options.directory = dir.path();
  options.format = dpx::CheckpointFormat::kTorchSave;
  dpx::Checkpointer checkpointer(options, nullptr);
  const auto path = checkpointer.save(*model, adam, {1, 3, 24});
  EXPECT_EQ(path.substr(path.size() - 3), ".pt");
  if (dpx::test::python_runs(DPX_PYTHON, "import torch")) {
    EXPECT_TRUE(oracle("check_ckpt " + path));
  }
  torch::manual_seed(1);
  auto fresh = make_model();
  torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(0.5));
  const auto progress = checkpointer.load_latest(*fresh, fresh_adam);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->epoch, 1);
  EXPECT_EQ(progress->step, 3);
  EXPECT_EQ(progress->sampler_position, 24);
  const auto a = dpx::state_dict(*model), b = dpx::state_dict(*fresh);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  EXPECT_DOUBLE_EQ(
      static_cast<torch::optim::AdamOptions&>(fresh_adam.param_groups()[0].options()).lr(), 0.01);
  // The next step from either optimizer gives the same parameters.
  for (auto* m : {&model, &fresh}) {
    auto& opt = m == &model ? adam : fresh_adam;
    opt.zero_grad();
    (*m)->forward(torch::ones({4, 3})).pow(2).sum().backward();
    opt.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  // A damaged newest file is skipped for the previous one, as in the dpx format.
  checkpointer.save(*model, adam, {1, 4, 24});
  const auto newest = checkpointer.path_for_step(4);
  const std::string bytes = read_file(newest);
  spit(newest, bytes.substr(0, bytes.size() - 10));
  EXPECT_EQ(checkpointer.load_latest(*fresh, fresh_adam)->step, 3);
}
