#include "fuzz/pickle_seeds.h"

#include <caffe2/serialize/inline_container.h>
#include <dirent.h>
#include <torch/torch.h>

#include <fstream>

#include "dpx/checkpoint/python_format.h"

namespace dpx::fuzz {
namespace {

SeedFile read_seed(const std::string& path, const std::string& name) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  SeedFile seed{name, {}, {}};
  for (const auto& record : reader.getAllRecords()) {
    const auto [data, size] = reader.getRecord(record);
    std::string bytes(static_cast<const char*>(data.get()), size);
    if (record == "data.pkl") {
      seed.pickle = std::move(bytes);
    } else if (record.rfind(".data/", 0) != 0 && record != "version" && record[0] != '.') {
      seed.records.emplace_back(record, std::move(bytes));
    }
  }
  return seed;
}

c10::IValue assorted_values() {
  auto d = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  d.insert("f32", torch::arange(12, torch::kFloat32).reshape({3, 4}) / 7);
  d.insert("t", torch::arange(6, torch::kFloat64).reshape({2, 3}).t());
  d.insert("bf16", torch::ones({2}, torch::kBFloat16));
  d.insert("i8", torch::tensor({-1, 2}, torch::kInt8));
  d.insert("b", torch::tensor({true, false}));
  d.insert("scalar", torch::tensor(3));
  d.insert("big", int64_t{1} << 40);
  d.insert("neg", int64_t{-300});
  d.insert("lr", 0.125);
  d.insert("s", std::string("dpx"));
  d.insert("none", c10::IValue());
  d.insert("tuple", c10::ivalue::Tuple::create({int64_t{1}, std::string("a"), true}));
  auto list = c10::impl::GenericList(c10::AnyType::get());
  list.push_back(int64_t{1});
  list.push_back(2.5);
  list.push_back(torch::zeros({0}));
  d.insert("list", list);
  return d;
}

// Python's torch.save of OrderedDict([('w', Parameter(2 floats)), ('v', a view of the same
// storage)]) with _metadata {'': {'version': 1}}: memo, BUILD, _rebuild_parameter.
std::string python_style_pickle() {
  static const char kPickle[] =
      "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00wq\x02"
      "ctorch._utils\n_rebuild_parameter\nq\x03" "ctorch._utils\n_rebuild_tensor_v2\nq\x04"
      "((X\x07\x00\x00\x00storageq\x05" "ctorch\nFloatStorage\nq\x06X\x01\x00\x00\x00" "0q\x07"
      "X\x03\x00\x00\x00" "cpuq\x08K\x04tq\tQK\x00K\x02\x85K\x01\x85\x89h\x00)Rq\ntq\x0bRq\x0c"
      "\x88h\x00)Rq\r\x87Rq\x0eX\x01\x00\x00\x00vq\x0fh\x04((h\x05h\x06h\x07h\x08K\x04tQK\x02"
      "K\x02K\x01\x86K\x01K\x02\x86\x89h\x00)Rtq\x10Rq\x11u}q\x12X\t\x00\x00\x00_metadataq\x13"
      "h\x00)Rq\x14X\x00\x00\x00\x00}q\x15X\x07\x00\x00\x00versionq\x16K\x01sssb.";
  return std::string(kPickle, sizeof(kPickle) - 1);
}

}  // namespace

void write_seed_file(const std::string& path, const std::string& pickle,
                     const std::vector<std::pair<std::string, std::string>>& records) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    return n;
  });
  w.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [name, bytes] : records) w.writeRecord(name, bytes.data(), bytes.size());
  w.writeEndOfFile();
}

std::vector<SeedFile> builtin_seeds(const std::string& dir) {
  std::vector<SeedFile> seeds;
  dpx::torch_save(assorted_values(), dir + "/assorted.pt");
  seeds.push_back(read_seed(dir + "/assorted.pt", "assorted"));
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  dpx::save_state_dict(*model, dir + "/model.pt");
  seeds.push_back(read_seed(dir + "/model.pt", "model"));
  const float data[4] = {1, 2, 3, 4};
  const std::string storage(reinterpret_cast<const char*>(data), sizeof(data));
  seeds.push_back({"python_style", python_style_pickle(), {{"byteorder", "little"},
                                                           {"data/0", storage}}});
  return seeds;
}

std::vector<SeedFile> seeds_from_dir(const std::string& dir) {
  std::vector<SeedFile> seeds;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return seeds;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) {
      seeds.push_back(read_seed(dir + "/" + name, name));
    }
  }
  ::closedir(d);
  return seeds;
}

}  // namespace dpx::fuzz
